"""The Functions library's protocol against a real Redis: every lr_commit op written through a
CommitPlan lands as the op says, every way a commit stops comes back as its named reply, and
the load and the small stream functions answer in their named types."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from shared.store.client import AnyRedis
from shared.store.protocol import (
    CommitOutcome,
    CommitPlan,
    CommitReply,
    Fn,
    LoadReply,
    count,
    flag,
)
from shared.wire.names import Names

AGENT = "agt_01JZ0000000000000000000001"

Setup = Callable[[AnyRedis, str], Awaitable[object]]
Check = Callable[[AnyRedis, str], Awaitable[None]]


async def _nothing(redis: AnyRedis, key: str) -> None:
    return None


async def _hash(redis: AnyRedis, key: str) -> None:
    await redis.hset(key, "f", "old")


async def _list(redis: AnyRedis, key: str) -> None:
    await redis.rpush(key, "a", "b", "c")


async def _zset(redis: AnyRedis, key: str) -> None:
    await redis.zadd(key, {"m": 1})


async def _pending(redis: AnyRedis, key: str) -> None:
    await redis.xgroup_create(key, "g", id="0", mkstream=True)
    await redis.xadd(key, {"m": "x"}, id="1-1")
    await redis.xreadgroup("g", "c", {key: ">"})


async def _hset_done(redis: AnyRedis, key: str) -> None:
    assert await redis.hget(key, "f") == b"new"


async def _hdel_done(redis: AnyRedis, key: str) -> None:
    assert not await redis.hexists(key, "f")


async def _set_done(redis: AnyRedis, key: str) -> None:
    assert await redis.get(key) == b"v"
    assert await redis.ttl(key) == -1


async def _setex_done(redis: AnyRedis, key: str) -> None:
    assert await redis.get(key) == b"v"
    assert 0 < await redis.ttl(key) <= 60


async def _zadd_done(redis: AnyRedis, key: str) -> None:
    assert await redis.zscore(key, "m") == 2.5


async def _zrem_done(redis: AnyRedis, key: str) -> None:
    assert await redis.zscore(key, "m") is None


def _list_is(*values: bytes) -> Check:
    async def check(redis: AnyRedis, key: str) -> None:
        assert await redis.lrange(key, 0, -1) == list(values)

    return check


async def _xadd_done(redis: AnyRedis, key: str) -> None:
    ((_, fields),) = await redis.xrange(key)
    assert fields == {b"m": b"body", b"k": b"agent"}


async def _reply_done(redis: AnyRedis, key: str) -> None:
    ((_, fields),) = await redis.xrange(key)
    assert fields == {b"m": b"body"}
    assert 0 < await redis.ttl(key) <= 60


async def _xack_done(redis: AnyRedis, key: str) -> None:
    assert (await redis.xpending(key, "g"))["pending"] == 0


OPS: dict[str, tuple[Setup, tuple[Any, ...], Check]] = {
    "hset": (_nothing, ("f", "new"), _hset_done),
    "hdel": (_hash, ("f",), _hdel_done),
    "set": (_nothing, ("v",), _set_done),
    "setex": (_nothing, (60, "v"), _setex_done),
    "zadd": (_zset, ("2.5", "m"), _zadd_done),
    "zrem": (_zset, ("m",), _zrem_done),
    "rpush": (_list, ("d",), _list_is(b"a", b"b", b"c", b"d")),
    "ltrim": (_list, (-2, -1), _list_is(b"b", b"c")),
    "lpop": (_list, (2,), _list_is(b"c")),
    "xadd": (_nothing, (100, "body", "agent"), _xadd_done),
    "reply": (_nothing, (100, 60, "body"), _reply_done),
    "xack": (_pending, ("g", "1-1"), _xack_done),
}


def plan(names: Names, command_id: str, *, expected: str = "*", fence: str = "") -> CommitPlan:
    commit = CommitPlan.for_agent(names, AGENT, reply_ttl=60)
    commit.begin(f"{names.agent(AGENT)}:idem:{command_id}", expected, "", fence, b"reply")
    return commit


async def commit(redis: AnyRedis, commit: CommitPlan) -> CommitReply:
    keys = commit.keys
    return CommitReply.parse(await redis.fcall(Fn.COMMIT, len(keys), *keys, *commit.sealed()))  # type: ignore[misc]


@pytest.mark.parametrize("op", sorted(OPS))
async def test_each_commit_op_round_trips(redis: AnyRedis, names: Names, op: str) -> None:
    setup, args, check = OPS[op]
    key = f"{names.agent(AGENT)}:{op}"
    await setup(redis, key)
    written = plan(names, f"cmd-{op}")
    written.op(op, key, *args)
    assert await commit(redis, written) == CommitReply(1, CommitOutcome.APPLIED)
    await check(redis, key)
    assert await redis.get(f"{names.agent(AGENT)}:idem:cmd-{op}") == b"reply"


async def test_a_repeated_command_comes_back_as_a_duplicate_with_its_stored_reply(
    redis: AnyRedis, names: Names
) -> None:
    first = plan(names, "cmd-1")
    first.op("rpush", f"{names.agent(AGENT)}:list", "once")
    assert (await commit(redis, first)).outcome is CommitOutcome.APPLIED
    again = plan(names, "cmd-1")
    again.op("rpush", f"{names.agent(AGENT)}:list", "twice")
    assert await commit(redis, again) == CommitReply(
        0, CommitOutcome.DUPLICATE, stored_reply=b"reply"
    )
    assert await redis.lrange(f"{names.agent(AGENT)}:list", 0, -1) == [b"once"]


async def test_a_version_conflict_names_the_version_found(redis: AnyRedis, names: Names) -> None:
    await redis.hset(names.agent(AGENT), "version", "7")
    assert await commit(redis, plan(names, "cmd-v", expected="6")) == CommitReply(
        0, CommitOutcome.CONFLICT, found="7"
    )


async def test_a_stale_fence_names_the_fence_found(redis: AnyRedis, names: Names) -> None:
    await redis.set(names.fence(AGENT), "3")
    assert await commit(redis, plan(names, "cmd-f", fence="2")) == CommitReply(
        0, CommitOutcome.STALE, found="3"
    )


async def test_a_run_stops_at_its_first_failed_check(redis: AnyRedis, names: Names) -> None:
    await redis.set(names.fence(AGENT), "3")
    run = plan(names, "cmd-a")
    run.op("rpush", f"{names.agent(AGENT)}:list", "a")
    run.begin(f"{names.agent(AGENT)}:idem:cmd-b", "*", "", "2", b"reply-b")
    run.op("rpush", f"{names.agent(AGENT)}:list", "b")
    assert await commit(redis, run) == CommitReply(1, CommitOutcome.STALE, found="3")
    assert await redis.lrange(f"{names.agent(AGENT)}:list", 0, -1) == [b"a"]


async def load(redis: AnyRedis, names: Names, *args: str) -> LoadReply:
    n = names
    keys = [f"{n.agent(AGENT)}:idem:x", n.agent(AGENT), n.fence(AGENT), n.items(AGENT)]
    keys += [n.waits(AGENT), n.waits_done(AGENT), n.placeholder(AGENT), n.placeholder(AGENT)]
    return LoadReply.parse(await redis.fcall_ro(Fn.LOAD, len(keys), *keys, *args))  # type: ignore[misc]


async def test_a_load_is_full_unless_the_agent_is_at_the_callers_version(
    redis: AnyRedis, names: Names
) -> None:
    await redis.hset(names.agent(AGENT), mapping={"doc": "{}", "version": "4", "current": "wi"})
    await redis.hset(names.items(AGENT), "wi", "item")
    await redis.set(names.fence(AGENT), "9")
    full = await load(redis, names, "v:3")
    assert (full.unchanged, full.agent_doc, full.items, full.version, full.fence) == (
        False,
        b"{}",
        [b"item"],
        4,
        9,
    )
    current = await load(redis, names, "v:4")
    assert (current.unchanged, current.agent_doc, current.items) == (True, None, [])
    assert (current.version, current.fence, current.stored_reply) == (4, 9, None)


async def test_xadd_all_appends_every_entry_in_order(redis: AnyRedis, names: Names) -> None:
    stream = names.commands(0)
    answer = await redis.fcall(Fn.XADD_ALL, 1, stream, 1000, "a", "b", "c")  # type: ignore[misc]
    assert count(answer) == 3
    assert [f[b"m"] for _, f in await redis.xrange(stream)] == [b"a", b"b", b"c"]


async def test_touch_and_ack_act_only_for_the_entrys_owner(redis: AnyRedis, names: Names) -> None:
    stream = names.ticks(0)
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    entry = await redis.xadd(stream, {"m": "tick"})
    await redis.xreadgroup("g", "mine", {stream: ">"})

    async def call(fn: Fn, consumer: str) -> bool:
        return flag(await redis.fcall(fn, 1, stream, "g", entry, consumer))  # type: ignore[misc]

    assert not await call(Fn.TOUCH_IF_MINE, "other")
    assert not await call(Fn.ACK_IF_MINE, "other")
    assert await call(Fn.TOUCH_IF_MINE, "mine")
    ((_, owner, _, deliveries),) = [
        (p["message_id"], p["consumer"], p["time_since_delivered"], p["times_delivered"])
        for p in await redis.xpending_range(stream, "g", "-", "+", 10)
    ]
    assert (owner, deliveries) == (b"mine", 1)  # a touch counts no delivery
    assert await call(Fn.ACK_IF_MINE, "mine")
    assert (await redis.xpending(stream, "g"))["pending"] == 0
    assert not await call(Fn.ACK_IF_MINE, "mine")
