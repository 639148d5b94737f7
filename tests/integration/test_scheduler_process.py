"""The scheduler as real processes beside a real ledger process: timers fire once across
replicas, a callback burst coalesces, the wake budget parks and fresh input resumes, a kill -9
loses no tick, and health notices a dead subscriber."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

import orjson
import pytest

from shared.consumer import DELIVERY_CAP
from shared.domain.records import Posture
from shared.domain.stored import AgentRecord
from shared.domain.wake import AUTONOMOUS_TICKS, TickKind
from shared.runtime import new_id
from shared.wire import commands as c
from shared.wire.names import Group
from shared.wire.ticks import Tick
from tests.integration.ledger_driver import token_hash
from tests.integration.scheduler_driver import (
    LEDGER,
    LEDGER_PORT,
    SCHEDULER,
    SCHEDULER_PORT,
    WATCHED,
    FakeExecutor,
    Replies,
    callback,
    caught_up,
    create,
    ensure,
    event_types,
    history,
    message,
    pick,
    push,
    ticks,
    wait_for,
    wait_until,
)

FAST = {
    "LONGRUN_TIMER_POLL_MS": "20",
    "LONGRUN_WATCHDOG_INTERVAL_MS": "100",
    "LONGRUN_WATCHDOG_GRACE_MS": "2000",
    "LONGRUN_NUDGE_MS": "20",
    "LONGRUN_PENDING_SAMPLE_MS": "200",
}


async def http_get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    raw = (await reader.read()).decode()
    writer.close()
    head, _, body = raw.partition("\r\n\r\n")
    return int(head.split()[1]), body


def metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)} (\S+)$"
    found = re.search(pattern, text, flags=re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def start(spawn: Any, replicas: int = 1, **ledger_env: str) -> list[Any]:
    procs = [spawn(LEDGER, LEDGER_PORT, **ledger_env)]
    procs += [spawn(SCHEDULER, SCHEDULER_PORT, **FAST) for _ in range(replicas)]
    WATCHED.clear()
    for proc in procs:
        WATCHED.append(lambda proc=proc: f"{proc.module}: {proc.log_path.read_text()[-1500:]}")
        await proc.wait_ready()
    return procs[1:]


async def agent_record(redis: Any, names: Any, agent_id: str) -> AgentRecord:
    return AgentRecord.model_validate_json(await redis.hget(names.agent(agent_id), "doc"))


async def quiet(redis: Any, names: Any, agent_id: str) -> bool:
    """No tick outstanding, no turn holding the agent, every event handled."""
    held = await redis.exists(names.outstanding_tick(agent_id), names.lease(agent_id))
    return not held and await caught_up(redis, names)


# ---------------------------------------------------------------- timers


async def test_three_replicas_fire_each_of_a_thousand_timers_exactly_once(
    spawn, redis, names
) -> None:
    schedulers = await start(spawn, replicas=3)
    agents = [f"timer-{n}" for n in range(50)]
    items = {a: [new_id("wi_") for _ in range(20)] for a in agents}
    commands: list[c.Command] = [ensure(a) for a in agents]
    commands += [create(a, w) for a in agents for w in items[a]]
    commands += [
        wait_for(a, w, wake="timer", wake_after_ms=500 + (k * 37) % 1500)
        for a in agents
        for k, w in enumerate(items[a])
    ]
    await push(redis, names, commands)

    async def fired() -> list[str]:
        out = []
        for p in range(names.partitions):
            for _, fields in await redis.xrange(names.timers_fired(p)):
                member = orjson.loads(fields[b"m"])
                if "wait_id" in member:
                    out.append(member["wait_id"])
        return out

    async def some_fired() -> bool:
        return len(await fired()) >= 300

    await wait_until(some_fired, 90, "the first timers to fire")
    schedulers[0].kill9()  # its fetched, unacknowledged fired entries go to the reclaimers

    async def all_triggered() -> bool:
        for agent in agents:
            waits = [orjson.loads(d) for d in await redis.hvals(names.waits(agent))]
            if len(waits) != 20 or any(w["trigger_count"] != 1 for w in waits):
                return False
        return await caught_up(redis, names)

    took = await wait_until(all_triggered, 90, "every timer wait to be triggered")
    counts = Counter(await fired())
    print(f"\n1000 timers, 3 replicas (one killed mid-way): all triggered {took:.1f}s after")
    assert len(counts) == 1000
    assert set(counts.values()) == {1}, "a timer moved to the fired stream twice"
    for agent in agents:
        events = await history(redis, names, agent)
        by_wait = Counter(
            e["data"]["wait_id"]
            for e in events
            if e["type"] == "wait_triggered" and e["data"]["source"] == "timer"
        )
        assert set(by_wait.values()) == {1}
        assert len(by_wait) == 20


# ---------------------------------------------------------------- coalescing


# The work is proportional to the machine's speed: 2,000 callbacks applied by the ledger process
# and decided by the scheduler's. Each thousand took 2-10 s in consecutive runs at load 7-8 on a
# 2-core machine (no retry, timeout or reclaim in the services' logs: CPU left to the processes),
# and more at load 12, where the suite's 120 s cut the run short before any phase's own wait
# below could name the slow phase. The timeout covers those waits (300 s) and the start.
@pytest.mark.timeout(330)
async def test_a_burst_of_a_thousand_callbacks_coalesces_into_few_ticks(
    spawn, redis, names
) -> None:
    client = Replies(redis, names)
    (scheduler,) = await start(spawn)
    executor = FakeExecutor(redis, names, client, think=0.005)
    await executor.start()
    agent, wid, cap = "burst", new_id("wi_"), "cap-burst"
    await client.send(ensure(agent))
    await client.send(create(agent, wid))
    await client.send(wait_for(agent, wid, wake="external", capability_token_hash=token_hash(cap)))
    await wait_until(lambda: quiet(redis, names, agent), 60, "the agent to settle")

    async def published() -> list[Tick]:
        return [t for t in await ticks(redis, names) if t.agent_id == agent]

    async def triggered(count: int) -> bool:
        (wait,) = [orjson.loads(d) for d in await redis.hvals(names.waits(agent))]
        return wait["trigger_count"] == count and await caught_up(redis, names)

    async def reviewed(count: int) -> bool:
        (wait,) = [orjson.loads(d) for d in await redis.hvals(names.waits(agent))]
        return wait["reviewed_trigger_count"] == count and await quiet(redis, names, agent)

    # No turn takes the tick while the burst lands: every callback after the first finds it
    # outstanding.
    await executor.pause()
    before = len(await published())
    await push(redis, names, [callback(agent, cap, n) for n in range(1000)])
    await wait_until(lambda: triggered(1000), 90, "every callback to be applied")
    held = len(await published()) - before
    executor.running.set()
    await wait_until(lambda: reviewed(1000), 60, "the triggers to be reviewed")
    paused_total = len(await published()) - before
    print(f"\n1000 callbacks, no turn meanwhile: {held} tick(s), {paused_total} with the review")
    assert held == 1
    assert paused_total <= 2

    # With turns running through the burst, each turn reviews what arrived before it started.
    before, turns_before = len(await published()), len(executor.turns)
    await push(redis, names, [callback(agent, cap, n) for n in range(1000, 2000)])
    await wait_until(lambda: reviewed(2000), 90, "the second burst to be reviewed")
    await executor.stop()
    burst = (await published())[before:]
    turns = [t for t in executor.turns[turns_before:] if t.agent_id == agent]
    print(f"1000 callbacks, turns running: {len(burst)} ticks for {len(turns)} turns")
    assert {t.kind for t in burst} == {TickKind.REVIEW_TRIGGERED}
    assert len(burst) <= len(turns) + 1, "a tick was published while another was outstanding"
    assert len(burst) < 1000
    _, text = await http_get(scheduler.port, "/metrics")
    assert metric(text, "longrun_callback_to_tick_seconds_count") >= 2
    assert "# TYPE longrun_gc_pause_seconds histogram" in text


# ---------------------------------------------------------------- wake budget


async def test_a_spent_wake_budget_parks_the_agent_once_and_an_operator_message_resumes_it(
    spawn, redis, names
) -> None:
    client = Replies(redis, names)
    (scheduler,) = await start(spawn, LONGRUN_MAX_WAKE_CYCLES="3")
    executor = FakeExecutor(redis, names, client)
    await executor.start()
    agent, wid = "budget", new_id("wi_")
    await push(redis, names, [ensure(agent), create(agent, wid), pick(agent, wid)])

    async def exhausted(times: int) -> bool:
        reported = (await event_types(redis, names, agent)).count("wake_budget_exhausted")
        return reported == times and await quiet(redis, names, agent)

    await wait_until(lambda: exhausted(1), 60, "the budget to be spent")
    first = [t.kind for t in executor.turns]
    assert len(first) == 3
    assert set(first) <= AUTONOMOUS_TICKS
    record = await agent_record(redis, names, agent)
    assert record.state.posture is Posture.IDLE
    assert record.state.wake_budget.used == 3

    # A write that is not fresh input makes the scheduler decide again: still parked, no report.
    update = c.UpdateWorkItem.model_validate(
        {"command_id": "todo", "agent_id": agent, "args": {"work_item_id": wid, "objective": "x"}}
    )
    await client.send(update)
    await wait_until(lambda: quiet(redis, names, agent), 60, "the update to be handled")
    assert len(executor.turns) == 3
    assert (await event_types(redis, names, agent)).count("wake_budget_exhausted") == 1

    await client.send(message(agent, 1, "carry on"))
    await wait_until(lambda: exhausted(2), 60, "the budget to be spent again")
    kinds = [t.kind for t in executor.turns]
    print(f"\nturns: {[k.value for k in kinds]}")
    assert kinds[3] is TickKind.INPUT
    assert len(kinds) == 7
    assert set(kinds[4:]) <= AUTONOMOUS_TICKS
    await executor.stop()
    _, text = await http_get(scheduler.port, "/metrics")
    assert metric(text, "longrun_wake_budget_exhausted_total") == 2
    assert metric(text, "longrun_scheduler_ticks_total", '{kind="input"}') == 1


# ---------------------------------------------------------------- crash


async def test_kill_9_of_a_replica_mid_load_loses_no_tick(spawn, redis, names) -> None:
    schedulers = await start(spawn, replicas=3)
    agents = [f"load-{n}" for n in range(200)]
    await push(redis, names, [ensure(a) for a in agents])
    victim = schedulers[0]
    pending_at_kill = 0
    for wave in range(6):
        await push(redis, names, [message(a, wave) for a in agents])
        if wave >= 2 and victim.proc.poll() is None:
            # Kill it while it holds entries it has read and not yet acknowledged, if it can be
            # caught with some within a second.
            for _ in range(200):
                pending_at_kill = await consumer_pending(redis, names, victim.proc.pid)
                if pending_at_kill:
                    break
                await asyncio.sleep(0.005)
            victim.kill9()
        await asyncio.sleep(0.1)

    async def every_agent_ticked() -> bool:
        got = {t.agent_id for t in await ticks(redis, names)}
        return got == set(agents) and await caught_up(redis, names)

    took = await wait_until(every_agent_ticked, 90, "a tick for every agent")
    per_agent = Counter(t.agent_id for t in await ticks(redis, names))
    repairs = 0
    for agent in agents:
        repairs += (await event_types(redis, names, agent)).count("liveness_repaired")
    left = await consumer_pending(redis, names, victim.proc.pid)
    print(
        f"\nkill -9 mid-load: the killed replica held {pending_at_kill} unacknowledged entries, "
        f"{pending_at_kill - left} taken over by the reclaimers; {repairs} agents repaired by "
        f"the watchdog; every agent ticked {took:.1f}s after the load"
    )
    assert set(per_agent.values()) == {1}, "one outstanding tick per agent"
    assert left == 0


async def consumer_pending(redis: Any, names: Any, pid: int) -> int:
    total = 0
    for p in range(names.partitions):
        for info in await redis.xinfo_consumers(names.events(p), Group.SCHEDULER):
            if f"-{pid}-" in info["name"].decode():
                total += info["pending"]
    return total


# ---------------------------------------------------------------- health


async def test_health_fails_when_a_subscriber_stops(spawn, redis, names) -> None:
    (scheduler,) = await start(spawn)
    status, _ = await http_get(scheduler.port, "/healthz")
    assert status == 200
    await redis.delete(names.events(0))  # the stream and its group vanish: NOGROUP

    async def unhealthy() -> bool:
        return (await http_get(scheduler.port, "/healthz"))[0] == 503

    await wait_until(unhealthy, 30, "/healthz to report the dead subscriber")


@pytest.mark.parametrize("past_cap", [False, True], ids=["undecodable", "past-the-cap"])
async def test_an_undecodable_event_a_dead_replica_left_is_reclaimed_and_dead_lettered(
    spawn, redis, names, *, past_cap
) -> None:
    """Reclaimed, it is dead-lettered as undecodable; had every consumer died on it, it is
    dead-lettered for its deliveries before anything reads it."""
    stream = names.events(0)
    await redis.xgroup_create(stream, Group.SCHEDULER, id="0", mkstream=True)
    entry_id = await redis.xadd(stream, {"m": b"\xff\xfe not UTF-8", "k": b"\xc3\x28"})
    await redis.xreadgroup(Group.SCHEDULER, "a-dead-replica", {stream: ">"}, count=10)
    for n in range(DELIVERY_CAP if past_cap else 0):
        await redis.xclaim(stream, Group.SCHEDULER, f"dead-{n}", 0, [entry_id])
    spawn(SCHEDULER, SCHEDULER_PORT, **FAST, LONGRUN_RECLAIM_IDLE_MS="200")

    # The webhooks group reads the same stream and sets its own copy aside, maybe first: wait
    # for the scheduler group's.
    async def dead_lettered() -> bool:
        letters = await redis.xrange(names.dead_letter)
        return any(
            f[b"source_id"] == entry_id and f[b"source_group"] == Group.SCHEDULER.encode()
            for _, f in letters
        )

    await wait_until(dead_lettered, 30, "the reclaimed event in the dead-letter stream")
    letters = [f for _, f in await redis.xrange(names.dead_letter)]
    (letter,) = [f for f in letters if f[b"source_group"] == Group.SCHEDULER.encode()]
    reason = f"delivery_cap: {DELIVERY_CAP + 2} deliveries" if past_cap else "undecodable"
    assert letter[b"reason"].decode().startswith(reason)

    async def acked() -> bool:
        return (await redis.xpending(stream, Group.SCHEDULER))["pending"] == 0

    await wait_until(acked, 20, "the reclaimed event to be acked")
