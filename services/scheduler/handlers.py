"""Stream in, use case, stream out: per partition, a batch subscriber and a reclaimer on the
event stream and on the fired-timers stream (group `scheduler`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisStreamMessage
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from services.scheduler.policy import EventFacts, TimerRef, event_facts
from services.scheduler.service import SchedulerService
from shared.coalesce import Coalescer
from shared.store.client import CLUSTER_UNAVAILABLE, AnyRedis
from shared.streams import (
    DELIVERY_CAP,
    dead_letter,
    lean_batch,
    lean_entry,
    raw_batch,
    raw_fields,
)
from shared.wire.codec import CodecError
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.scheduler")

TRANSIENT: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    *CLUSTER_UNAVAILABLE,
)
"""Errors that leave entries pending for the reclaimer instead of dead-lettering them."""

T = TypeVar("T")

ROUND_LIMIT = 200
"""Entries one coalesced round decides at most: two full batches, about 30 ms of decisions."""
ROUNDS_AT_ONCE = 4
"""Coalesced rounds in flight at once: one decides while others wait for Redis; batches that
arrive with all four running share the next one. With one, the process would sit idle during
each round's Redis waits; with one per partition (16), nothing would coalesce."""
Consume = Callable[[str, Sequence[str], Sequence[Mapping[Any, Any]]], Awaitable[None]]


def _field(fields: Mapping[Any, Any], name: str) -> Any:
    """A field by name, whether the entry's keys are bytes (as read from Redis) or text."""
    raw = fields.get(name.encode())
    if raw is None:
        raw = fields.get(name)
    if raw is None:
        raise CodecError(f"entry has no {name!r} field")
    return raw


def decode_events(fields: Mapping[Any, Any]) -> EventFacts:
    try:
        doc = orjson.loads(_field(fields, "m"))
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CodecError("envelope must be a JSON object")
    return event_facts(doc)


def decode_timer(fields: Mapping[Any, Any]) -> TimerRef:
    return TimerRef.parse(_field(fields, "m"))


class SchedulerConsumer:
    """Decodes entries, hands them to the service, dead-letters what can never be handled."""

    def __init__(self, service: SchedulerService, redis: AnyRedis, names: Names) -> None:
        self.service = service
        self.redis = redis
        self.names = names
        # Partitions' batches that arrive while one is decided share the next round's reads and
        # writes: at 1,000 events/s over 16 partitions most batches hold one entry.
        self.events = Coalescer(service.on_events, limit=ROUND_LIMIT, rounds=ROUNDS_AT_ONCE)

    async def consume_events(
        self, stream: str, ids: Sequence[str], entries: Sequence[Mapping[Any, Any]]
    ) -> None:
        await self._consume(stream, ids, entries, decode_events, self.events.submit)

    async def consume_fired(
        self, stream: str, ids: Sequence[str], entries: Sequence[Mapping[Any, Any]]
    ) -> None:
        await self._consume(stream, ids, entries, decode_timer, self.service.on_fired)

    async def _consume(
        self,
        stream: str,
        ids: Sequence[str],
        entries: Sequence[Mapping[Any, Any]],
        decode: Callable[[Mapping[Any, Any]], T],
        apply: Callable[[Sequence[T]], Awaitable[object]],
    ) -> None:
        decoded: list[tuple[str, Mapping[Any, Any], T]] = []
        for entry_id, fields in zip(ids, entries, strict=True):
            try:
                decoded.append((entry_id, fields, decode(fields)))
            except CodecError as err:
                await self.poison(stream, entry_id, fields, f"undecodable: {err}")
        if not decoded:
            return
        try:
            await apply([value for _, _, value in decoded])
        except TRANSIENT:
            raise
        except Exception:
            log.exception("batch_failed_retrying_one_by_one", stream=stream, size=len(decoded))
            for entry_id, fields, value in decoded:
                await self._one(stream, entry_id, fields, value, apply)

    async def _one(
        self,
        stream: str,
        entry_id: str,
        fields: Mapping[Any, Any],
        value: T,
        apply: Callable[[Sequence[T]], Awaitable[object]],
    ) -> None:
        """Isolate the entry that breaks a batch, so the others are still handled now."""
        try:
            await apply([value])
        except TRANSIENT:
            raise
        except Exception as exc:
            await self.poison(stream, entry_id, fields, f"handling failed: {exc!r}")

    async def poison(
        self, stream: str, entry_id: str, fields: Mapping[Any, Any], reason: str
    ) -> None:
        await dead_letter(
            self.redis,
            self.names,
            fields=fields,
            reason=reason,
            source_stream=stream,
            source_id=entry_id,
        )
        self.service.metrics.dead_lettered.labels(
            stream=stream, reason=reason.split(":", maxsplit=1)[0]
        ).inc()


def register(
    broker: RedisBroker,
    consumer: SchedulerConsumer,
    *,
    partitions: Sequence[int],
    consumer_name: str,
    batch_size: int,
    reclaim_idle_ms: int,
) -> list[Any]:
    """Per partition and stream: a batch subscriber and a reclaimer (one factory call each,
    NOTES 13)."""
    subscribers = []
    names = consumer.names
    for p in partitions:
        for stream, consume in (
            (names.events(p), consumer.consume_events),
            (names.timers_fired(p), consumer.consume_fired),
        ):
            subscribers.append(_batch(broker, consume, stream, consumer_name, batch_size))
            subscribers.append(
                _reclaimer(
                    broker, consumer, consume, stream, name=consumer_name, idle_ms=reclaim_idle_ms
                )
            )
    return subscribers


def _batch(broker: RedisBroker, consume: Consume, stream: str, name: str, size: int) -> Any:
    sub = broker.subscriber(
        stream=StreamSub(
            stream,
            group=Group.SCHEDULER,
            consumer=name,
            batch=True,
            max_records=size,
            polling_interval=1000,
        ),
        ack_policy=AckPolicy.REJECT_ON_ERROR,
        parser=lean_batch,
        decoder=raw_batch,
    )

    @sub
    async def handle(raw: Any) -> None:
        # The raw entries, keys and values as bytes: each is decoded once, by `consume`.
        ids = [i.decode() for i in raw["message_ids"]]
        await consume(stream, ids, raw["data"])

    return sub


def _reclaimer(
    broker: RedisBroker,
    consumer: SchedulerConsumer,
    consume: Consume,
    stream: str,
    *,
    name: str,
    idle_ms: int,
) -> Any:
    sub = broker.subscriber(
        stream=StreamSub(
            stream,
            group=Group.SCHEDULER,
            consumer=f"{name}-reclaim",
            min_idle_time=idle_ms,
            polling_interval=1000,
        ),
        ack_policy=AckPolicy.REJECT_ON_ERROR,
        parser=lean_entry,
        decoder=raw_fields,
    )

    @sub
    async def reclaim(fields: Any, msg: RedisStreamMessage) -> None:
        entry_id = msg.raw_message["message_ids"][0].decode()
        deliveries = await msg.get_delivery_count()
        if deliveries > DELIVERY_CAP:
            await consumer.poison(
                stream, entry_id, fields, f"delivery cap: {deliveries} deliveries"
            )
            return
        log.info("entry_reclaimed", stream=stream, entry_id=entry_id, deliveries=deliveries)
        await consume(stream, [entry_id], [fields])

    return sub
