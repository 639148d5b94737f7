"""The callbacks stream in, the callback use case, the dead-letter stream out: one batch
subscriber and one reclaimer on `<prefix>:callbacks`, group `ingress`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisStreamMessage
from pydantic import ValidationError
from redis.exceptions import RedisError

from services.ingress.errors import RATE_LIMITED
from services.ingress.schemas import DEFAULT_CONTENT_TYPE, CallbackEntry
from services.ingress.service import CallbackIntake, CallbackRefused, Delivery
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.streams import (
    DELIVERY_CAP,
    dead_letter,
    lean_batch,
    lean_entry,
    raw_batch,
    raw_fields,
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
    names = [consumer_name] + [f"{consumer_name}-{k}" for k in range(2, consumers + 1)]
    return [
        *(_batch_subscriber(broker, consumer, name, batch_size) for name in names),
        _reclaimer(broker, consumer, f"{consumer_name}-reclaim", reclaim_idle_ms),
    ]


def _batch_subscriber(broker: RedisBroker, consumer: CallbackConsumer, name: str, size: int) -> Any:
    sub = broker.subscriber(
        stream=StreamSub(
            consumer.names.callbacks,
            group=Group.INGRESS,
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
        # The raw entries, keys and values as bytes: each is parsed once, by `consume`.
        ids = [i.decode() for i in raw["message_ids"]]
        await consumer.consume(ids, raw["data"])

    return sub


def _reclaimer(broker: RedisBroker, consumer: CallbackConsumer, name: str, idle_ms: int) -> Any:
    sub = broker.subscriber(
        stream=StreamSub(
            consumer.names.callbacks,
            group=Group.INGRESS,
            consumer=name,
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
            await consumer.poison(entry_id, fields, "delivery_cap", f"{deliveries} deliveries")
            return
        await consumer.consume([entry_id], [fields])

    return sub
