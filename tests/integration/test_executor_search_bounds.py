"""SearchFiles cannot stall an executor: the services as processes, the executor talking to a
chat-completions stub. One builtin agent's model asks for catastrophic regexes of several
shapes in one round; while they run out LONGRUN_SEARCH_TIMEOUT_MS, a second agent on the same
executor reads a file round after round, each tool answer reaching the model within 1 s of its
call; the first agent's model is then told `pattern_too_slow` for each, and both turns end."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.unit.test_provider_openai import completion, function_call, serving

HOSTILE = "\n".join(["a" * 40 + "!", "1" * 60 + "x", "a," * 40]) + "\n"
SHAPES = [r"(a|a)+$", r"^(\d|\d\d)+$", r"(.*?,){30}X"]
READER_ROUNDS = 6
STEADY_LEASE = {"LONGRUN_LEASE_TTL_MS": "10000", "LONGRUN_RECLAIM_IDLE_MS": "20000"}
"""The executor's lease outlives a loaded machine's stalls (the fixtures' 1 s lease does not,
and a lost lease retries the turn, which these scripted models do not expect)."""


@dataclass
class TwoAgents:
    """Plays both agents' models, told apart by the system prompt's first line. The reader's
    first answer waits until the searcher's searches were asked for, so its rounds run while
    they do; `gaps` holds, per reader round, the seconds between a tool call's answer leaving
    here and the next request bringing its result."""

    base_url: str = ""
    searched: asyncio.Event = field(default_factory=asyncio.Event)
    asked: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    sent_at: float | None = None
    gaps: list[float] = field(default_factory=list)

    async def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        who = "searcher" if "You are searcher" in messages[0]["content"] else "reader"
        self.asked.setdefault(who, []).append(request)
        rounds = sum(1 for m in messages if m["role"] == "assistant")
        if who == "searcher":
            if rounds:
                return completion("Those patterns were too slow; done for now.")
            calls = [
                function_call(f"s{n}", "SearchFiles", json.dumps({"pattern": pattern}))
                for n, pattern in enumerate(SHAPES)
            ]
            self.searched.set()
            return completion("Searching.", calls, "tool_calls")
        if rounds == 0:
            await self.searched.wait()
        elif self.sent_at is not None:
            self.gaps.append(time.monotonic() - self.sent_at)
        if rounds == READER_ROUNDS:
            return completion("Read it enough.")
        call = function_call(f"r{rounds}", "ReadFile", json.dumps({"path": "notes.txt"}))
        self.sent_at = time.monotonic()
        return completion("Reading.", [call], "tool_calls")

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        raw = json.dumps(await self.answer(json.loads(body))).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


@pytest.mark.timeout(300)  # four service processes on a loaded machine
async def test_catastrophic_searches_do_not_stall_another_agents_turn(spawn, tmp_path) -> None:
    home = tmp_path / "home"
    for agent_id, name, text in [("searcher", "input.txt", HOSTILE), ("reader", "notes.txt", "hi")]:
        (home / agent_id).mkdir(parents=True)
        (home / agent_id / name).write_text(text)
    async with serving(TwoAgents()) as model:
        stack = Stack(spawn)
        await stack.start(
            LONGRUN_PROVIDER="openai",
            LONGRUN_OPENAI_BASE_URL=model.base_url,
            LONGRUN_OPENAI_API_KEY="sk-stub",
            LONGRUN_MODEL="stub-model",
            **STEADY_LEASE,
        )
        async with stack.http() as http:
            for agent_id in ("searcher", "reader"):
                assert (await http.put(f"/v1/agents/{agent_id}")).status_code == 201
                said = await http.post(f"/v1/agents/{agent_id}/messages", json={"text": "Go."})
                assert said.status_code in (200, 201, 202), said.text

            async def both_finished() -> bool:
                for agent_id in ("searcher", "reader"):
                    if not of_type(await history(http, agent_id), "turn_finished"):
                        return False
                return True

            await poll(both_finished, "both turns finished", within=180)
            finished = {
                agent_id: of_type(await history(http, agent_id), "turn_finished")
                for agent_id in ("searcher", "reader")
            }

    assert len(model.gaps) == READER_ROUNDS, model.gaps
    assert max(model.gaps) < 1.0, model.gaps
    _, second = model.asked["searcher"]
    answers = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == ["s0", "s1", "s2"]
    for message in answers:
        assert json.loads(message["content"])["error"]["kind"] == "pattern_too_slow"
    for events in finished.values():
        assert [e["data"]["outcome"] for e in events] == ["yielded"]
