"""Quiescence waits for a timer about to fire, not only for the streams' backlog: the run's
checks read every stream after it, and a timer firing then left a fresh fired entry that the
backlog invariant counted as stranded although the scheduler took it up a moment later."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator

import pytest

from services.scheduler.policy import TimerRef
from shared.store.client import AnyRedis, connect
from shared.wire.names import Group, Names
from tests.chaos.invariants import backlog, quiesce


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[AnyRedis]:
    client = connect(redis_url)
    yield client
    await client.aclose()


async def scheduler_stand_in(
    redis: AnyRedis, names: Names, due_ms: int, handled: asyncio.Event
) -> None:
    """Fires the one timer once due and takes the fired entry up a moment later."""
    timers, fired = names.timers(0), names.timers_fired(0)
    await asyncio.sleep(max(0.0, due_ms / 1000 - time.time()))
    (member,) = await redis.zrangebyscore(timers, "-inf", due_ms)
    await redis.zrem(timers, member)
    await redis.xadd(fired, {"m": member})
    await asyncio.sleep(0.3)
    for _, entries in await redis.xreadgroup(Group.SCHEDULER, "s", {fired: ">"}) or []:
        await redis.xack(fired, Group.SCHEDULER, *[entry_id for entry_id, _ in entries])
    handled.set()


async def test_quiescence_waits_for_a_timer_due_soon_to_fire_and_be_handled(
    redis: AnyRedis,
) -> None:
    names = Names(prefix=f"q{secrets.token_hex(4)}", partitions=1)
    try:
        await redis.xgroup_create(names.timers_fired(0), Group.SCHEDULER, id="0", mkstream=True)
        due = int(time.time() * 1000) + 1000
        await redis.zadd(names.timers(0), {TimerRef("a1", wait_id="w1").member(): due})
        assert await backlog(redis, names) == {}, "nothing fired yet"
        handled = asyncio.Event()
        stand_in = asyncio.create_task(scheduler_stand_in(redis, names, due, handled))
        assert await quiesce(redis, names, 10.0) == {}
        assert handled.is_set(), "quiescence was declared before the due timer was handled"
        assert await backlog(redis, names) == {}
        await stand_in
    finally:
        await redis.delete(names.timers(0), names.timers_fired(0))
