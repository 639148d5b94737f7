"""Stream in, use case, stream out: per partition, a batch subscriber and a reclaimer on the
event stream and on the fired-timers stream (group `scheduler`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from services.scheduler.policy import EventFacts, TimerRef, event_facts
from services.scheduler.service import SchedulerService
from shared.coalesce import Coalescer
from shared.store.client import CLUSTER_UNAVAILABLE, AnyRedis
from shared.streams import (
    dead_letter,
    stream_subscribers,
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

    async def over_cap(
        self, stream: str, entry_id: str, fields: Mapping[Any, Any], deliveries: int
    ) -> None:
        await self.poison(stream, entry_id, fields, f"delivery cap: {deliveries} deliveries")

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
            subscribers += stream_subscribers(
                broker,
                stream,
                group=Group.SCHEDULER,
                consumer=consumer_name,
                size=batch_size,
                idle_ms=reclaim_idle_ms,
                ack_policy=AckPolicy.REJECT_ON_ERROR,
                consume=consume,
                over_cap=consumer.over_cap,
            )
    return subscribers
