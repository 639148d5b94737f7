"""Gated WorkItem rounds for the chaos run, and the acceptance gate's invariant.

Each gated agent is an external-loop agent driven over the tools route (no model races the
driver). A round: the operator creates a WorkItem gated by a webhook check of the harness's own
webhook server, the agent picks and completes it, and the driver waits for the verdict. Half the
rounds' webhooks pass; the other half fail the first attempt and pass the next, so the driver
picks and completes the item again after the `acceptance_failed`. Every call carries a command
id, so a retry after a lost answer is applied once.

`check_gate` runs over every agent of the run (the load's, the delegation trees', these): no
WorkItem with acceptance checks reached `done` without every check passing for its last attempt,
announced by exactly one `acceptance_passed` of that attempt. `check_gated` adds, for the gated
rounds: each accepted item ended done, after exactly the attempts its webhook called for, with
one result brief.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from shared.store.client import AnyRedis, connect
from shared.wire.names import Names
from tests.bench.loadgen import AgentEvents, Api, EventWatch, StepTimeout, Target
from tests.chaos.stored import stored_briefs, stored_history, stored_items
from tests.integration.webhook_server import WebhookServer

if TYPE_CHECKING:  # invariants.py imports this module: no import cycle at run time
    from tests.chaos.invariants import Findings

SECRET = "chaos-webhook-secret"
ENV = {"LONGRUN_WEBHOOK_SECRET": SECRET}
"""What the stack needs to sign webhook calls (the harness's server does not check it)."""
VERDICTS = frozenset({"acceptance_passed", "acceptance_failed"})


@dataclass(frozen=True, slots=True)
class GatedOptions:
    agents: int = 4
    duration: float = 40.0
    """New rounds start only within this many seconds."""
    step_timeout: float = 60.0
    pause: float = 0.5
    run_id: str = "gate"


@dataclass(frozen=True, slots=True)
class GatedItem:
    agent: str
    work_item_id: str
    attempts: int
    """1 for a webhook that passes, 2 for one that fails the first attempt."""


@dataclass
class GatedLog:
    agents: list[str] = field(default_factory=list)
    items: list[GatedItem] = field(default_factory=list)
    rounds: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "agents": len(self.agents),
            "rounds": dict(self.rounds),
            "items": len(self.items),
            "failed": self.failed[:20],
        }


class GatedRounds:
    """Drives the rounds; its webhook server runs from `start` until `stop`, past the rounds,
    so a check the scheduler calls again after a restart still gets an answer."""

    def __init__(self, target: Target, options: GatedOptions) -> None:
        self.target = target
        self.options = options
        self.names = Names(target.prefix, target.partitions)
        self.server = WebhookServer()
        self.log = GatedLog(agents=[f"gate-{options.run_id}-{n}" for n in range(options.agents)])

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    async def run(self) -> GatedLog:
        redis = connect(self.target.redis_url, cluster=self.target.cluster)
        api = Api(self.target, timeout=min(30.0, self.options.step_timeout))
        watch = EventWatch(redis, self.names)
        try:
            await watch.start()
            began = time.monotonic()
            await asyncio.gather(*(self._agent(a, api, watch, began) for a in self.log.agents))
        finally:
            await watch.stop()
            await api.close()
            await redis.aclose()
        return self.log

    async def _agent(self, agent: str, api: Api, watch: EventWatch, began: float) -> None:
        events = watch.queue(agent)
        try:
            answer = await self._call(api, "PUT", f"/v1/agents/{agent}", {"loop": "external"})
            _expect(answer, (200, 201))
            for n in itertools.count():
                if time.monotonic() - began > self.options.duration:
                    return
                kind = "passing" if n % 2 else "failing_once"
                await self._round(api, events, agent, f"{agent}-r{n}", kind)
                self.log.rounds[kind] += 1
                await asyncio.sleep(self.options.pause)
        except StepTimeout as exc:
            self.log.failed.append(f"{agent}: {exc}")

    async def _round(self, api: Api, events: AgentEvents, agent: str, key: str, kind: str) -> None:
        path = "/pass" if kind == "passing" else f"/second-attempt-passes/{key}"
        # A long timeout: a call slowed by a loaded machine must not fail a passing check.
        check = {"kind": "webhook", "url": self.server.url(path), "timeout_s": 60}
        args = {"objective": f"Gated {key}", "acceptance": [check]}
        made = await self._tool(api, agent, "CreateWorkItem", f"{key}-create", args=args)
        item = str(made["work_item"]["id"])
        self.log.items.append(GatedItem(agent, item, 1 if kind == "passing" else 2))
        for attempt in (1, 2):
            pick = {"work_item_id": item}
            await self._tool(api, agent, "PickWorkItem", f"{key}-pick-{attempt}", args=pick)
            text = f"Report of {key}, attempt {attempt}."
            await self._tool(
                api, agent, "CompleteWorkItem", f"{key}-complete-{attempt}", args=pick,
                assistant_text=text,
            )  # fmt: skip
            if await self._verdict(events, key, item, attempt) == "acceptance_passed":
                return
        raise StepTimeout(f"{key}: the second attempt failed too")

    async def _verdict(self, events: AgentEvents, key: str, item: str, attempt: int) -> str:
        deadline = time.monotonic() + self.options.step_timeout
        while True:
            try:
                kind, work_item_id, data = await events.get(deadline - time.monotonic())
            except TimeoutError:
                raise StepTimeout(f"{key}: no verdict for attempt {attempt} in time") from None
            if kind in VERDICTS and work_item_id == item and data.get("attempt") == attempt:
                return str(kind)

    async def _call(self, api: Api, method: str, path: str, body: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.options.step_timeout
        return await api.call(
            method, path, json=body, deadline=deadline, on_latency=_ignore, on_retry=_ignore
        )

    async def _tool(
        self, api: Api, agent: str, tool: str, command_id: str, **body: Any
    ) -> dict[str, Any]:
        """The tool's result; a refusal ends the round as failed."""
        path = f"/v1/agents/{agent}/tools/{tool}"
        answer = await self._call(api, "POST", path, {**body, "command_id": command_id})
        _expect(answer, (200,))
        result: dict[str, Any] = answer.json()["result"]
        return result


def _ignore(_: object) -> None:
    return None


def _expect(response: httpx.Response, statuses: tuple[int, ...]) -> None:
    if response.status_code not in statuses:
        raise StepTimeout(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}: {response.text[:300]}"
        )


# ---------------------------------------------------------------------- invariants


def check_gate(
    agent: str,
    docs: Sequence[dict[str, Any]],
    items: Mapping[str, dict[str, Any]],
    found: Findings,
) -> None:
    """No gated WorkItem is done without every check passing for its last attempt, announced
    by exactly one `acceptance_passed` of that attempt (and none of an earlier one)."""
    passed = Counter(
        (str(d["work_item_id"]), (d.get("data") or {}).get("attempt"))
        for d in docs
        if d["type"] == "acceptance_passed"
    )
    for item_id, item in items.items():
        if not item.get("acceptance") or item.get("outcome") != "done":
            continue
        found.figures["gated work items done"] += 1
        name = f"{agent}: gated WorkItem {item_id}"
        ver = item.get("verification") or {}
        verdicts = [c.get("passed") for c in ver.get("checks") or []]
        if ver.get("status") != "passed" or not verdicts or not all(v is True for v in verdicts):
            found.fail(f"{name} is done with verification {ver.get('status')} {verdicts}")
        attempt = ver.get("attempt")
        mine = {a: n for (wi, a), n in passed.items() if wi == item_id}
        if mine != {attempt: 1}:
            found.fail(f"{name} is done at attempt {attempt}; acceptance_passed by attempt {mine}")


async def check_gated(redis: AnyRedis, names: Names, log: GatedLog, found: Findings) -> None:
    """Every accepted gated item ended done after the attempts its webhook called for, with
    one `acceptance_failed` per failed attempt and one result brief."""
    for agent in log.agents:
        docs = await stored_history(redis, names, agent)
        failed = Counter(str(d["work_item_id"]) for d in docs if d["type"] == "acceptance_failed")
        items = await stored_items(redis, names, agent)
        briefs = Counter(
            str(b.get("work_item_id"))
            for b in await stored_briefs(redis, names, agent)
            if b.get("kind") == "result"
        )
        for gated in (g for g in log.items if g.agent == agent):
            name = f"{agent}: gated WorkItem {gated.work_item_id}"
            item = items.get(gated.work_item_id) or {}
            attempt = (item.get("verification") or {}).get("attempt")
            if item.get("outcome") != "done" or attempt != gated.attempts:
                found.fail(f"{name} ended {item.get('outcome')} at attempt {attempt}")
            if failed[gated.work_item_id] != gated.attempts - 1:
                found.fail(f"{name} failed {failed[gated.work_item_id]} times")
            if briefs[gated.work_item_id] != 1:
                found.fail(f"{name} has {briefs[gated.work_item_id]} result briefs")
            found.figures["gated rounds checked"] += 1


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
