"""faststream's side of every service's stream consumers: consumer groups created at `0`
before faststream starts, unique consumer names, and the subscribers (batch readers and a
reclaimer per stream) that hand entries raw to the consumer policy (`shared.consumer`).

faststream creates a missing group at `$`, which skips entries written before the group existed,
and never redelivers a failed entry by itself; these helpers close both holes together with a
reclaiming subscriber per stream. Everything here goes through faststream's public surface:
`StreamSub`, `AckPolicy`, and the subscriber's `parser` and `decoder` hooks.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, Self

from faststream import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from redis.exceptions import ResponseError

from shared.store.client import AnyRedis


class Subscription(StreamSub[Any]):
    """faststream's StreamSub, not copied when no prefix applies. Each subscriber asks for its
    prefixed subscription on every read and every message's log context, and StreamSub answers
    with a deep copy each time (several times per batch; see docs/benchmarks.md); longrun's
    brokers and routers have no prefix, so the subscription itself is that answer. Nothing
    mutates it."""

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


async def the_message(message: Any) -> Any:
    """The reclaimer's argument is the message itself: its raw entry, and its delivery count."""
    return message


class Consume(Protocol):
    """`StreamConsumer.consume`: a batch's entry ids and raw fields, and who read it."""

    async def __call__(
        self, stream: str, ids: Sequence[str], entries: Sequence[Any], *, consumer: str
    ) -> None: ...


class Reclaimed(Protocol):
    """`StreamConsumer.reclaimed`: one claimed entry and how often it was delivered."""

    async def __call__(
        self, stream: str, entry_id: str, fields: Any, deliveries: int, *, consumer: str
    ) -> None: ...


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
    per subscriber: faststream needs a handler function of its own for each, and a handler
    taking a loop variable as a default parameter would be read as unpacking the body."""
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
        await consume(stream, ids, raw["data"], consumer=consumer)

    return sub


def reclaimer(
    broker: RedisBroker,
    stream: str,
    *,
    group: str,
    consumer: str,
    idle_ms: int,
    ack_policy: AckPolicy,
    reclaimed: Reclaimed,
) -> Any:
    """Claims entries another consumer left pending for `idle_ms` (a dead process's), one at a
    time (XAUTOCLAIM), and hands each to `reclaimed` with its delivery count (one XPENDING)."""
    sub = broker.subscriber(
        stream=Subscription(
            stream, group=group, consumer=consumer, min_idle_time=idle_ms, polling_interval=1000
        ),
        ack_policy=ack_policy,
        parser=lean_entry,
        decoder=the_message,
    )

    @sub
    async def reclaim(msg: Any) -> None:
        entry_id = msg.raw_message["message_ids"][0].decode()
        deliveries = await msg.get_delivery_count()
        await reclaimed(stream, entry_id, msg.raw_message["data"], deliveries, consumer=consumer)

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
    reclaimed: Reclaimed,
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
            reclaimed=reclaimed,
        ),
    ]
