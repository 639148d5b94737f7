"""The callbacks stream in, the callback use case, the dead-letter stream out: one batch
subscriber and one reclaimer on `<prefix>:callbacks`, group `ingress`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import structlog
from faststream.redis import RedisBroker
from pydantic import ValidationError
from redis.exceptions import RedisError

from services.ingress.errors import RATE_LIMITED
from services.ingress.schemas import DEFAULT_CONTENT_TYPE, CallbackEntry
from services.ingress.service import CallbackIntake, CallbackRefused, Delivery
from shared.consumer import Delivered, Fields, Rejected, StreamConsumer, field
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.wire.commands import CallbackSource
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.ingress")


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", errors="replace")


def parse_entry(fields: Fields) -> Delivery:
    """A stream entry as a delivery; a missing or malformed field refuses it, naming the field."""
    content_type = _text(field(fields, "content_type"))
    try:
        # Validated from a dict: a missing field (None) becomes pydantic's error naming it.
        entry = CallbackEntry.model_validate(
            {
                "token": _text(field(fields, "token")),
                "delivery_id": _text(field(fields, "delivery_id")),
                "body": field(fields, "body") or b"",
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
    """Accepts a batch of entries as callbacks, under the shared consumer policy: refused ones
    are dead-lettered with the refusal, a ledger that does not answer leaves the batch pending
    for the reclaimer (the same delivery maps to the same command, so a replay is a duplicate,
    never a second trigger)."""

    def __init__(
        self, intake: CallbackIntake, redis: AnyRedis, names: Names, metrics: Metrics
    ) -> None:
        self.intake = intake
        self.redis = redis
        self.names = names
        self.metrics = metrics
        self.stream = StreamConsumer(
            redis, names, metrics, group=Group.INGRESS, decode=self.admitted, handle=self.accept
        )

    def admitted(self, fields: Fields) -> Delivery:
        """The entry as a delivery, refused when malformed or over its capability's rate limit
        (the same bucket as HTTP). The stream has nobody to answer 429 to, and holding the entry
        back would stall the whole group behind one noisy producer, so it goes where a producer
        or operator can see the reason and replay it later."""
        try:
            delivery = parse_entry(fields)
        except CallbackRefused as refused:
            self.metrics.callbacks.labels(outcome="rejected").inc()
            raise Rejected(refused.kind, refused.message) from None
        wait = self.intake.admit(delivery.token)
        if wait > 0:
            message = f"over this capability's callback rate limit; replay after {wait:.1f} s"
            raise Rejected(RATE_LIMITED, message)
        return delivery

    async def accept(self, batch: Sequence[Delivered[Delivery]]) -> list[BaseException | None]:
        """Every delivery of the batch at once; each one's refusal or failure is its outcome."""
        outcomes = await asyncio.gather(
            *(self.intake.accept(d.value) for d in batch), return_exceptions=True
        )
        return [_outcome(o) for o in outcomes]

    async def sample_pending(self) -> None:
        """Set longrun_stream_pending for the callbacks group (scaling and alerting read it)."""
        try:
            info = await self.redis.xpending(self.names.callbacks, Group.INGRESS)
        except (RedisError, OSError):
            return  # no group yet, or Redis away: /readyz reports the latter
        gauge = self.metrics.stream_pending.labels(stream=self.names.callbacks, group=Group.INGRESS)
        gauge.set(int(info["pending"]))


def _outcome(outcome: object) -> BaseException | None:
    if isinstance(outcome, CallbackRefused):
        return Rejected(outcome.kind, outcome.message)
    return outcome if isinstance(outcome, BaseException) else None


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
    that many batches are in flight) and a reclaimer for a dead consumer's."""
    return consumer.stream.subscribe(
        broker,
        consumer.names.callbacks,
        consumer=consumer_name,
        size=batch_size,
        idle_ms=reclaim_idle_ms,
        batches=consumers,
    )
