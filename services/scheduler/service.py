"""The scheduler's use cases: decide agents from their current ledger state and carry out what
follows (ticks, wakes, park and recheck commands, timers); react to fired timers; repair orphans.

Events only say which agents to look at (architecture rule 5): every decision is recomputed from
a fresh snapshot, so a duplicate, late or reordered event can only repeat a decision, and a
repeated decision publishes nothing (the outstanding-tick marker) or a duplicate command id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
import structlog
from prometheus_client import Counter

from services.scheduler import policy
from services.scheduler.policy import Decision, EventFacts, TimerKind, TimerRef
from shared.domain.records import AgentLoop
from shared.domain.wake import TickKind
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.store.protocol import Fn, flags
from shared.store.snapshots import AgentView, SnapshotReader, marker_of, partition_of
from shared.wire import commands as c
from shared.wire.codec import encode_built
from shared.wire.names import Names
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.scheduler")

TICKS_MAXLEN = 50_000
"""Per partition: about one tick per agent with work is in flight; sized for an executor outage
(a tick trimmed unread is lost to the group, consumer rule 8, and comes back by marker TTL +
watchdog)."""
WAKES_MAXLEN = 100_000
TIMER_MARK_TTL_SECONDS = 7 * 24 * 3600
"""How long a scheduling event is remembered as applied: longer than any redelivery takes."""


@dataclass(frozen=True, slots=True)
class Published:
    agent_id: str
    tick: Tick
    loop: AgentLoop


@dataclass(frozen=True, slots=True)
class Timing:
    tick_ttl_ms: int = 300_000
    """Marker lifetime: bounds how long a lost tick can hold an agent."""
    nudge_ms: int = 200
    watchdog_grace: timedelta = timedelta(seconds=10)


class SchedulerService:
    def __init__(
        self,
        redis: AnyRedis,
        names: Names,
        metrics: Metrics,
        ledger: LedgerClient,
        *,
        clock: Callable[[], datetime],
        new_id: Callable[[str], str],
        timing: Timing = Timing(),
    ) -> None:
        self.redis = redis
        self.names = names
        self.metrics = metrics
        self.ledger = ledger
        self.clock = clock
        self.new_id = new_id
        self.timing = timing
        self.reader = SnapshotReader(redis, names)
        self._tick_counters: dict[TickKind, Counter] = {}

    def _ticks_of(self, kind: TickKind) -> Counter:
        """The tick counter's child for `kind` (a `labels()` look-up per tick otherwise)."""
        child = self._tick_counters.get(kind)
        if child is None:
            child = self._tick_counters[kind] = self.metrics.scheduler_ticks.labels(kind=kind.value)
        return child

    # ---------------------------------------------------------------- inputs

    async def on_events(self, facts: Sequence[EventFacts]) -> list[Published]:
        """A batch of ledger events: schedule its timers, release taken ticks, decide each agent
        it touched once."""
        merged = policy.merge_facts(facts)
        pipe = self.redis.pipeline(transaction=False)
        for one in merged.values():
            for ref, score, seq in one.timers:
                self._arm(pipe, ref, score, seq)
            for tick_id in one.started_ticks:
                # A turn took this tick: from now on its lease holds the agent (docs/streams.md).
                pipe.fcall(Fn.TICK_RELEASE, 1, self.names.outstanding_tick(one.agent_id), tick_id)
            if one.budget_exhausted:
                self.metrics.wake_budget_exhausted.inc(one.budget_exhausted)
        if len(pipe):
            await pipe.execute()
        return await self.wake(list(merged), merged)

    def timers_of(self, agent_id: str) -> str:
        return self.names.timers(self.names.partition(agent_id))

    def _arm(self, pipe: Any, ref: TimerRef, score: int, seq: int) -> None:
        keys = (self.timers_of(ref.agent_id), self.names.timer_scheduled(ref.agent_id, seq))
        pipe.fcall(Fn.TIMER_SCHEDULE, 2, *keys, score, ref.member(), TIMER_MARK_TTL_SECONDS)

    async def on_fired(self, timers: Sequence[TimerRef]) -> list[Published]:
        """Due timers: a wait timer becomes `FireTimer`; a recheck joins the agent's due set;
        both a recheck and a nudge decide the agent again."""
        pipe = self.redis.pipeline(transaction=False)
        again: list[str] = []
        for ref in timers:
            if ref.kind is TimerKind.WAIT:
                assert ref.wait_id is not None
                await self.ledger.publish(self._fire(ref, ref.wait_id))
                continue
            if ref.kind is TimerKind.DEADLINE:
                await self.ledger.publish(policy.expire_command(ref))
                continue
            if ref.kind is TimerKind.RECHECK:
                assert ref.work_item_id is not None
                pipe.zadd(self.names.due_rechecks(ref.agent_id), {ref.work_item_id: 0})
            again.append(ref.agent_id)
        if len(pipe):
            await pipe.execute()
        return await self.wake(again) if again else []

    def _fire(self, ref: TimerRef, wait_id: str) -> c.FireTimer:
        return c.FireTimer(
            command_id=policy.fire_command_id(wait_id),
            agent_id=ref.agent_id,
            wait_id=wait_id,
            due_at=self.clock(),
        )

    # ---------------------------------------------------------------- deciding

    async def wake(
        self, agent_ids: Sequence[str], facts: Mapping[str, EventFacts] | None = None
    ) -> list[Published]:
        """Decide each agent from its current state and carry the decision out."""
        facts = facts or {}
        now = self.clock()
        views = await self.reader.load(agent_ids)
        decided = [(view, policy.decide(view.snapshot, now)) for view in views.values()]
        published = await self.publish(decided)
        await self.after_ticks(published, facts, decided)
        await self._after_holds(decided, facts, now)
        return published

    async def publish(self, decided: Sequence[tuple[AgentView, Decision]]) -> list[Published]:
        builtin = [
            policy.to_tick(d.tick) for _, d in decided if d.tick and d.loop is AgentLoop.BUILTIN
        ]
        # An external loop is woken once per state: the same state gives the same tick id.
        external = [
            policy.to_tick(d.tick)
            for v, d in decided
            if d.tick and d.loop is AgentLoop.EXTERNAL and v.marker != d.tick.tick_id
        ]
        if not builtin and not external:
            return []
        by_partition: dict[int, list[Tick]] = {}
        for tick in builtin:
            by_partition.setdefault(partition_of(self.names, tick.agent_id), []).append(tick)
        calls = [self._tick_call(p, ticks) for p, ticks in by_partition.items()]
        if len(calls) == 1 and not external:
            # One partition: the call on its own costs the client less than a pipeline of one.
            replies = [await self.redis.fcall(*calls[0])]
        else:
            pipe = self.redis.pipeline(transaction=False)
            for call in calls:
                pipe.fcall(*call)
            for tick in external:
                self._queue_wake(pipe, tick)
            replies = await pipe.execute()
        sent = [
            Published(tick.agent_id, tick, AgentLoop.BUILTIN)
            for ticks, oks in zip(by_partition.values(), replies, strict=False)
            for tick, ok in zip(ticks, flags(oks), strict=True)
            if ok
        ]
        sent += [Published(tick.agent_id, tick, AgentLoop.EXTERNAL) for tick in external]
        return sent

    def _tick_call(self, partition: int, ticks: Sequence[Tick]) -> list[Any]:
        """One `lr_tick_publish` call for all of a partition's ticks (their keys share its tag)."""
        n = self.names
        markers = [marker_of(n, tick.agent_id) for tick in ticks]
        args: list[str | bytes | int] = [self.timing.tick_ttl_ms, TICKS_MAXLEN]
        for tick in ticks:
            # The tick was validated when `to_tick` built it: encoded as is, not re-validated
            # inside an Envelope first (same bytes as `encode(Envelope(...))`).
            body = tick.model_dump(mode="json")
            message = encode_built(Tick, id=self.new_id("msg_"), at=tick.issued_at, body=body)
            args += (tick.tick_id, message, tick.agent_id)
        return [Fn.TICK_PUBLISH, 1 + len(markers), n.ticks(partition), *markers, *args]

    def _queue_wake(self, pipe: Any, tick: Tick) -> None:
        candidates = [
            cand.model_dump(mode="json", exclude={"message_type"}) for cand in tick.candidates
        ]
        fields = {
            "agent_id": tick.agent_id,
            "kind": tick.kind.value,
            "work_item_id": tick.work_item_id or "",
            "candidates": orjson.dumps(candidates),
            "tick_id": tick.tick_id,
        }
        pipe.xadd(self.names.wakes, fields, maxlen=WAKES_MAXLEN, approximate=True)
        marker = self.names.outstanding_tick(tick.agent_id)
        pipe.set(marker, tick.tick_id, px=self.timing.tick_ttl_ms)

    # ---------------------------------------------------------------- what follows

    async def after_ticks(
        self,
        published: Sequence[Published],
        facts: Mapping[str, EventFacts],
        decided: Sequence[tuple[AgentView, Decision]],
    ) -> None:
        done = self.clock()
        for item in published:
            tick = item.tick
            self._ticks_of(tick.kind).inc()
            cause = facts.get(item.agent_id)
            if cause is not None and cause.trigger_at is not None:
                elapsed = (done - cause.trigger_at).total_seconds()
                self.metrics.callback_to_tick_seconds.observe(max(elapsed, 0.0))
            if tick.kind is TickKind.RECHECK_DUE and tick.recheck_work_item_ids:
                await self.ledger.publish(
                    c.ConsumeRecheck(
                        command_id=policy.recheck_command_id(tick.tick_id),
                        agent_id=item.agent_id,
                        work_item_ids=tick.recheck_work_item_ids,
                    )
                )
            log.debug("tick_published", agent_id=item.agent_id, kind=tick.kind.value)
        await self._upkeep_rechecks([view for view, _ in decided], done)

    async def _after_holds(
        self,
        decided: Sequence[tuple[AgentView, Decision]],
        facts: Mapping[str, EventFacts],
        now: datetime,
    ) -> None:
        nudge_at = policy.due_ms(now + timedelta(milliseconds=self.timing.nudge_ms))
        pipe = self.redis.pipeline(transaction=False)
        for view, decision in decided:
            reason = policy.park_reason(decision, view.snapshot)
            if reason is not None:
                await self._park(view, decision, reason)
            cause = facts.get(view.snapshot.agent_id)
            finished = cause is not None and cause.turn_finished
            if policy.wants_nudge(
                decision, turn_finished=finished, turn_recorded=view.turn_recorded
            ):
                ref = TimerRef(view.snapshot.agent_id)
                pipe.zadd(self.timers_of(ref.agent_id), {ref.member(): nudge_at})
            if decision.wake_at is not None and decision.hold is not None:
                # Decide again when the hold ends; re-armed by every decision, one member each.
                ref = TimerRef(view.snapshot.agent_id, cause=decision.hold.value)
                due = policy.due_ms(decision.wake_at)
                pipe.zadd(self.timers_of(ref.agent_id), {ref.member(): due})
        if len(pipe):
            await pipe.execute()

    async def _park(self, view: AgentView, decision: Decision, reason: c.ParkReason) -> None:
        snapshot = view.snapshot
        await self.ledger.publish(
            c.ParkAgent(
                command_id=policy.park_command_id(snapshot, reason),
                agent_id=snapshot.agent_id,
                reason=reason,
                budget=decision.token_budget,
            )
        )
        log.info("agent_parked", agent_id=snapshot.agent_id, reason=reason.value)

    async def _upkeep_rechecks(self, views: Iterable[AgentView], now: datetime) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for view in views:
            if not view.due_rechecks:
                continue
            upkeep = policy.recheck_upkeep(view.due_rechecks, view.items, now)
            agent_id = view.snapshot.agent_id
            if upkeep.drop:
                pipe.zrem(self.names.due_rechecks(agent_id), *upkeep.drop)
            for work_item_id, due in upkeep.retime:
                ref = TimerRef(agent_id, work_item_id=work_item_id)
                pipe.zadd(self.timers_of(agent_id), {ref.member(): policy.due_ms(due)})
        if len(pipe):
            await pipe.execute()
