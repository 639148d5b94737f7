"""The ledger client's writes: one send's commands reach a waiting ledger together and in order,
a queued send keeps its place ahead of everything sent after it, concurrent sends share
pipelines, a failed write fails only its own sender, and stopping ends the reply reader even when
its cancel is swallowed."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import ResponseError

from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.wire import commands as c
from shared.wire.codec import decode
from shared.wire.names import Names
from tests.integration.conftest import Pump


def message(agent: str, n: int) -> c.AppendOperatorMessage:
    return c.AppendOperatorMessage(
        command_id=f"{agent}-m{n}", agent_id=agent, message_id=f"{agent}-m{n}", text=f"hi {n}"
    )


def ids(entries: list[Any]) -> list[str]:
    return [decode(fields[b"m"]).body.command_id for _, fields in entries]


async def test_one_sends_commands_reach_a_blocked_reader_in_one_read(
    redis: AnyRedis, names: Names, client: LedgerClient
) -> None:
    """Redis serves a blocked reader after each command: XADDs one by one would hand a waiting
    ledger the first command alone."""
    stream = names.commands(names.partition("a"))
    reader = asyncio.create_task(redis.xread({stream: "$"}, block=5000))
    await asyncio.sleep(0.2)  # the read is blocked on the stream
    await client.publish(*(message("a", n) for n in range(3)))
    ((_, entries),) = await asyncio.wait_for(reader, 5)
    assert ids(entries) == ["a-m0", "a-m1", "a-m2"]


async def test_a_send_across_partitions_writes_each_entry_to_its_stream(
    redis: AnyRedis, names: Names, client: LedgerClient
) -> None:
    agents = ["a", "b", "c", "d", "e"]
    assert len({names.partition(a) for a in agents}) > 1
    await client.publish(*(message(a, 0) for a in agents))
    for agent in agents:
        entries = await redis.xrange(names.commands(names.partition(agent)))
        assert f"{agent}-m0" in ids(entries)


async def test_a_queued_send_stays_ahead_of_later_sends(
    pump: Pump, redis: AnyRedis, names: Names, client: LedgerClient
) -> None:
    ensure = c.EnsureAgent(
        command_id="ensure-a", agent_id="a", agent_token_hash="a" * 64, callback_token_hash="b" * 64
    )
    assert (await client.send(ensure)).error is None
    queued = client.queue_all([message("a", 0), message("a", 1)])
    (later,) = await client.send_all([message("a", 2)])
    replies = await queued
    assert [r.error for r in [*replies, later]] == [None, None, None]
    entries = await redis.xrange(names.commands(names.partition("a")))
    assert ids(entries) == ["ensure-a", "a-m0", "a-m1", "a-m2"]


async def test_concurrent_sends_share_pipelines_in_order(
    redis: AnyRedis, names: Names, client: LedgerClient
) -> None:
    """Sends queued in one loop iteration leave in one pipeline (at most `limit` sends each),
    and reach their stream in the order they were queued; a lone send gets its own."""
    client._writes.limit = 20
    before = client._writes.rounds
    await asyncio.gather(*(client.publish(message("a", n)) for n in range(50)))
    assert client._writes.rounds - before == 3  # 20 + 20 + 10
    entries = await redis.xrange(names.commands(names.partition("a")))
    assert ids(entries) == [f"a-m{n}" for n in range(50)]
    await client.publish(message("a", 50))
    assert client._writes.rounds - before == 4


async def test_a_failed_write_fails_only_its_sender(
    redis: AnyRedis, names: Names, client: LedgerClient
) -> None:
    bad = next(a for a in ("b", "c", "d", "e") if names.partition(a) != names.partition("a"))
    await redis.set(names.commands(names.partition(bad)), "not a stream")
    good_send, bad_send = client.publish(message("a", 0)), client.publish(message(bad, 0))
    good, failed = await asyncio.gather(good_send, bad_send, return_exceptions=True)
    assert good is None
    assert isinstance(failed, ResponseError)
    assert "WRONGTYPE" in str(failed)
    assert ids(await redis.xrange(names.commands(names.partition("a")))) == ["a-m0"]


class SwallowsCancels:
    """A client whose reads go on through a cancel, as redis-py's do on Python 3.11 when the
    cancel lands while a command's write finishes: asyncio.wait_for, which redis-py writes
    through whenever a socket timeout is set (every Redis Cluster connection), then returns the
    write's result and drops the cancel (gh-86296)."""

    def __init__(self, redis: AnyRedis) -> None:
        self.redis = redis
        self.swallowed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.redis, name)

    async def xread(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.redis.xread(*args, **kwargs)
        except asyncio.CancelledError:
            self.swallowed += 1
            return await self.redis.xread(*args, **kwargs)


async def test_stop_ends_the_reply_reader_even_when_its_cancel_is_swallowed(
    redis: AnyRedis, names: Names
) -> None:
    swallowing = SwallowsCancels(redis)
    client = LedgerClient(swallowing, names, clock=utc_now, new_id=new_id)  # type: ignore[arg-type]
    await client.start()
    reader = client._reader
    assert reader is not None
    # The cancel lands in the read, not before it; Redis is the one to say the read is blocked.
    while not await blocked_on_xread(redis):  # noqa: ASYNC110 - Redis holds the state
        await asyncio.sleep(0.01)
    await asyncio.wait_for(client.stop(), 30)  # a bound on a hang, not on speed
    assert swallowing.swallowed == 1
    assert reader.done()
    assert not client.running
    assert await redis.exists(client.reply_stream) == 0


async def blocked_on_xread(redis: AnyRedis) -> bool:
    clients = await redis.client_list()
    return any(c["cmd"] == "xread" and "b" in c["flags"] for c in clients)
