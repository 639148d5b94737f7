"""The consumer policy every service reads its streams with (shared.consumer), through
faststream's real subscribers on a real Redis: poison entries are dead-lettered with their reason
while the consumer goes on, entries past the delivery cap are dead-lettered by the reclaimer, a
transient failure leaves the entry pending until the reclaimer delivers it again, and health
fails once a subscriber has stopped. Each service's process tests show the same through its own
wiring."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from prometheus_client import CollectorRegistry
from redis.exceptions import ConnectionError as RedisConnectionError

from shared.consumer import (
    DELIVERY_CAP,
    TRANSIENT,
    Delivered,
    Fields,
    Rejected,
    StreamConsumer,
    Transient,
    required,
    subscribers_running,
)
from shared.ledger_client import LedgerTimeout
from shared.metrics import build_metrics
from shared.runtime import connect_broker, make_broker
from shared.settings import CommonSettings
from shared.store.client import AnyRedis
from shared.streams import ensure_groups
from shared.wire.codec import CodecError
from shared.wire.names import Names

GROUP = "policy"


def decode(fields: Fields) -> str:
    """An entry's `m` as text; `refuse` is a domain refusal, bytes that are not UTF-8 poison."""
    try:
        text = required(fields, "m").decode()
    except UnicodeDecodeError as exc:
        raise CodecError(f"not text: {exc}") from None
    if text == "refuse":
        raise Rejected("forbidden", "refused by the use case")
    return text


class UseCase:
    """Records what it handled; `fail` maps a value to the failures it raises, in order, and
    `broken` always fails."""

    def __init__(self, fail: dict[str, list[BaseException]] | None = None) -> None:
        self.handled: list[tuple[str, str]] = []
        self.fail = fail or {}

    async def handle(self, batch: Sequence[Delivered[str]]) -> None:
        for one in batch:
            if one.value == "broken":
                raise ValueError("no such thing")
            failures = self.fail.get(one.value, [])
            if failures:
                raise failures.pop(0)
        self.handled += [(one.value, one.consumer) for one in batch]


def policy(redis: AnyRedis, names: Names, use: UseCase) -> StreamConsumer[str]:
    metrics = build_metrics(CollectorRegistry())
    return StreamConsumer(redis, names, metrics, group=GROUP, decode=decode, handle=use.handle)


@asynccontextmanager
async def serving(
    redis_url: str, consumer: StreamConsumer[str], stream: str, idle_ms: int = 60_000
) -> AsyncIterator[list[Any]]:
    """A broker reading `stream` under the policy: one batch subscriber and a reclaimer."""
    broker = make_broker(CommonSettings(redis_url=redis_url))
    subscribers = consumer.subscribe(broker, stream, consumer="me", size=10, idle_ms=idle_ms)
    await ensure_groups(consumer.redis, [stream], GROUP)
    await connect_broker(broker)
    await broker.start()
    try:
        yield subscribers
    finally:
        await broker.stop()


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def letters(redis: AnyRedis, names: Names) -> dict[bytes, dict[bytes, bytes]]:
    return {f[b"source_id"]: f for _, f in await redis.xrange(names.dead_letter)}


async def pending(redis: AnyRedis, stream: str) -> int:
    return int((await redis.xpending(stream, GROUP))["pending"])


async def test_a_poison_entry_is_dead_lettered_with_its_reason_and_the_consumer_goes_on(
    redis_url: str, redis: AnyRedis, names: Names
) -> None:
    use = UseCase()
    consumer = policy(redis, names, use)
    stream = names.commands(0)
    async with serving(redis_url, consumer, stream):
        ids = [
            await redis.xadd(stream, fields)
            for fields in (
                {"other": "no envelope"},
                {"m": b"\xff\xfe"},
                {"m": "refuse"},
                {"m": "broken"},
                {"m": "fine"},
            )
        ]
        await redis.xadd(stream, {"m": "after"})

        async def settled() -> bool:
            done = len(use.handled) == 2 and await pending(redis, stream) == 0
            return done and len(await letters(redis, names)) == 4

        await until(settled, "the good entries handled and the poison ones dead-lettered")
    assert [value for value, _ in use.handled] == ["fine", "after"]
    dead = await letters(redis, names)
    reasons = [dead[i][b"reason"].decode() for i in ids[:4]]
    assert reasons[0] == "undecodable: entry has no 'm' field (longrun messages carry one envelope)"
    assert reasons[1].startswith("undecodable: not text")
    assert reasons[2] == "forbidden: refused by the use case"
    assert reasons[3] == "failed: ValueError('no such thing')"
    assert dead[ids[0]][b"other"] == b"no envelope"  # the original fields travel with it
    assert {f[b"source_stream"] for f in dead.values()} == {stream.encode()}


async def test_an_entry_past_the_delivery_cap_is_dead_lettered_by_the_reclaimer_unhandled(
    redis_url: str, redis: AnyRedis, names: Names
) -> None:
    use = UseCase()
    consumer = policy(redis, names, use)
    stream = names.commands(1)
    await ensure_groups(redis, [stream], GROUP)
    entry_id = await redis.xadd(stream, {"m": "kills its consumers"})
    await redis.xreadgroup(GROUP, "died-0", {stream: ">"})
    for n in range(1, DELIVERY_CAP):  # each delivery died with its consumer
        await redis.xclaim(stream, GROUP, f"died-{n}", 0, [entry_id])
    async with serving(redis_url, consumer, stream, idle_ms=100):

        async def dead_lettered() -> bool:
            return entry_id in await letters(redis, names) and await pending(redis, stream) == 0

        await until(dead_lettered, "the entry past its delivery cap in the dead-letter stream")
    letter = (await letters(redis, names))[entry_id]
    assert letter[b"reason"] == f"delivery_cap: {DELIVERY_CAP + 1} deliveries".encode()
    assert use.handled == []


async def test_a_transient_failure_leaves_the_entry_pending_and_the_reclaimer_delivers_it_again(
    redis_url: str, redis: AnyRedis, names: Names
) -> None:
    away = [RedisConnectionError("Redis went away"), LedgerTimeout("no reply"), Transient("busy")]
    use = UseCase(fail={"retried": list(away)})
    consumer = policy(redis, names, use)
    stream = names.commands(2)
    async with serving(redis_url, consumer, stream, idle_ms=200):
        await redis.xadd(stream, {"m": "retried"})

        async def handled() -> bool:
            return bool(use.handled) and await pending(redis, stream) == 0

        await until(handled, "the entry handled once its failures passed")
    # The batch subscriber's delivery failed, then the reclaimer's twice, then one succeeded.
    assert use.handled == [("retried", "me-reclaim")]
    assert await redis.xlen(names.dead_letter) == 0


def test_every_transient_failure_is_in_the_one_list() -> None:
    for failure in (RedisConnectionError, LedgerTimeout, Transient, OSError, TimeoutError):
        assert issubclass(failure, TRANSIENT)
    assert not issubclass(Rejected, TRANSIENT)
    assert not issubclass(CodecError, TRANSIENT)


async def test_health_fails_once_a_subscriber_has_stopped(
    redis_url: str, redis: AnyRedis, names: Names
) -> None:
    consumer = policy(redis, names, UseCase())
    stream = names.commands(3)
    async with serving(redis_url, consumer, stream) as subscribers:
        assert len(subscribers) == 2  # a batch subscriber and a reclaimer
        assert subscribers_running(subscribers)
        await redis.delete(stream)  # its group vanishes with it: NOGROUP on the next read

        async def unhealthy() -> bool:
            return not subscribers_running(subscribers)

        await until(unhealthy, "the subscriber that met NOGROUP to count as stopped")
    assert not subscribers_running([])
