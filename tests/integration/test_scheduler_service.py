"""The scheduler's use cases on a real Redis with the real ledger, stepped by hand: ticks and the
outstanding marker, turn hand-off, parking, rechecks, external wakes, the watchdog, timers,
explanations and poison entries."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from services.ledger.service import LedgerService
from services.scheduler.handlers import SchedulerConsumer
from services.scheduler.policy import TimerRef
from services.scheduler.service import SchedulerService, Timing
from services.scheduler.timers import TimerPoller
from services.scheduler.watchdog import Watchdog
from shared.domain.records import AgentLoop
from shared.domain.scheduling import decide
from shared.domain.wake import TickKind
from shared.domain.why import ReasonKind
from shared.ledger_client import LedgerClient
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.snapshots import SnapshotReader
from shared.store.why import explain_not_running
from shared.streams import ensure_groups
from shared.wire import commands as c
from shared.wire.codec import decode
from shared.wire.names import Group, Names
from shared.wire.replies import CommandOutcome
from tests.cycles import cyclic_garbage
from tests.integration.scheduler_driver import (
    create,
    ensure,
    event_types,
    message,
    pick,
    ticks,
    wait_for,
)

AGENT = "agent-s"


@dataclass
class Harness:
    redis: AnyRedis
    names: Names
    ledger: LedgerService
    service: SchedulerService
    consumer: SchedulerConsumer
    cursors: dict[str, str] = field(default_factory=dict)

    async def send(self, *commands: c.Command) -> None:
        for cmd in commands:
            (applied,) = await self.ledger.apply_batch([cmd])
            assert applied.reply.outcome is not CommandOutcome.REJECTED, applied.reply

    async def pump(self) -> list[dict[str, Any]]:
        """Hand every unread event and fired timer to the scheduler, as its subscribers do."""
        entries: list[dict[str, Any]] = []
        for p in range(self.names.partitions):
            for stream, consume in (
                (self.names.events(p), self.consumer.events.consume),
                (self.names.timers_fired(p), self.consumer.fired.consume),
            ):
                got = await self.redis.xreadgroup(Group.SCHEDULER, "t", {stream: ">"}, count=500)
                for _, batch in got or []:
                    ids = [i.decode() for i, _ in batch]
                    fields = [{k.decode(): v for k, v in f.items()} for _, f in batch]
                    await consume(stream, ids, fields)
                    await self.redis.xack(stream, Group.SCHEDULER, *ids)
                    entries += fields
        return entries

    async def commands(self) -> list[c.Command]:
        """Apply what the scheduler sent the ledger; returns those commands."""
        sent: list[c.Command] = []
        for p in range(self.names.partitions):
            stream = self.names.commands(p)
            for entry_id, fields in await self.redis.xrange(
                stream, f"({self.cursors.get(stream, '0')}"
            ):
                self.cursors[stream] = entry_id.decode()
                body = decode(fields[b"m"]).body
                assert isinstance(body, c.Command)
                sent.append(body)
        if sent:
            await self.ledger.apply_batch(sent)
        return sent

    async def poll_timers(self, at: datetime | None = None) -> int:
        """Fire the due timers, as of `at` (the present if none)."""
        clock = utc_now if at is None else (lambda: at)
        return await TimerPoller(self.redis, self.names, clock).step()


@pytest.fixture
async def h(redis: AnyRedis, names: Names, ledger: LedgerService) -> Harness:
    metrics = build_metrics(CollectorRegistry())
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id)
    timing = Timing(nudge_ms=1, watchdog_grace=timedelta(0))
    service = SchedulerService(
        redis, names, metrics, client, clock=utc_now, new_id=new_id, timing=timing
    )
    partitions = range(names.partitions)
    await ensure_groups(redis, (names.events(p) for p in partitions), Group.SCHEDULER)
    await ensure_groups(redis, (names.timers_fired(p) for p in partitions), Group.SCHEDULER)
    return Harness(redis, names, ledger, service, SchedulerConsumer(service, redis, names))


async def marker(h: Harness, agent_id: str = AGENT) -> str | None:
    raw = await h.redis.get(h.names.outstanding_tick(agent_id))
    return raw.decode() if raw else None


async def lease_and_begin(h: Harness, tick_id: str, kind: TickKind) -> tuple[str, int]:
    n = h.names
    turn_id = new_id("turn_")
    token = int(
        await h.redis.fcall("lr_lease_acquire", 2, n.lease(AGENT), n.fence(AGENT), turn_id, 30_000)
    )
    await h.send(
        c.BeginTurn(
            command_id=f"b-{turn_id}",
            agent_id=AGENT,
            turn_id=turn_id,
            fencing_token=token,
            tick_id=tick_id,
            tick_kind=kind,
        )
    )
    return turn_id, token


async def finish(h: Harness, turn_id: str, token: int) -> None:
    await h.send(
        c.FinishTurn(
            command_id=f"f-{turn_id}",
            agent_id=AGENT,
            turn_id=turn_id,
            fencing_token=token,
            outcome=c.TurnOutcome.YIELDED,
        )
    )


# ---------------------------------------------------------------- one outstanding tick


async def test_an_event_publishes_one_tick_and_a_redelivered_batch_adds_none(h: Harness) -> None:
    await h.send(ensure(AGENT), create(AGENT, new_id("wi_")))
    entries = await h.pump()
    (tick,) = await ticks(h.redis, h.names)
    assert tick.kind is TickKind.PICK_QUEUED
    assert await marker(h) == tick.tick_id
    stream = h.names.events(h.names.partition(AGENT))
    await h.consumer.events.consume(stream, [f"0-{i + 1}" for i in range(len(entries))], entries)
    await h.send(message(AGENT, 1), message(AGENT, 2))
    await h.pump()
    assert len(await ticks(h.redis, h.names)) == 1


async def test_decided_events_leave_nothing_of_ours_for_the_cycle_collector(h: Harness) -> None:
    """Events, decisions and ticks are freed when their round ends (see tests/cycles.py)."""
    await h.send(ensure(AGENT), create(AGENT, new_id("wi_")), message(AGENT, 1))
    with cyclic_garbage() as ours:
        await h.pump()
    assert len(await ticks(h.redis, h.names)) == 1
    assert ours == []


async def test_a_started_turn_takes_the_marker_and_its_end_ticks_again(h: Harness) -> None:
    await h.send(ensure(AGENT), create(AGENT, new_id("wi_")))
    await h.pump()
    (first,) = await ticks(h.redis, h.names)
    turn_id, token = await lease_and_begin(h, first.tick_id, first.kind)
    await h.pump()
    assert await marker(h) is None
    await h.send(message(AGENT, 1))
    await h.pump()
    assert len(await ticks(h.redis, h.names)) == 1, "the lease holds the agent during a turn"
    await finish(h, turn_id, token)
    await h.pump()
    assert len(await ticks(h.redis, h.names)) == 1, "the lease is still held"
    nudge = TimerRef(AGENT).member()
    timers = h.names.timers(h.names.partition(AGENT))
    assert await h.redis.zscore(timers, nudge) is not None
    # The executor is slow to let go: the nudge finds the lease still held and looks again.
    await asyncio.sleep(0.01)
    assert await h.poll_timers() == 1
    await h.pump()
    assert len(await ticks(h.redis, h.names)) == 1
    assert await h.redis.zscore(timers, nudge) is not None
    await h.redis.fcall("lr_lease_release", 1, h.names.lease(AGENT), turn_id)
    await asyncio.sleep(0.01)
    assert await h.poll_timers() == 1
    await h.pump()
    kinds = [t.kind for t in await ticks(h.redis, h.names)]
    assert kinds == [TickKind.PICK_QUEUED, TickKind.INPUT]


# ---------------------------------------------------------------- parking


async def test_nothing_runnable_parks_the_agent_dormant_once(h: Harness) -> None:
    wid = new_id("wi_")
    await h.send(ensure(AGENT), create(AGENT, wid), pick(AGENT, wid))
    await h.pump()
    (tick,) = await ticks(h.redis, h.names)
    turn_id, token = await lease_and_begin(h, tick.tick_id, tick.kind)
    await finish(h, turn_id, token)
    await h.redis.fcall("lr_lease_release", 1, h.names.lease(AGENT), turn_id)
    await h.redis.fcall("lr_tick_release", 1, h.names.outstanding_tick(AGENT), tick.tick_id)
    # The item is completed outside a turn: runnable work is gone but the posture says idle.
    await h.send(
        c.CompleteWorkItem.model_validate(
            {"command_id": "done", "agent_id": AGENT, "args": {"work_item_id": wid}}
        )
    )
    await h.pump()
    (parked,) = await h.commands()
    assert isinstance(parked, c.ParkAgent)
    assert parked.reason is c.ParkReason.NOTHING_RUNNABLE
    await h.pump()
    assert await h.commands() == []
    types = await event_types(h.redis, h.names, AGENT)
    assert types.count("agent_parked") == 1
    state = await h.service.reader.load([AGENT])
    assert state[AGENT].snapshot.agent.posture.value == "dormant"


# ---------------------------------------------------------------- rechecks


def block(work_item_id: str, **args: Any) -> c.UpdateWorkItem:
    return c.UpdateWorkItem.model_validate(
        {
            "command_id": new_id("block-"),
            "agent_id": AGENT,
            "args": {"work_item_id": work_item_id, "blocked_by": "vendor", **args},
        }
    )


async def test_a_due_recheck_ticks_once_and_is_consumed(h: Harness) -> None:
    wid = new_id("wi_")
    before = utc_now()
    await h.send(ensure(AGENT), create(AGENT, wid), block(wid, recheck_after_ms=200))
    # Blocked later, so ranked before it: the item is past the head a decision reads, and only
    # the fired timer (the due set) brings its recheck to the decision.
    for _ in range(4):
        other = new_id("wi_")
        await h.send(create(AGENT, other), block(other))
    await h.pump()
    assert await ticks(h.redis, h.names) == []
    # Polled as of before the block: not due yet, however long the sends took.
    assert await h.poll_timers(at=before) == 0
    await asyncio.sleep(0.25)
    assert await h.poll_timers() == 1
    await h.pump()
    (tick,) = await ticks(h.redis, h.names)
    assert tick.kind is TickKind.RECHECK_DUE
    assert tick.recheck_work_item_ids == (wid,)
    (consume,) = await h.commands()
    assert isinstance(consume, c.ConsumeRecheck)
    assert consume.command_id == f"recheck:{tick.tick_id}"
    await h.pump()
    assert await h.redis.zcard(h.names.due_rechecks(AGENT)) == 0
    await h.redis.delete(h.names.outstanding_tick(AGENT))
    await h.service.wake([AGENT])
    assert len(await ticks(h.redis, h.names)) == 1, "a consumed recheck is not delivered again"


# ---------------------------------------------------------------- timers


async def test_a_wait_timer_fires_once_as_fire_timer_even_from_a_new_poller(h: Harness) -> None:
    wid = new_id("wi_")
    await h.send(ensure(AGENT), create(AGENT, wid))
    await h.send(wait_for(AGENT, wid, wake="timer", wake_after_ms=1))
    entries = await h.pump()
    await asyncio.sleep(0.01)
    # Timers live in Redis: a poller built after the timer was scheduled fires it.
    assert await h.poll_timers() == 1
    assert await h.poll_timers() == 0
    stream = h.names.events(h.names.partition(AGENT))
    await h.consumer.events.consume(stream, [f"0-{i + 1}" for i in range(len(entries))], entries)
    assert await h.poll_timers() == 0, "a redelivered event re-armed a fired timer"
    await h.pump()
    fired = [cmd for cmd in await h.commands() if isinstance(cmd, c.FireTimer)]
    assert len(fired) == 1
    assert fired[0].command_id == f"fire:{fired[0].wait_id}"
    await h.pump()
    assert (await event_types(h.redis, h.names, AGENT)).count("wait_triggered") == 1


# ---------------------------------------------------------------- external loops


async def test_an_external_loop_is_woken_once_per_state_on_the_wakes_stream(h: Harness) -> None:
    await h.send(ensure(AGENT, loop="external"), create(AGENT, new_id("wi_")))
    entries = await h.pump()
    (wake,) = [f for _, f in await h.redis.xrange(h.names.wakes)]
    assert wake[b"agent_id"] == AGENT.encode()
    assert wake[b"kind"] == b"pick_queued"
    assert wake[b"work_item_id"] == b""
    candidates = orjson.loads(wake[b"candidates"])
    assert candidates[0]["candidate_class"] == "queued_runnable"
    assert await ticks(h.redis, h.names) == []
    stream = h.names.events(h.names.partition(AGENT))
    await h.consumer.events.consume(stream, ["0-1"], entries[-1:])
    assert await h.redis.xlen(h.names.wakes) == 1
    await h.send(create(AGENT, new_id("wi_")))
    await h.pump()
    assert await h.redis.xlen(h.names.wakes) == 2


# ---------------------------------------------------------------- watchdog


async def test_the_watchdog_repairs_an_orphan_once_through_the_tick_path(h: Harness) -> None:
    await h.send(ensure(AGENT), create(AGENT, new_id("wi_")))
    # The events are never handed to the scheduler: the agent's tick is owed and missing.
    scan = await Watchdog(h.service, 100).repair([AGENT])
    (repaired,) = scan.repaired
    assert await marker(h) == repaired.tick.tick_id
    (record,) = await h.commands()
    assert isinstance(record, c.RecordLivenessRepair)
    assert record.kind == "pick_queued"
    assert (await Watchdog(h.service, 100).repair([AGENT])).repaired == []
    assert len(await ticks(h.redis, h.names)) == 1
    assert "liveness_repaired" in await event_types(h.redis, h.names, AGENT)


async def test_the_watchdog_repairs_an_external_loop_with_one_wake(h: Harness) -> None:
    await h.send(ensure(AGENT, loop="external"), create(AGENT, new_id("wi_")))
    # The events are never handed to the scheduler: the agent's wake is owed and missing.
    (repaired,) = (await Watchdog(h.service, 100).repair([AGENT])).repaired
    assert repaired.loop is AgentLoop.EXTERNAL
    # A second replica scanning the same state records the same repair (one command id).
    assert len((await Watchdog(h.service, 100).repair([AGENT])).repaired) == 1
    records = await h.commands()
    assert {type(r) for r in records} == {c.RecordLivenessRepair}
    assert len({r.command_id for r in records}) == 1
    assert await h.redis.xlen(h.names.wakes) == 0
    # The repair's event is decided like any other and publishes the wake, once.
    await h.pump()
    (wake,) = [f for _, f in await h.redis.xrange(h.names.wakes)]
    assert wake[b"kind"] == b"pick_queued"
    assert (await event_types(h.redis, h.names, AGENT)).count("liveness_repaired") == 1
    assert (await Watchdog(h.service, 100).repair([AGENT])).repaired == []
    await h.pump()
    assert await h.redis.xlen(h.names.wakes) == 1
    assert await ticks(h.redis, h.names) == []


async def test_the_watchdog_leaves_an_agent_alone_within_the_grace(h: Harness) -> None:
    await h.send(ensure(AGENT), create(AGENT, new_id("wi_")))
    patient = SchedulerService(
        h.redis,
        h.names,
        h.service.metrics,
        h.service.ledger,
        clock=utc_now,
        new_id=new_id,
        timing=Timing(watchdog_grace=timedelta(minutes=5)),
    )
    assert (await Watchdog(patient, 100).repair([AGENT])).repaired == []
    assert await ticks(h.redis, h.names) == []


async def test_the_watchdog_scans_every_partition_in_bounded_steps(h: Harness) -> None:
    agents = [f"scan-{n}" for n in range(7)]
    for agent in agents:
        await h.send(ensure(agent), create(agent, new_id("wi_")))
    watchdog = Watchdog(h.service, batch=2)
    repaired = 0
    # Four partitions with at most seven agents: two passes of at most 4 + 7 // 2 steps each.
    for _ in range(2 * (h.names.partitions + len(agents) // 2)):
        repaired += await watchdog.step()
    assert repaired == len(agents)
    assert {t.agent_id for t in await ticks(h.redis, h.names)} == set(agents)
    (family,) = h.service.metrics.work_items.collect()
    by_readiness = {sample.labels["readiness"]: sample.value for sample in family.samples}
    assert by_readiness["runnable"] == len(agents)


# ---------------------------------------------------------------- snapshots and explanations


def _same_partition(names: Names, count: int) -> list[str]:
    first = names.partition("batch-0")
    candidates = (f"batch-{n}" for n in range(10_000))
    return [a for a in candidates if names.partition(a) == first][:count]


async def test_one_snapshot_call_reads_many_agents_of_a_partition_and_skips_unknown_ones(
    h: Harness,
) -> None:
    known_a, unknown, known_b = _same_partition(h.names, 3)
    elsewhere = next(
        f"other-{n}"
        for n in range(10_000)
        if h.names.partition(f"other-{n}") != h.names.partition(known_a)
    )
    for agent in (known_a, known_b, elsewhere):
        await h.send(ensure(agent), create(agent, new_id("wi_")))
    await h.send(create(known_b, new_id("wi_")))
    views = await h.service.reader.load([known_a, unknown, known_b, elsewhere, known_a])
    assert list(views) == [known_a, known_b, elsewhere]
    assert {a: v.snapshot.agent_id for a, v in views.items()} == {a: a for a in views}
    assert [len(views[a].items) for a in (known_a, known_b, elsewhere)] == [1, 2, 1]


async def test_one_publish_call_answers_each_tick_of_a_partition(h: Harness) -> None:
    busy, free = _same_partition(h.names, 2)
    for agent in (busy, free):
        await h.send(ensure(agent), create(agent, new_id("wi_")))
    await h.redis.set(h.names.outstanding_tick(busy), "an-earlier-tick")
    views = await h.service.reader.load([busy, free])
    # Decided as if no marker were set, so both ticks reach lr_tick_publish in one call.
    decided = [
        (view, decide(replace(view.snapshot, outstanding_tick_id=None), utc_now()))
        for view in views.values()
    ]
    published = await h.service.publish(decided)
    assert [p.agent_id for p in published] == [free]
    assert [t.agent_id for t in await ticks(h.redis, h.names)] == [free]
    assert await marker(h, busy) == "an-earlier-tick"
    assert await marker(h, free) == published[0].tick.tick_id


async def test_class_heads_rank_candidates_exactly_as_the_full_read(h: Harness) -> None:
    await h.send(ensure(AGENT))
    ids = [new_id("wi_") for _ in range(14)]
    await h.send(*(create(AGENT, wid) for wid in ids))
    for wid in ids[9:]:
        await h.send(wait_for(AGENT, wid, wake="external"))
    await h.send(pick(AGENT, ids[3]))
    reader = SnapshotReader(h.redis, h.names)
    heads = (await reader.load([AGENT]))[AGENT].snapshot
    full = (await reader.load([AGENT], full=True))[AGENT].snapshot
    assert len(heads.work_items) < len(full.work_items)
    now = utc_now()
    bounded, exact = decide(heads, now).tick, decide(full, now).tick
    assert bounded is not None
    assert exact is not None
    assert bounded.candidates == exact.candidates
    assert bounded.tick_id == exact.tick_id


async def test_explanations_come_from_the_stored_snapshot(h: Harness) -> None:
    first, second = new_id("wi_"), new_id("wi_")
    await h.send(ensure(AGENT), create(AGENT, first), create(AGENT, second))
    now = utc_now()
    reason = await explain_not_running(h.redis, h.names, AGENT, second, now)
    assert reason is not None
    assert reason.kind is ReasonKind.QUEUED
    assert reason.rank == 2
    await h.send(wait_for(AGENT, first, wake="external"))
    reason = await explain_not_running(h.redis, h.names, AGENT, first, now)
    assert reason is not None
    assert reason.kind is ReasonKind.WAITING_EXTERNAL
    assert await explain_not_running(h.redis, h.names, AGENT, new_id("wi_"), now) is None
    assert await explain_not_running(h.redis, h.names, "nobody", first, now) is None


# ---------------------------------------------------------------- poison


async def test_undecodable_entries_are_dead_lettered_and_the_rest_still_decided(
    h: Harness,
) -> None:
    await h.send(ensure(AGENT), create(AGENT, new_id("wi_")))
    stream = h.names.events(h.names.partition(AGENT))
    bad = [{"m": b"{not json"}, {"k": b"x"}, {"m": b'{"type":"ledger_events","version":7}'}]
    for fields in bad:
        await h.redis.xadd(stream, fields)
    await h.pump()
    assert len(await ticks(h.redis, h.names)) == 1
    letters = [f for _, f in await h.redis.xrange(h.names.dead_letter)]
    assert len(letters) == len(bad)
    assert all(f[b"source_stream"] == stream.encode() for f in letters)
    assert b"unknown version 7" in letters[2][b"reason"]
