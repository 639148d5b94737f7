"""Delegation rounds for the chaos run.

Each tree is three agents, each in a partition of its own: a parent and a child driven over the
tools route (external-loop agents, so no model races the driver), and a builtin grandchild that
the scripted model works. A round: the parent delegates from a fresh root WorkItem to the child,
the child picks the delegated item and delegates to the grandchild; then, in turn, the results
travel back up (the grandchild completes, the child completes with a report, the parent
completes), or the parent cancels its delegation, or the parent completes its root at once; the
last two cancel down the whole tree. Every call carries a command id, so a retry after a lost
answer is applied once. tests/chaos/delegation_checks.py checks what they leave behind.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from shared.store.client import connect
from shared.wire.names import Names
from tests.bench.loadgen import AgentEvents, Api, EventWatch, StepTimeout, Target

KINDS = ("results", "cancel", "parent_ends")
"""How a round ends, in turn: results travel back up, the parent cancels its delegation, or the
parent completes its root WorkItem while the tree below it runs."""
ENDED = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class DelegationOptions:
    trees: int = 3
    duration: float = 40.0
    """New rounds start only within this many seconds."""
    step_timeout: float = 60.0
    pause: float = 0.5
    """Between two rounds of a tree: the rounds load the stack beside the load generator."""
    run_id: str = "dlg"


@dataclass(frozen=True, slots=True)
class Tree:
    parent: str
    child: str
    grandchild: str


@dataclass(frozen=True, slots=True)
class Delegation:
    """One delegation the tools route accepted: its id, who made it from which WorkItem."""

    id: str
    parent: str
    child: str
    round_kind: str


@dataclass
class DelegationLog:
    trees: list[Tree] = field(default_factory=list)
    accepted: list[Delegation] = field(default_factory=list)
    rounds: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)

    @property
    def agents(self) -> list[str]:
        return [*self.external, *self.builtin]

    @property
    def external(self) -> list[str]:
        return [a for t in self.trees for a in (t.parent, t.child)]

    @property
    def builtin(self) -> list[str]:
        return [t.grandchild for t in self.trees]

    def summary(self) -> dict[str, Any]:
        return {
            "trees": len(self.trees),
            "rounds": dict(self.rounds),
            "delegations": len(self.accepted),
            "failed": self.failed[:20],
        }


def spread(names: Names, stem: str, count: int) -> list[str]:
    """`count` agent ids, each in a partition none of the others is in."""
    found: list[str] = []
    for n in itertools.count():
        candidate = f"{stem}-{n}"
        if names.partition(candidate) not in {names.partition(a) for a in found}:
            found.append(candidate)
        if len(found) == count:
            return found
    raise AssertionError("unreachable")


class DelegationRounds:
    def __init__(self, target: Target, options: DelegationOptions) -> None:
        self.target = target
        self.options = options
        self.names = Names(target.prefix, target.partitions)
        self.log = DelegationLog()
        for n in range(options.trees):
            ids = spread(self.names, f"dlg-{options.run_id}-{n}", 3)
            self.log.trees.append(Tree(*ids))

    async def run(self) -> DelegationLog:
        redis = connect(self.target.redis_url, cluster=self.target.cluster)
        api = Api(self.target, timeout=min(30.0, self.options.step_timeout))
        watch = EventWatch(redis, self.names)
        try:
            await watch.start()
            began = time.monotonic()
            await asyncio.gather(*(self._tree(t, api, watch, began) for t in self.log.trees))
        finally:
            await watch.stop()
            await api.close()
            await redis.aclose()
        return self.log

    async def _tree(self, tree: Tree, api: Api, watch: EventWatch, began: float) -> None:
        for agent in (tree.parent, tree.child, tree.grandchild):
            watch.queue(agent)
        loops = {tree.parent: "external", tree.child: "external", tree.grandchild: "builtin"}
        try:
            for agent, loop in loops.items():
                answer = await self._call(api, "PUT", f"/v1/agents/{agent}", {"loop": loop})
                _expect(answer, (200, 201))
            for n in itertools.count():
                if time.monotonic() - began > self.options.duration:
                    return
                kind = KINDS[n % len(KINDS)]
                await Round(self, api, watch, tree, f"{tree.parent}-r{n}", kind).run()
                self.log.rounds[kind] += 1
                await asyncio.sleep(self.options.pause)
        except StepTimeout as exc:
            self.log.failed.append(f"{tree.parent}: {exc}")

    async def _call(self, api: Api, method: str, path: str, body: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.options.step_timeout
        return await api.call(
            method, path, json=body, deadline=deadline, on_latency=_ignore, on_retry=_ignore
        )

    async def tool(self, api: Api, agent: str, tool: str, command_id: str, **body: Any) -> Any:
        """The tool's result; a refusal ends the round as failed."""
        path = f"/v1/agents/{agent}/tools/{tool}"
        answer = await self._call(api, "POST", path, {**body, "command_id": command_id})
        _expect(answer, (200,))
        return answer.json()["result"]


@dataclass
class Round:
    rounds: DelegationRounds
    api: Api
    watch: EventWatch
    tree: Tree
    key: str
    kind: str

    async def _tool(self, agent: str, tool: str, step: str, **body: Any) -> Any:
        return await self.rounds.tool(self.api, agent, tool, f"{self.key}-{step}", **body)

    async def _delegate(self, agent: str, to: str, step: str) -> dict[str, Any]:
        args = {"to_agent": to, "objective": f"Part of {self.key}", "reason": "chaos round"}
        result = await self._tool(agent, "DelegateWorkItem", step, args=args)
        record: dict[str, Any] = result["delegation"]
        self.rounds.log.accepted.append(Delegation(record["id"], agent, to, self.kind))
        return record

    async def _seen(
        self, agent: str, match: Callable[[str, str | None, dict[str, Any]], bool]
    ) -> None:
        events: AgentEvents = self.watch.queue(agent)
        deadline = time.monotonic() + self.rounds.options.step_timeout
        while True:
            try:
                event = await events.get(deadline - time.monotonic())
            except TimeoutError:
                raise StepTimeout(f"{self.key}: {agent} saw nothing in time") from None
            if match(*event):
                return

    async def run(self) -> None:
        t = self.tree
        root = (await self._tool(t.parent, "CreateWorkItem", "root", args={"objective": self.key}))[
            "work_item"
        ]["id"]
        await self._tool(t.parent, "PickWorkItem", "pick-root", args={"work_item_id": root})
        first = await self._delegate(t.parent, t.child, "d1")
        item = first["child_work_item_id"]
        await self._seen(t.child, lambda kind, wi, _: kind == "work_item_created" and wi == item)
        await self._tool(t.child, "PickWorkItem", "pick-child", args={"work_item_id": item})
        second = await self._delegate(t.child, t.grandchild, "d2")
        if self.kind == "cancel":
            args = {"delegation_id": first["id"], "reason": "no longer needed"}
            await self._tool(t.parent, "CancelDelegation", "cancel", args=args)
        elif self.kind == "results":
            await self._seen(t.child, _finished(second["id"]))
            await self._complete(t.child, item, "child")
            await self._seen(t.parent, _finished(first["id"]))
        await self._complete(t.parent, root, "root")

    async def _complete(self, agent: str, item: str, step: str) -> None:
        args = {"work_item_id": item}
        text = f"Report of {self.key} ({step})."
        await self._tool(
            agent, "CompleteWorkItem", f"complete-{step}", args=args, assistant_text=text
        )


def _finished(delegation_id: str) -> Callable[[str, str | None, dict[str, Any]], bool]:
    return lambda kind, _, data: (
        kind == "delegation_finished" and data.get("delegation_id") == delegation_id
    )


def _ignore(_: object) -> None:
    return None


def _expect(response: httpx.Response, statuses: tuple[int, ...]) -> None:
    if response.status_code not in statuses:
        raise StepTimeout(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}: {response.text[:300]}"
        )
