"""examples/external_loop.py as a user runs it, against a real stack (ledger, scheduler and
ingress processes) and a local OpenAI-protocol stub: a callback wakes the loop through its wake
feed, the model works the WorkItem through the client's tools and completes it with a report;
then the ingress is stopped, a timer fires a tick while it is down, and after the restart the
loop (reconnecting with Last-Event-ID) gets that tick and completes the second WorkItem: every
tick the scheduler published for the agent was worked, none lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from longrun.client import AsyncAgent, AsyncOperator
from longrun.client.models import AgentCreated
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration.conftest import ROOT, ServiceProcess
from tests.integration.stack import INGRESS, LEDGER, OPERATOR_TOKEN, SCHEDULER, SETTINGS, poll
from tests.unit.test_provider_openai import completion, function_call, serving

pytestmark = pytest.mark.timeout(300)
EXAMPLE = ROOT / "examples" / "external_loop.py"
TIMER_MS = 10_000
"""The second WorkItem's timer: long enough for the ingress to stop before it fires."""


@dataclass
class LoopModel:
    """A chat-completions stub that works a review tick the way a model would: pick the item
    clearing its blocker, then complete it with a report; any other tick: nothing to do."""

    base_url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)

    def reply(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        tick = json.loads(prompt.split("\n", 1)[0].removeprefix("Woken by tick: "))
        rounds = sum(1 for m in messages if m["role"] == "tool")
        item = tick["work_item_id"]
        if tick["kind"] != "review_triggered" or item is None or rounds > 1:
            return completion("Nothing to do now.")
        if rounds == 0:
            args = {"work_item_id": item, "clear_blocker": True, "reason": "what I waited for came"}
            return completion(None, [function_call("call_pick", "PickWorkItem", json.dumps(args))])
        call = function_call("call_done", "CompleteWorkItem", json.dumps({"work_item_id": item}))
        return completion(f"Report: {item} is done.", [call], finish="tool_calls")

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        request = json.loads(body)
        self.requests.append(request)
        raw = json.dumps(self.reply(request["messages"])).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


@contextlib.contextmanager
def example(url: str, token: str, model: LoopModel, tmp: Path) -> Iterator[Path]:
    """The example as a process; yields the file its stdout goes to."""
    out = tmp / "loop.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LONGRUN_", "OPENAI_"))}
    env.update(OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="sk-test")
    command = [sys.executable, str(EXAMPLE), "--url", url, "--token", token, "--model", "stub",
               "--state", str(tmp / "last-tick")]  # fmt: skip
    with out.open("wb") as sink:
        proc = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)  # noqa: S603
        try:
            yield out
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


async def wakes_of(redis: AnyRedis, names: Names, agent_id: str, after: str) -> list[Any]:
    """The agent's entries on `<prefix>:wakes` after `after`: (id, fields)."""
    entries: Any = await redis.xrange(names.wakes, min=f"({after}", max="+")
    return [
        (entry_id.decode(), {k.decode(): v.decode() for k, v in fields.items()})
        for entry_id, fields in entries
        if fields.get(b"agent_id") == agent_id.encode()
    ]


async def completed(agent: AsyncAgent, work_item_id: str) -> dict[str, Any] | None:
    view = (await agent.work_item(work_item_id)).work_item
    return view.model_dump() if view.state == "completed" else None


async def test_the_example_loop_wakes_works_and_survives_an_ingress_restart(
    spawn: Callable[..., ServiceProcess], redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    services = [spawn(*LEDGER, **SETTINGS), spawn(*SCHEDULER, **SETTINGS)]
    ingress = spawn(*INGRESS, **SETTINGS)
    for service in [*services, ingress]:
        await service.wait_ready()
    url = f"http://127.0.0.1:{ingress.port}"
    agent_id = "ext-" + secrets.token_hex(4)
    async with serving(LoopModel()) as model, AsyncOperator(url, OPERATOR_TOKEN) as operator:
        created = await operator.create_agent(agent_id, loop="external")
        assert isinstance(created, AgentCreated)
        async with AsyncAgent(url, created.agent_token) as agent:
            first = (await agent.create_work_item("Summarize the report when it arrives")).result
            assert first is not None
            item_a = first["work_item"]["id"]
            wait = (await agent.wait_for("the report", "external", work_item_id=item_a)).result
            assert wait is not None
            with example(url, created.agent_token, model, tmp_path) as out:

                async def listening() -> str | None:
                    found = [line for line in lines(out) if "listening_after" in line]
                    return found[0]["listening_after"] if found else None

                start = await poll(listening, "the loop listening on its feed")
                delivered = await agent.callback(
                    wait["wait"]["callback_url"], {"report": "ready"}, "report-1"
                )
                assert delivered.disposition == "triggered"
                done_a = await poll(lambda: completed(agent, item_a), "item A completed")
                assert done_a["result_summary"] == f"Report: {item_a} is done."

                # A second item waits on a timer; the ingress stops before it fires.
                second = (await agent.create_work_item("Check again later")).result
                assert second is not None
                item_b = second["work_item"]["id"]
                await agent.wait_for(
                    "check later", "timer", work_item_id=item_b, wake_after_ms=TIMER_MS
                )

                async def all_worked() -> bool:
                    worked = {line.get("tick") for line in lines(out)}
                    published = await wakes_of(redis, names, agent_id, start)
                    return all(entry_id in worked for entry_id, _ in published)

                await poll(all_worked, "the loop caught up before the stop")
                await asyncio.to_thread(ingress.stop)
                stopped_ms = int(time.time() * 1000)

                async def review_of_b() -> str | None:
                    for entry_id, fields in await wakes_of(redis, names, agent_id, start):
                        kind, item = fields["kind"], fields["work_item_id"]
                        if item == item_b and kind == "review_triggered":
                            return str(entry_id)
                    return None

                missed = await poll(review_of_b, "the timer's tick while ingress is down", 120)
                assert int(missed.split("-")[0]) > stopped_ms, (
                    "the timer fired before the ingress had stopped: raise TIMER_MS"
                )
                ingress.start()  # the same port: the loop reconnects to it
                await ingress.wait_ready()
                done_b = await poll(lambda: completed(agent, item_b), "item B completed", 120)
                assert done_b["result_summary"] == f"Report: {item_b} is done."

                # The ticks published while B was worked (continue_current) come after it.
                await poll(all_worked, "the loop worked every tick published")
                worked = lines(out)
                published = await wakes_of(redis, names, agent_id, start)
                worked_ids = [line["tick"] for line in worked if "tick" in line]
                assert [entry_id for entry_id, _ in published] == worked_ids
                assert missed in worked_ids
                tools = {line["tick"]: line["tools"] for line in worked if "tick" in line}
                assert tools[missed] == ["PickWorkItem", "CompleteWorkItem"]
                assert (tmp_path / "last-tick").read_text() == worked_ids[-1]
