"""Memory on resume, with the services as processes and the executor talking to a
chat-completions stub: a WorkItem reads a file, waits for a callback (its focus released) and is
picked again in the turn the callback wakes. The request after that PickWorkItem shows the
item's process trace with the file's content; the turn's first request, with no item current
yet, does not; and the memory is shown once in the turn, not again after a second pick."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_executor_search_bounds import STEADY_LEASE
from tests.unit.test_provider_openai import completion, function_call, serving

FACT = "The vault code is 7319-ALPHA."


def trace_of(request: dict[str, Any]) -> list[str]:
    return [
        str(m["content"])
        for m in request["messages"]
        if m["role"] == "user" and str(m["content"]).startswith("## Process trace")
    ]


@dataclass
class Resuming:
    """Turn 1: create an item, pick it, read facts.txt, wait for a callback. Turn 2 (the
    callback's review): pick the item again, create a sibling and pick it, then the item again,
    then stop."""

    base_url: str = ""
    item_id: str = ""
    sibling_id: str = ""
    turns: list[list[dict[str, Any]]] = field(default_factory=list)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        if not any(m["role"] == "assistant" for m in messages):
            self.turns.append([])
        self.turns[-1].append(request)
        step = len(self.turns[-1])
        tools = [m for m in messages if m["role"] == "tool"]
        if len(self.turns) == 1:
            return self._first_turn(step, tools)
        return self._review_turn(step, tools)

    def _first_turn(self, step: int, tools: list[dict[str, Any]]) -> dict[str, Any]:
        if step == 1:
            args = {"objective": "Open the vault", "plan_status": "ready"}
            return call("c1", "CreateWorkItem", args)
        if step == 2:
            self.item_id = json.loads(tools[-1]["content"])["result"]["work_item"]["id"]
            return call("c2", "PickWorkItem", {"work_item_id": self.item_id})
        if step == 3:
            return call("c3", "ReadFile", {"path": "facts.txt"})
        return call("c5", "WaitFor", {"reason": "the vault's callback", "wake": "external"})

    def _review_turn(self, step: int, tools: list[dict[str, Any]]) -> dict[str, Any]:
        pick = {"work_item_id": self.item_id, "reason": "the callback came", "clear_blocker": True}
        if step == 1:
            return call("r1", "PickWorkItem", pick)
        if step == 2:
            # Created here, not in the first turn: an open sibling there is a queued candidate,
            # and its pick_queued tick would run this review before the callback came.
            return call("r2", "CreateWorkItem", {"objective": "Polish the vault door"})
        if step == 3:
            self.sibling_id = json.loads(tools[-1]["content"])["result"]["work_item"]["id"]
            sibling = {"work_item_id": self.sibling_id, "reason": "a look at the door"}
            return call("r3", "PickWorkItem", sibling)
        if step == 4:
            return call("r4", "PickWorkItem", {**pick, "clear_blocker": False})
        return completion("The vault code is known; opening it next turn.")

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        raw = json.dumps(self.answer(json.loads(body))).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


def call(call_id: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return completion("", [function_call(call_id, tool, json.dumps(args))], "tool_calls")


@pytest.mark.timeout(300)  # four service processes on a loaded machine
async def test_a_work_item_picked_again_after_its_wait_sees_what_it_read(spawn, tmp_path) -> None:
    (tmp_path / "home" / "keeper").mkdir(parents=True)
    (tmp_path / "home" / "keeper" / "facts.txt").write_text(FACT + "\n")
    async with serving(Resuming()) as model:
        stack = Stack(spawn)
        await stack.start(
            LONGRUN_PROVIDER="openai",
            LONGRUN_OPENAI_BASE_URL=model.base_url,
            LONGRUN_OPENAI_API_KEY="sk-stub",
            LONGRUN_MODEL="stub-model",
            **STEADY_LEASE,
        )
        async with stack.http() as http:
            created = await http.put("/v1/agents/keeper")
            assert created.status_code == 201, created.text
            said = await http.post("/v1/agents/keeper/messages", json={"text": "Open the vault."})
            assert said.status_code == 202, said.text

            async def turns_finished(count: int) -> bool:
                return len(of_type(await history(http, "keeper"), "turn_finished")) >= count

            await poll(lambda: turns_finished(1), "the first turn to wait")
            answered = await http.post(created.json()["callback_url"], json={"open": True})
            assert answered.status_code == 202, answered.text
            assert answered.json()["disposition"] == "triggered"
            await poll(lambda: turns_finished(2), "the review turn")

    first, review = model.turns[0], model.turns[1]
    assert not any(FACT in text for request in first for text in trace_of(request))
    assert trace_of(review[0]) == []  # nothing is current when the callback's turn opens
    (shown,) = trace_of(review[1])  # after PickWorkItem: the item's own trace
    assert shown.startswith(f"## Process trace of {model.item_id}")
    assert FACT in shown
    # Picked again later in the same turn: not shown a second time.
    assert [len(trace_of(request)) for request in review[1:]] == [1, 1, 1, 1]
    assert len(review) == 5
