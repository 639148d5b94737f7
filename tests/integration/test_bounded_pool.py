"""The connection pool behind every service's Redis client (BoundedPool).

It keeps redis-py's blocking pool's contract with less work per call: never more than
`max_connections` connections, a caller finding them all in use waits (up to `timeout`) for
one, a cancelled waiter or holder loses no slot, and a connection left with an unread reply
is never handed to the next caller. Checked against the machine's Redis.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from faststream.redis import RedisBroker
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from shared.runtime import connect_broker, make_broker
from shared.settings import CommonSettings
from shared.store.client import BoundedPool, HiredisPackingConnection


@asynccontextmanager
async def _pooled(url: str, size: int, wait: float | None = 5.0) -> AsyncIterator[Redis]:
    """A client on a BoundedPool of `size` connections (callers wait up to `wait` s for
    one), closed afterwards."""
    pool = BoundedPool.from_url(
        url, max_connections=size, timeout=wait, connection_class=HiredisPackingConnection
    )
    client = Redis.from_pool(pool)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def plain(redis_url: str) -> AsyncIterator[Redis]:
    """A second client, outside the pool under test (to push to the lists it waits on)."""
    async with _pooled(redis_url, size=4) as client:
        yield client


@pytest.fixture
async def keys(plain: Redis) -> AsyncIterator[list[str]]:
    names = [f"lr:test:pool:{secrets.token_hex(4)}:{n}" for n in range(4)]
    yield names
    await plain.delete(*names)


async def _blpop(client: Redis, key: str) -> object:
    return await client.blpop([key], timeout=10)


async def _get(client: Redis, key: str) -> object:
    return await client.get(key)


async def _set(client: Redis, key: str) -> object:
    return await client.set(key, b"v")


def _pool(client: Redis) -> BoundedPool:
    pool = client.connection_pool
    assert isinstance(pool, BoundedPool)
    return pool


async def test_a_caller_waits_while_every_connection_is_in_use(
    redis_url: str, plain: Redis, keys: list[str]
) -> None:
    async with _pooled(redis_url, size=2) as client:
        held = [asyncio.create_task(_blpop(client, k)) for k in keys[:2]]
        await asyncio.sleep(0.2)  # both BLPOPs are blocked in Redis, holding both connections
        waiting = asyncio.create_task(_set(client, keys[2]))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        assert await plain.get(keys[2]) is None

        await plain.lpush(keys[0], b"x")  # the first BLPOP answers and frees its connection
        assert await asyncio.wait_for(waiting, 5) is True
        assert await held[0] == (keys[0].encode(), b"x")
        await plain.lpush(keys[1], b"y")
        assert await held[1] == (keys[1].encode(), b"y")

        pool = _pool(client)
        assert len(pool._available_connections) == 2  # never a third connection
        assert not pool._in_use_connections


async def test_past_the_timeout_a_waiting_caller_gets_a_connection_error(
    redis_url: str, plain: Redis, keys: list[str]
) -> None:
    async with _pooled(redis_url, size=1, wait=0.2) as client:
        held = asyncio.create_task(_blpop(client, keys[0]))
        await asyncio.sleep(0.2)
        with pytest.raises(RedisConnectionError, match="No connection available"):
            await client.get(keys[1])
        await plain.lpush(keys[0], b"x")
        await held
        assert await client.get(keys[1]) is None  # the slot came back


async def test_cancelled_holders_and_waiters_give_their_slots_back(
    redis_url: str, keys: list[str]
) -> None:
    async with _pooled(redis_url, size=1) as client:
        held = asyncio.create_task(_blpop(client, keys[0]))
        await asyncio.sleep(0.2)
        waiting = asyncio.create_task(_get(client, keys[1]))
        await asyncio.sleep(0.1)
        waiting.cancel()
        held.cancel()
        for task in (waiting, held):
            with pytest.raises(asyncio.CancelledError):
                await task

        await client.set(keys[1], b"after")  # not stuck behind a lost slot
        assert await client.get(keys[1]) == b"after"
        assert not _pool(client)._slots.locked()


async def test_a_connection_left_with_an_unread_reply_is_not_handed_on(
    redis_url: str, keys: list[str]
) -> None:
    async with _pooled(redis_url, size=1) as client:
        await client.set(keys[0], b"mine")
        pool = _pool(client)
        connection = await pool.get_connection()
        await connection.send_command("PING")  # its PONG is never read
        await asyncio.sleep(0.1)
        await pool.release(connection)

        assert await client.get(keys[0]) == b"mine"  # not the stale PONG


async def test_a_connection_from_before_a_reset_is_closed_not_pooled(
    redis_url: str, keys: list[str]
) -> None:
    async with _pooled(redis_url, size=2) as client:
        pool = _pool(client)
        connection = await pool.get_connection()
        pool.reset()
        await pool.release(connection)
        assert not pool._available_connections
        assert connection.is_connected is False
        assert await client.set(keys[0], b"v") is True
        assert len(pool._available_connections) == 1


async def test_the_broker_packs_its_commands_like_longruns_client(redis_url: str) -> None:
    broker = make_broker(CommonSettings(redis_url=redis_url))
    assert isinstance(broker, RedisBroker)
    await connect_broker(broker)
    try:
        client = await broker.connect()
        assert isinstance(client, Redis)
        assert client.connection_pool.connection_class is HiredisPackingConnection
        assert await client.ping() is True
    finally:
        await broker.stop()
