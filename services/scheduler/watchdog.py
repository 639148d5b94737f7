"""Liveness: a bounded, cursor-based scan of agents that repairs orphans (work owed a tick that
nothing will publish) through the normal tick path, and the sampler of pending counts.

Each step reads at most `batch` agents of one partition (`<prefix>:{pNNN}:agents`, all scored 0,
so lexical order is a stable cursor) and moves on; a full pass over P partitions takes about
P * ceil(agents per partition / batch) steps. Replicas scanning the same agent publish one tick:
the outstanding-tick marker admits one, and only its publisher records the repair.

Agents with their own loop (`external`, docs/contract.md §4) are covered too: the scheduler owes
them a wake on `<prefix>:wakes` as it owes a builtin agent a tick. Their marker records the last
wake published, so work is orphaned when the state calls for a wake other than that one (a lost
wake, or one older than the marker's lifetime that the loop never acted on). For them the
watchdog only records the repair: the `liveness_repaired` event it causes is decided like any
event and publishes the wake. Publishing here as well would wake the loop twice, since the
repair's event moves the agent's history and with it the wake's id.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import structlog

from services.scheduler import policy
from services.scheduler.policy import Decision, TimerRef
from services.scheduler.service import Published, SchedulerService
from shared.domain.index import READINESS_INDEXES
from shared.domain.records import AgentLoop
from shared.domain.views import Readiness
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.store.snapshots import AgentView
from shared.wire import commands as c
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.scheduler")


SLICE = 10
"""Agents decided between two awaits of a step: each decision is CPU work that holds the event
loop (about 0.2 ms), so a step over 100 agents in one go held every batch in flight for 20 ms
and more, once a second; ten at a time keep that stretch near 2 ms."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(slots=True)
class Scan:
    """What one watchdog step over some agents found."""

    repaired: list[Published] = field(default_factory=list)
    """Builtin agents' ticks published, and external agents' repairs recorded (their wake
    follows from the repair's event)."""
    readiness: Counter[Readiness] = field(default_factory=Counter)


def _readiness(views: Iterable[AgentView]) -> Counter[Readiness]:
    counts: Counter[Readiness] = Counter()
    for view in views:
        for readiness, names in READINESS_INDEXES.items():
            counts[readiness] += sum(view.index_counts.get(n, 0) for n in names)
    return counts


class Watchdog:
    def __init__(self, service: SchedulerService, batch: int) -> None:
        self.service = service
        self.redis: AnyRedis = service.redis
        self.names: Names = service.names
        self.metrics: Metrics = service.metrics
        self.batch = batch
        # Replicas start on different partitions, so together they cover the ring sooner.
        self.partition = os.getpid() % self.names.partitions
        self.cursor = "-"
        self._pass: Counter[Readiness] = Counter()
        self._totals: dict[int, Counter[Readiness]] = {}

    async def step(self) -> int:
        """Scan the next agents; returns how many were repaired."""
        p = self.partition
        members = await self.redis.zrangebylex(
            self.names.agents_index(p), self.cursor, "+", start=0, num=self.batch
        )
        agent_ids = [_text(m) for m in members]
        repaired = 0
        for start in range(0, len(agent_ids), SLICE):
            scan = await self.repair(agent_ids[start : start + SLICE])
            repaired += len(scan.repaired)
            self._pass.update(scan.readiness)
        if len(agent_ids) < self.batch:
            self._end_partition(p)
        else:
            self.cursor = "(" + agent_ids[-1]
        return repaired

    def _end_partition(self, p: int) -> None:
        """A partition's pass is complete: its readiness counts replace the previous pass's."""
        self._totals[p] = self._pass
        self._pass = Counter()
        self.partition = (p + 1) % self.names.partitions
        self.cursor = "-"
        for readiness in Readiness:
            total = sum(counts[readiness] for counts in self._totals.values())
            self.metrics.work_items.labels(readiness=readiness.value).set(total)

    async def repair(self, agent_ids: Sequence[str]) -> Scan:
        """Publish the tick each orphaned agent is owed, and record the repair."""
        service = self.service
        now = service.clock()
        views = await service.reader.load(agent_ids)
        owed = [
            (view, decision)
            for view in views.values()
            if (decision := policy.decide(view.snapshot, now)).tick is not None
            and view.marker != decision.tick.tick_id
        ]
        orphans = await self._orphans(owed, now) if owed else []
        builtin = [(v, d) for v, d in orphans if d.loop is AgentLoop.BUILTIN]
        published = await service.publish(builtin)
        for item in published:
            await self._record(item)
        await service.after_ticks(published, {}, builtin)
        external = [
            Published(d.agent_id, policy.to_tick(d.tick), AgentLoop.EXTERNAL)
            for _, d in orphans
            if d.loop is AgentLoop.EXTERNAL and d.tick is not None
        ]
        for item in external:
            await self._record(item)
        return Scan(repaired=published + external, readiness=_readiness(views.values()))

    async def _orphans(
        self, owed: Sequence[tuple[AgentView, Decision]], now: datetime
    ) -> list[tuple[AgentView, Decision]]:
        pipe = self.redis.pipeline(transaction=False)
        for view, _ in owed:
            agent_id = view.snapshot.agent_id
            pipe.lindex(self.names.history(agent_id), -1)
            pipe.zscore(self.service.timers_of(agent_id), TimerRef(agent_id).member())
        replies = await pipe.execute()
        orphans = []
        for n, (view, decision) in enumerate(owed):
            last, nudge_score = replies[2 * n], replies[2 * n + 1]
            last_at = datetime.fromisoformat(orjson.loads(last)["at"]) if last else None
            if policy.is_orphaned(
                decision,
                last_event_at=last_at,
                now=now,
                grace=self.service.timing.watchdog_grace,
                timer_pending=nudge_score is not None,
            ):
                orphans.append((view, decision))
        return orphans

    async def _record(self, item: Published) -> None:
        kind = item.tick.kind.value
        await self.service.ledger.publish(
            c.RecordLivenessRepair(
                command_id=policy.repair_command_id(item.tick.tick_id),
                agent_id=item.agent_id,
                work_item_id=item.tick.work_item_id,
                kind=kind,
            )
        )
        self.metrics.liveness_repairs.labels(kind=kind).inc()
        log.warning("liveness_repaired", agent_id=item.agent_id, kind=kind)


class PendingSampler:
    """Samples `longrun_stream_pending{stream,group}` for the streams around the scheduler: what
    it consumes (events, fired timers) and what it feeds (ticks, for scaling executors)."""

    def __init__(self, redis: AnyRedis, names: Names, metrics: Metrics) -> None:
        self.redis = redis
        self.names = names
        self.metrics = metrics

    def _targets(self) -> list[tuple[str, str]]:
        n = self.names
        out: list[tuple[str, str]] = []
        for p in range(n.partitions):
            out += [
                (n.events(p), Group.SCHEDULER),
                (n.timers_fired(p), Group.SCHEDULER),
                (n.ticks(p), Group.EXECUTOR),
            ]
        return out

    async def step(self) -> None:
        targets = self._targets()
        pipe = self.redis.pipeline(transaction=False)
        for stream, group in targets:
            pipe.xpending(stream, group)
        # A stream or group nobody created yet answers an error: there is nothing to sample.
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        for (stream, group), reply in zip(targets, replies, strict=True):
            if isinstance(reply, dict):
                gauge = self.metrics.stream_pending.labels(stream=stream, group=group)
                gauge.set(int(reply["pending"]))
