"""Consumer-group plumbing every service shares: groups created at `0` before faststream starts,
unique consumer names, the dead-letter stream, subscriber health, and the lean parsing that
hands every subscriber's handler its entries raw.

faststream creates a missing group at `$`, which skips entries written before the group existed,
and never redelivers a failed entry by itself (FASTSTREAM-NOTES 1, 4); these helpers close both
holes together with a reclaiming subscriber per stream.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Self

import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisStreamMessage
from redis.exceptions import ResponseError

from shared.store.client import AnyRedis
from shared.wire.names import Names

log = structlog.get_logger("longrun.streams")

DEAD_LETTER_MAXLEN = 100_000
DELIVERY_CAP = 5
"""Deliveries after which an entry is poison: it goes to the dead-letter stream, with why."""


class Subscription(StreamSub[Any]):
    """faststream's StreamSub, not copied when no prefix applies. Each subscriber asks for its
    prefixed subscription on every read and every message's log context, and StreamSub answers
    with a deep copy each time (8 µs here, several times per batch); longrun's brokers and
    routers have no prefix, so the subscription itself is that answer. Nothing mutates it."""

    def add_prefix(self, prefix: str) -> Self:
        return super().add_prefix(prefix) if prefix else self


def consumer_name(service: str) -> str:
    """Unique per process, so a restarted process never shares a pending list with a dead one."""
    return f"{service}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


async def ensure_groups(redis: AnyRedis, streams: Iterable[str], group: str) -> None:
    for stream in streams:
        try:
            await redis.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


async def dead_letter(
    redis: AnyRedis,
    names: Names,
    *,
    fields: Mapping[Any, Any],
    reason: str,
    source_stream: str,
    source_id: str,
) -> None:
    """Move an entry aside with its original fields, the reason, and where it came from."""
    entry = {_text(k): _text(v) for k, v in fields.items()}
    entry.update(reason=reason[:2000], source_stream=source_stream, source_id=source_id)
    await redis.xadd(names.dead_letter, entry, maxlen=DEAD_LETTER_MAXLEN, approximate=True)  # type: ignore[arg-type]
    log.warning("dead_lettered", source_stream=source_stream, source_id=source_id, reason=reason)


def subscribers_running(subscribers: Iterable[Any]) -> bool:
    """A subscriber that stopped (NOGROUP, crash) makes the service unhealthy (NOTES 6)."""
    subs = list(subscribers)
    return bool(subs) and all(getattr(s, "running", False) for s in subs)


Parser = Callable[[Mapping[str, Any]], Awaitable[Any]]


async def lean_batch(message: Mapping[str, Any], original: Parser) -> Any:
    """Parse a batch without its bodies: faststream's own parser tries to decode every entry
    as a faststream message, JSON-loads it, then dumps the whole batch back to JSON for the
    body, none of which a handler that reads the raw entries needs, and it fails on values that
    are not UTF-8 (an entry no handler would then ever see, so never dead-letter). The message
    keeps the raw batch, whose `message_ids` its acknowledgement uses."""
    parsed = await original({**message, "data": []})
    parsed.raw_message = message
    return parsed


async def lean_entry(message: Mapping[str, Any], original: Parser) -> Any:
    """`lean_batch` for a single entry (a reclaimer's)."""
    parsed = await original({**message, "data": {}})
    parsed.raw_message = message
    return parsed


async def raw_batch(message: Any) -> Any:
    """The handler's argument is the raw batch itself (`message_ids`, and `data`: each entry's
    fields, keys and values as bytes). A handler parameter annotated as the message would be
    injected from faststream's context by a synchronous resolver, which fast_depends runs in a
    worker thread: one thread hop per batch."""
    return message.raw_message


async def raw_fields(message: Any) -> Any:
    """The handler's argument is the single entry's raw fields (keys and values as bytes)."""
    return message.raw_message["data"]


Consume = Callable[[str, list[str], list[Any]], Awaitable[None]]
"""A service's handler for raw entries: (stream, entry ids, each entry's fields as bytes)."""
OverCap = Callable[[str, str, Any, int], Awaitable[None]]
"""Dead-letters an entry delivered more than DELIVERY_CAP times: (stream, id, fields, count)."""


def batch_subscriber(
    broker: RedisBroker,
    stream: str,
    *,
    group: str,
    consumer: str,
    size: int,
    ack_policy: AckPolicy,
    consume: Consume,
) -> Any:
    """Reads new entries in batches of up to `size`, raw (`lean_batch`, `raw_batch`). One call
    per subscriber: faststream needs a handler function of its own for each (NOTES 13)."""
    sub = broker.subscriber(
        stream=Subscription(
            stream,
            group=group,
            consumer=consumer,
            batch=True,
            max_records=size,
            polling_interval=1000,
        ),
        ack_policy=ack_policy,
        parser=lean_batch,
        decoder=raw_batch,
    )

    @sub
    async def handle(raw: Any) -> None:
        ids = [i.decode() for i in raw["message_ids"]]
        await consume(stream, ids, raw["data"])

    return sub


def reclaimer(
    broker: RedisBroker,
    stream: str,
    *,
    group: str,
    consumer: str,
    idle_ms: int,
    ack_policy: AckPolicy,
    consume: Consume,
    over_cap: OverCap,
) -> Any:
    """Claims entries another consumer left pending for `idle_ms` (a dead process's), one at a
    time: past DELIVERY_CAP deliveries `over_cap` dead-letters the entry, else `consume`
    handles it as a batch of one (FASTSTREAM-NOTES 2)."""
    sub = broker.subscriber(
        stream=Subscription(
            stream, group=group, consumer=consumer, min_idle_time=idle_ms, polling_interval=1000
        ),
        ack_policy=ack_policy,
        parser=lean_entry,
        decoder=raw_fields,
    )

    @sub
    async def reclaim(fields: Any) -> None:
        # The message from the broker's context at call time: a `msg` parameter would be
        # resolved by fast_depends in a worker thread on every call (see `raw_batch`).
        msg: RedisStreamMessage = broker.context.get_local("message")
        entry_id = msg.raw_message["message_ids"][0].decode()
        deliveries = await msg.get_delivery_count()
        if deliveries > DELIVERY_CAP:
            await over_cap(stream, entry_id, fields, deliveries)
            return
        log.info("entry_reclaimed", stream=stream, entry_id=entry_id, deliveries=deliveries)
        await consume(stream, [entry_id], [fields])

    return sub


def stream_subscribers(
    broker: RedisBroker,
    stream: str,
    *,
    group: str,
    consumer: str,
    size: int,
    idle_ms: int,
    ack_policy: AckPolicy,
    consume: Consume,
    over_cap: OverCap,
    batches: int = 1,
) -> list[Any]:
    """What a service reads one stream with: `batches` batch subscribers (consumers
    `consumer`, `consumer-2`, ...: more batches in flight) and one reclaimer
    (`consumer-reclaim`)."""
    names = [consumer] + [f"{consumer}-{k}" for k in range(2, batches + 1)]
    return [
        *(
            batch_subscriber(
                broker,
                stream,
                group=group,
                consumer=name,
                size=size,
                ack_policy=ack_policy,
                consume=consume,
            )
            for name in names
        ),
        reclaimer(
            broker,
            stream,
            group=group,
            consumer=f"{consumer}-reclaim",
            idle_ms=idle_ms,
            ack_policy=ack_policy,
            consume=consume,
            over_cap=over_cap,
        ),
    ]
