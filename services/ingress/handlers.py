"""The callbacks stream in, the callback use case, the dead-letter stream out: one batch
subscriber and one reclaimer on `<prefix>:callbacks`, group `ingress`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker
from pydantic import ValidationError
from redis.exceptions import RedisError

from services.ingress.errors import RATE_LIMITED
from services.ingress.schemas import DEFAULT_CONTENT_TYPE, CallbackEntry
from services.ingress.service import CallbackIntake, CallbackRefused, Delivery
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.streams import (
    dead_letter,
    stream_subscribers,
)
from shared.wire.commands import CallbackSource
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.ingress")

Fields = Mapping[Any, Any]


def _field(fields: Fields, name: str) -> bytes | None:
    value = fields.get(name.encode(), fields.get(name))
    if value is None:
        return None
    return value if isinstance(value, bytes) else str(value).encode()


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def parse_entry(fields: Fields) -> Delivery:
    """A stream entry as a delivery; a missing or malformed field refuses it, naming the field."""
    content_type = _text(_field(fields, "content_type"))
    try:
        # Validated from a dict: a missing field (None) becomes pydantic's error naming it.
        entry = CallbackEntry.model_validate(
            {
                "token": _text(_field(fields, "token")),
                "delivery_id": _text(_field(fields, "delivery_id")),
                "body": _field(fields, "body") or b"",
                "content_type": content_type or DEFAULT_CONTENT_TYPE,
            }
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] in {"missing", "string_type"}:
            raise CallbackRefused("invalid_request", f"missing {where}") from None
        raise CallbackRefused("invalid_request", f"invalid {where}: {first['msg']}") from None
    return Delivery(
        token=entry.token,
        body=entry.body,
        content_type=entry.content_type,
        delivery_id=entry.delivery_id,
        source=CallbackSource.STREAM,
    )


class CallbackConsumer:
    """Accepts a batch of entries; refused ones are dead-lettered, transient failures leave the
    batch pending for the reclaimer (the same delivery maps to the same command, so a replay
    is a duplicate, never a second trigger)."""

    def __init__(
        self, intake: CallbackIntake, redis: AnyRedis, names: Names, metrics: Metrics
    ) -> None:
        self.intake = intake
        self.redis = redis
        self.names = names
        self.metrics = metrics

    async def consume(self, ids: Sequence[str], entries: Sequence[Fields]) -> None:
        parsed: list[tuple[str, Fields, Delivery]] = []
        for entry_id, fields in zip(ids, entries, strict=True):
            delivery = await self.admitted(entry_id, fields)
            if delivery is not None:
                parsed.append((entry_id, fields, delivery))
        outcomes = await asyncio.gather(
            *(self.intake.accept(d) for _, _, d in parsed), return_exceptions=True
        )
        transient: BaseException | None = None
        for (entry_id, fields, _), outcome in zip(parsed, outcomes, strict=True):
            if isinstance(outcome, CallbackRefused):
                await self.poison(entry_id, fields, outcome.kind, outcome.message)
            elif isinstance(outcome, BaseException):
                transient = outcome
        if transient is not None:
            raise transient

    async def admitted(self, entry_id: str, fields: Fields) -> Delivery | None:
        """The entry as a delivery, or None once it is dead-lettered: malformed, or over its
        capability's rate limit (the same bucket as HTTP). The stream has nobody to answer 429
        to, and holding the entry back would stall the whole group behind one noisy producer,
        so it goes where a producer or operator can see the reason and replay it later."""
        try:
            delivery = parse_entry(fields)
        except CallbackRefused as refused:
            self.metrics.callbacks.labels(outcome="rejected").inc()
            await self.poison(entry_id, fields, refused.kind, refused.message)
            return None
        wait = self.intake.admit(delivery.token)
        if wait > 0:
            message = f"over this capability's callback rate limit; replay after {wait:.1f} s"
            await self.poison(entry_id, fields, RATE_LIMITED, message)
            return None
        return delivery

    async def sample_pending(self) -> None:
        """Set longrun_stream_pending for the callbacks group (scaling and alerting read it)."""
        try:
            info = await self.redis.xpending(self.names.callbacks, Group.INGRESS)
        except (RedisError, OSError):
            return  # no group yet, or Redis away: /readyz reports the latter
        gauge = self.metrics.stream_pending.labels(stream=self.names.callbacks, group=Group.INGRESS)
        gauge.set(int(info["pending"]))

    async def consume_stream(
        self, _stream: str, ids: Sequence[str], entries: Sequence[Fields]
    ) -> None:
        """`consume`, as the shared subscribers call it (the stream is always `callbacks`)."""
        await self.consume(ids, entries)

    async def over_cap(self, _stream: str, entry_id: str, fields: Fields, deliveries: int) -> None:
        await self.poison(entry_id, fields, "delivery_cap", f"{deliveries} deliveries")

    async def poison(self, entry_id: str, fields: Fields, kind: str, message: str) -> None:
        stream = self.names.callbacks
        await dead_letter(
            self.redis,
            self.names,
            fields=fields,
            reason=f"{kind}: {message}",
            source_stream=stream,
            source_id=entry_id,
        )
        self.metrics.dead_lettered.labels(stream=stream, reason=kind).inc()


def register(
    broker: RedisBroker,
    consumer: CallbackConsumer,
    *,
    consumer_name: str,
    batch_size: int,
    reclaim_idle_ms: int,
    consumers: int = 1,
) -> list[Any]:
    """`consumers` batch subscribers for new entries (each its own consumer of the group, so
    that many batches are in flight) and a reclaimer for a dead consumer's (NOTES 2)."""
    return stream_subscribers(
        broker,
        consumer.names.callbacks,
        group=Group.INGRESS,
        consumer=consumer_name,
        size=batch_size,
        idle_ms=reclaim_idle_ms,
        ack_policy=AckPolicy.REJECT_ON_ERROR,
        consume=consumer.consume_stream,
        over_cap=consumer.over_cap,
        batches=consumers,
    )
