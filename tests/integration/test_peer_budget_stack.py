"""Two agents that always answer each other's messages, with every service a real process and
a chat-completions stub that answers every turn with a SendMessage back: the peer wakes spend
each recipient's wake budget (only outside input resets it), so the exchange stops when the
budgets are spent. A naive implementation (a peer message as fresh input) never stops: the test
counts the model requests."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_spawn_stack import _agent_of, _call, stub_env
from tests.unit.test_provider_openai import completion, serving

BUDGET = 3
PEERS = {"ping": "pong", "pong": "ping"}


@dataclass
class EchoChat:
    """Every turn: SendMessage to the other agent, answering the newest message shown."""

    base_url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        if request["messages"][-1]["role"] == "tool":
            return completion("Sent.")
        agent = _agent_of(request)
        shown = json.dumps(request["messages"])
        asked = re.findall(r"Message from agent \S+ \((msg_[0-9A-Z]+)", shown)
        args = {"to_agent": PEERS[agent], "text": f"{agent} answers"}
        if asked:
            args["reply_to"] = asked[-1]
        return _call("SendMessage", args)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        request = json.loads(body or b"{}")
        self.requests.append(request)
        raw = json.dumps(self.answer(request)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


async def _at_rest(http: Any, agent: str) -> bool:
    shown = (await http.get(f"/v1/agents/{agent}")).json()
    return bool(
        shown["posture"] in ("idle", "dormant")
        and shown["inbox_pending"] == 0
        and shown["wake_budget"]["used"] == BUDGET
    )


async def _held(http: Any, agent: str) -> bool:
    shown = (await http.get(f"/v1/agents/{agent}")).json()
    reason = shown.get("why_not_running") or {}
    return reason.get("kind") == "wake_budget_exhausted"


@pytest.mark.timeout(300)  # four service processes on a loaded machine
async def test_two_agents_answering_each_other_stop_at_the_wake_budget(spawn: Any) -> None:
    chat = EchoChat()
    async with serving(chat) as model:
        stack = Stack(spawn)
        await stack.start(**stub_env(model.base_url))
        async with stack.http() as http:
            for agent, peer in PEERS.items():
                spec = {"peers": [peer], "limits": {"wake_budget": BUDGET}}
                put = await http.put(f"/v1/agents/{agent}", json={"spec": spec})
                assert put.status_code == 201, put.text
            said = await http.post("/v1/agents/ping/messages", json={"text": "Talk to pong."})
            assert said.status_code == 202, said.text
            # pong is woken by ping's message each time and spends its wakes first; ping,
            # which the operator woke, spends its own on pong's replies; its last message waits
            # in pong's inbox, held.
            await poll(lambda: _held(http, "pong"), "pong held by its wake budget")
            await poll(lambda: _at_rest(http, "ping"), "ping at rest with its budget spent")
            asked = len(chat.requests)
            ping = await history(http, "ping")
            pong = await history(http, "pong")
    # ping's first turn is the operator's (fresh input); every later turn of either agent was
    # woken by the other's message and spent a wake: at most BUDGET each, two requests a turn.
    turns = len(of_type(ping, "turn_started")) + len(of_type(pong, "turn_started"))
    assert turns == 1 + 2 * BUDGET
    assert asked == 2 * turns
    assert len(of_type(pong, "turn_started")) == BUDGET
    assert of_type(pong, "wake_budget_exhausted")
    # The replies name what they answer, and the last message waits, held, in an inbox.
    received = of_type(ping, "peer_message_received") + of_type(pong, "peer_message_received")
    assert len(received) == len(of_type(ping, "message_sent")) + len(of_type(pong, "message_sent"))
    assert all(e["data"]["reply_to"] for e in of_type(ping, "peer_message_received"))
