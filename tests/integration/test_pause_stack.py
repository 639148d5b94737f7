"""Pause and resume with every service a real process and the executor talking to a
chat-completions stub. A pause while the model thinks lets that round finish (its tool call
runs) and ends the turn there, outcome `paused`, with no further model request; a message to
the paused agent starts no turn; resume runs the agent again. With `interrupt`, a turn held in
a slow MCP call ends at once (at the next lease renewal), the call is left without an outcome,
and after resume the next turn is told its outcome is unknown and the history records it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_executor_mcp import calls_log, http_url, logged
from tests.integration.test_executor_mcp_crash import notices
from tests.integration.test_executor_search_bounds import STEADY_LEASE
from tests.unit.test_provider_openai import ChatServer, completion, function_call, serving

__all__ = ["calls_log", "http_url"]

QUIET_S = 3.0
"""How long a paused agent is watched for a turn it must not take (an absence has no event to
wait for; the scheduler decides on a message within milliseconds on an idle machine)."""


@pytest.fixture
def log(calls_log: Path) -> Path:
    calls_log.write_text("")
    return calls_log


@dataclass
class GatedChat(ChatServer):
    """A ChatServer that answers its first request only once `gate` opens (recorded at once)."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        first = not self.requests
        chunks: list[bytes] = []

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        while True:
            event = await receive()
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        if first:
            self.requests.append(json.loads(b"".join(chunks) or b"{}"))
            await self.gate.wait()
            self.requests.pop()
        await super().__call__(scope, replay, send)


def stub_env(base_url: str) -> dict[str, str]:
    return {
        "LONGRUN_PROVIDER": "openai",
        "LONGRUN_OPENAI_BASE_URL": base_url,
        "LONGRUN_OPENAI_API_KEY": "stub",
        "LONGRUN_MODEL": "stub-model",
        **STEADY_LEASE,
    }


async def finished(http: Any, agent_id: str, count: int) -> list[dict[str, Any]]:
    events = of_type(await history(http, agent_id), "turn_finished")
    return events if len(events) >= count else []


@pytest.mark.timeout(300)  # four service processes on a loaded machine
async def test_a_pause_ends_the_turn_after_its_round_and_resume_runs_it_again(spawn: Any) -> None:
    chat = GatedChat()
    create = function_call("c1", "CreateWorkItem", json.dumps({"objective": "Tidy the docs"}))
    chat.replies.append((200, completion("", [create], "tool_calls"), {}))
    chat.replies.append((200, completion("Back at it."), {}))
    async with serving(chat) as model:
        stack = Stack(spawn)
        await stack.start(**stub_env(model.base_url))
        async with stack.http() as http:
            assert (await http.put("/v1/agents/pia")).status_code == 201
            said = await http.post("/v1/agents/pia/messages", json={"text": "Tidy up."})
            assert said.status_code == 202, said.text
            await poll(lambda: _asked(model, 1), "the first model request")
            paused = await http.post("/v1/agents/pia/pause", json={"reason": "cost review"})
            assert paused.status_code == 200, paused.text
            # The turn still runs: no reason shows beside posture running until it ends.
            assert paused.json()["posture"] == "running"
            assert paused.json()["why_not_running"] is None
            model.gate.set()
            (end,) = await poll(lambda: finished(http, "pia", 1), "the paused turn's end")
            assert end["data"]["outcome"] == "paused"
            events = await history(http, "pia")
            assert len(of_type(events, "work_item_created")) == 1  # the round finished
            state = (await http.get("/v1/agents/pia")).json()
            assert state["posture"] == "paused"
            assert state["why_not_running"]["kind"] == "paused"
            # A message to the paused agent starts no turn.
            said = await http.post("/v1/agents/pia/messages", json={"text": "Anything new?"})
            assert said.status_code == 202
            await asyncio.sleep(QUIET_S)
            assert len(model.requests) == 1
            assert len(of_type(await history(http, "pia"), "turn_started")) == 1
            resumed = await http.post("/v1/agents/pia/resume")
            assert resumed.status_code == 200, resumed.text
            await poll(lambda: finished(http, "pia", 2), "the turn after resume")
    # The first request after resume (later turns may pick the queued item) shows the message.
    shown = json.dumps(model.requests[1]["messages"])
    assert "Anything new?" in shown  # the message taken while paused


async def _asked(model: ChatServer, count: int) -> bool:
    return len(model.requests) >= count


@pytest.mark.timeout(300)
async def test_an_interrupt_ends_a_turn_held_in_a_call_and_the_next_turn_is_told(
    spawn: Any, http_url: str, log: Path
) -> None:
    chat = ChatServer()
    slow = function_call("call_slow", "web__slow", '{"seconds": 3600}')
    chat.replies.append((200, completion("Looking it up.", [slow], "tool_calls"), {}))
    chat.replies.append((200, completion("It may have run; I will check first."), {}))
    async with serving(chat) as model:
        stack = Stack(spawn)
        await stack.start(**stub_env(model.base_url))
        async with stack.http() as http:
            spec = {
                "tools": {"mcp_servers": [{"name": "web", "transport": "http", "url": http_url}]}
            }
            assert (await http.put("/v1/agents/ivo", json={"spec": spec})).status_code == 201
            said = await http.post("/v1/agents/ivo/messages", json={"text": "Look it up."})
            assert said.status_code == 202, said.text

            async def at_the_server() -> list[dict[str, Any]]:
                return [line for line in logged(log) if line["tool"] == "slow"]

            (call,) = await poll(at_the_server, "the slow call at the server")
            paused = await http.post(
                "/v1/agents/ivo/pause", json={"reason": "runaway", "interrupt": True}
            )
            assert paused.status_code == 200, paused.text
            (end,) = await poll(lambda: finished(http, "ivo", 1), "the interrupted turn's end")
            assert end["data"]["outcome"] == "paused"
            assert end["data"]["error"] == "interrupted by the operator"
            events = await history(http, "ivo")
            assert of_type(events, "tool_call_finished") == []  # no outcome: it was in flight
            assert len(model.requests) == 1
            resumed = await http.post("/v1/agents/ivo/resume")
            assert resumed.status_code == 200, resumed.text
            await poll(lambda: finished(http, "ivo", 2), "the turn after resume")
            events = await history(http, "ivo")
    (started,) = of_type(events, "tool_call_started")
    (unknown,) = of_type(events, "tool_call_finished")
    assert unknown["data"]["call_id"] == started["data"]["call_id"] == call["call_id"]
    assert unknown["data"]["outcome"] == "unknown"
    assert len(notices(model.requests[1])) == 1
    assert [line["call_id"] for line in logged(log)] == [call["call_id"]]  # never repeated


@pytest.mark.timeout(300)
async def test_retire_interrupts_the_running_turn_and_refuses_the_agent(spawn: Any) -> None:
    chat = GatedChat()  # the first request is never answered: the turn is held in it
    async with serving(chat) as model:
        stack = Stack(spawn)
        await stack.start(**stub_env(model.base_url))
        async with stack.http() as http:
            created = await http.put("/v1/agents/rex")
            assert created.status_code == 201, created.text
            token = created.json()["agent_token"]
            item = await http.post(
                "/v1/agents/rex/tools/CreateWorkItem", json={"args": {"objective": "Old job"}}
            )
            assert item.status_code == 200, item.text
            item_id = item.json()["result"]["work_item"]["id"]
            said = await http.post("/v1/agents/rex/messages", json={"text": "Go."})
            assert said.status_code == 202, said.text
            await poll(lambda: _asked(model, 1), "the first model request")
            retired = await http.post("/v1/agents/rex/retire", json={"reason": "replaced"})
            assert retired.status_code == 200, retired.text
            (end,) = await poll(lambda: finished(http, "rex", 1), "the interrupted turn's end")
            assert end["data"]["outcome"] == "paused"
            state = (await http.get("/v1/agents/rex")).json()
            assert state["posture"] == "stopped"
            assert state["why_not_running"]["kind"] == "retired"
            seen = (await http.get(f"/v1/agents/rex/work-items/{item_id}")).json()["work_item"]
            assert seen["outcome"] == "cancelled"
            own = await http.post(
                "/v1/agents/rex/tools/ListWorkItems",
                json={"args": {}},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert own.status_code == 401
            called = await http.post(created.json()["callback_url"], json={"late": True})
            assert called.status_code == 403
            model.gate.set()
    assert len(model.requests) <= 1  # no turn after the retirement
