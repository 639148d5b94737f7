"""kill -9 of the executor while an MCP call is in flight, with every service a real process: the
model (a chat-completions stub) asks for a slow tool of a real MCP server over HTTP, the executor
is killed while the server holds the call, and another executor retries the turn. Its first
model request names exactly that call as started by an interrupted turn with its outcome
unknown, the server saw the call once (longrun never repeats it), the history says
`unknown`, and run telemetry counts the killed turn as a crash and its call as an unknown
outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_executor_mcp import calls_log, http_url, logged
from tests.unit.test_provider_openai import ChatServer, completion, function_call, serving

__all__ = ["calls_log", "http_url"]


@pytest.fixture
def log(calls_log: Path) -> Path:
    calls_log.write_text("")
    return calls_log


def notices(request: dict[str, Any]) -> list[str]:
    """The lines of a model request that tell of a call started by an interrupted turn."""
    text = "\n".join(str(m.get("content") or "") for m in request["messages"])
    return [line for line in text.splitlines() if "was started by an interrupted turn" in line]


def stub_model() -> ChatServer:
    """Asks for the slow tool, then (in the retry turn) answers with text."""
    chat = ChatServer()
    slow = function_call("call_slow", "web__slow", '{"seconds": 3600}')
    chat.replies.append((200, completion("Looking it up.", [slow], "tool_calls"), {}))
    chat.replies.append((200, completion("It may have run; I will check before repeating."), {}))
    return chat


async def test_a_call_in_flight_when_the_executor_dies_is_told_once_and_never_repeated(
    spawn: Any, http_url: str, log: Path
) -> None:
    async with serving(stub_model()) as chat:
        env = {
            "LONGRUN_PROVIDER": "openai",
            "LONGRUN_OPENAI_BASE_URL": chat.base_url,
            "LONGRUN_OPENAI_API_KEY": "stub",
            "LONGRUN_MODEL": "stub-model",
        }
        stack = Stack(spawn)
        await stack.start(**env)
        async with stack.http() as http:
            spec = {
                "tools": {"mcp_servers": [{"name": "web", "transport": "http", "url": http_url}]}
            }
            assert (await http.put("/v1/agents/ada", json={"spec": spec})).status_code == 201
            # The turns work on a WorkItem the operator picked, so run telemetry counts them.
            made = await http.post(
                "/v1/agents/ada/tools/CreateWorkItem", json={"args": {"objective": "look up"}}
            )
            assert made.status_code == 200, made.text
            item = made.json()["result"]["work_item"]["id"]
            picked = await http.post(
                "/v1/agents/ada/tools/PickWorkItem",
                json={"args": {"work_item_id": item, "reason": "the operator's"}},
            )
            assert picked.status_code == 200, picked.text
            said = await http.post("/v1/agents/ada/messages", json={"text": "Look it up."})
            assert said.status_code == 202, said.text

            async def at_the_server() -> list[dict[str, Any]]:
                return [line for line in logged(log) if line["tool"] == "slow"]

            (call,) = await poll(at_the_server, "the slow call at the server")
            stack.executors[0].kill9()  # while the server still holds the call
            await stack.add_executor(**env)

            async def retried() -> bool:
                return len(chat.requests) >= 2

            await poll(retried, "the retry turn's first model request")
            assert notices(chat.requests[1]) == [
                f'call {call["call_id"]}: web__slow({{"seconds":3600}}) was started by an '
                "interrupted turn; its outcome is unknown: check before repeating it"
            ]

            async def recorded() -> list[dict[str, Any]]:
                events = await history(http, "ada")
                return events if of_type(events, "tool_call_finished") else []

            events = await poll(recorded, "the unknown outcome recorded")

            async def noted() -> list[dict[str, Any]]:
                page = await http.get("/v1/agents/ada/transcript", params={"limit": 1000})
                entries: list[dict[str, Any]] = page.json()["entries"]
                return entries if any(e["role"] == "system" for e in entries) else []

            transcript = await poll(noted, "the notice in the transcript")

            async def telemetry() -> dict[str, Any] | None:
                page = await http.get(f"/v1/agents/ada/work-items/{item}/telemetry")
                assert page.status_code == 200, page.text
                run: dict[str, Any] = page.json()
                return run if run["turns"] >= 2 else None  # the item stays runnable: more turns

            run = await poll(telemetry, "the killed turn and its retry in the run telemetry")
    (started,) = of_type(events, "tool_call_started")
    # The killed turn is a crash; its call is an unknown outcome, not an error (the later turns
    # only answer text).
    assert (run["crashes"], run["tool_calls"], run["tool_errors"]) == (1, 1, 0)
    assert [(s["seq"], s["kind"]) for s in run["failed_steps"]] == [
        (started["seq"], "unknown_outcome"),
        (of_type(events, "turn_finished")[0]["seq"], "turn_crashed"),
    ]
    (end,) = of_type(events, "tool_call_finished")
    assert started["data"]["call_id"] == end["data"]["call_id"] == call["call_id"]
    assert end["data"]["outcome"] == "unknown"
    assert [line["call_id"] for line in logged(log)] == [call["call_id"]]
    # The notice is in the transcript too, so the traces of later turns keep showing it.
    told = [e for e in transcript if e["role"] == "system"]
    assert [e["content"] for e in told] == notices(chat.requests[1])
