"""The one consumer policy every service reads its streams with: entries decoded into typed
values, failures sorted into transient (the entry stays pending for the reclaimer) and final
(acked and moved to the dead-letter stream with the reason), the delivery cap the reclaimer
enforces, and the health of the subscribers.

A service says only what its use case is: how one entry decodes (`decode`, raising `CodecError`
or `Rejected`) and what a batch of decoded entries does (`handle`). Everything else about
delivery is decided here, the same way for every service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.ledger_client import LedgerTimeout
from shared.metrics import Metrics
from shared.store.client import CLUSTER_UNAVAILABLE, AnyRedis
from shared.streams import stream_subscribers
from shared.wire.codec import CodecError
from shared.wire.names import Names

log = structlog.get_logger("longrun.consumer")

T = TypeVar("T")
Fields = Mapping[Any, Any]
"""An entry's fields: bytes keys and values as subscribers read them, text when a caller in this
process built the entry."""

DEAD_LETTER_MAXLEN = 100_000
DELIVERY_CAP = 5
"""Deliveries after which an entry is poison: it goes to the dead-letter stream, with why."""


class Transient(Exception):
    """A failure that says nothing about the entry (a dependency busy or away): the entry stays
    pending and the reclaimer delivers it again."""


class Rejected(Exception):
    """An entry that can never be handled (bad input, a refusal by the domain): final. It is
    acknowledged and dead-lettered with `kind: message` as its reason (`kind` labels the
    metric), so a producer or operator can see why and replay it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    *CLUSTER_UNAVAILABLE,
    LedgerTimeout,
    Transient,
)
"""Every failure that leaves an entry pending, in every service: Redis or a cluster node away,
the ledger not answering in time, a use case saying it is busy. Any other Redis error is an
answer about the command itself (a script's error, a wrong type), which a retry would get again:
the entry is handled alone and, failing again, dead-lettered."""


def field(fields: Fields, name: str) -> bytes | None:
    """A field's value as bytes, or None when the entry has no such field."""
    value = fields.get(name.encode(), fields.get(name))
    if value is None:
        return None
    return value if isinstance(value, bytes) else str(value).encode()


def required(fields: Fields, name: str) -> bytes:
    """A field every longrun message carries (its envelope, `m`); missing, the entry is poison."""
    value = field(fields, name)
    if value is None:
        raise CodecError(f"entry has no {name!r} field (longrun messages carry one envelope)")
    return value


@dataclass(frozen=True, slots=True)
class Delivered(Generic[T]):
    """One decoded entry, with where it came from and the consumer it was delivered to."""

    stream: str
    entry_id: str
    fields: Fields
    value: T
    consumer: str


Outcomes = Sequence[BaseException | None] | None
"""What `handle` returns: None when every entry was handled, else one outcome per entry (None,
or the exception that entry failed with: `Rejected`, a transient error, anything else)."""
Handle = Callable[[Sequence[Delivered[T]]], Awaitable[Outcomes]]


class StreamConsumer(Generic[T]):
    """One consumer group's policy over its streams.

    `handle` gets every decodable entry of a batch; an entry that does not decode is
    dead-lettered first. If the whole batch fails with a transient error, it stays pending; with
    any other error each entry is handled again alone (`handle_alone`, default `handle`), so the
    one that breaks the batch is dead-lettered and the others still take effect now.
    `acks` is the subscribers' AckPolicy: REJECT_ON_ERROR acks a batch once `consume` returns;
    MANUAL leaves it to the use case (in the round trip of its effects). Dead-lettered entries
    are acked here in both cases.
    """

    def __init__(
        self,
        redis: AnyRedis,
        names: Names,
        metrics: Metrics,
        *,
        group: str,
        decode: Callable[[Fields], T],
        handle: Handle[T],
        handle_alone: Handle[T] | None = None,
        acks: AckPolicy = AckPolicy.REJECT_ON_ERROR,
    ) -> None:
        self.redis = redis
        self.names = names
        self.metrics = metrics
        self.group = group
        self.decode = decode
        self.handle = handle
        self.handle_alone = handle_alone or handle
        self.acks = acks

    async def consume(
        self, stream: str, ids: Sequence[str], entries: Sequence[Fields], *, consumer: str = ""
    ) -> None:
        """Handle a batch delivered to `consumer`; raises a transient error to leave it pending."""
        batch = await self._decoded(stream, ids, entries, consumer)
        if not batch:
            return
        try:
            outcomes = await self.handle(batch)
        except TRANSIENT:
            raise
        except Exception:
            log.exception("batch_failed_handling_alone", stream=stream, size=len(batch))
            outcomes = [await self._alone(one) for one in batch]
        await self._settle(batch, outcomes)

    async def reclaimed(
        self, stream: str, entry_id: str, fields: Fields, deliveries: int, *, consumer: str
    ) -> None:
        """An entry claimed from a consumer that left it pending: past DELIVERY_CAP deliveries it
        is poison (each delivery died with its consumer, or failed), else it is consumed."""
        if deliveries > DELIVERY_CAP:
            cap = Rejected("delivery_cap", f"{deliveries} deliveries")
            await self.dead_letter(stream, entry_id, fields, cap)
            return
        log.info("entry_reclaimed", stream=stream, entry_id=entry_id, deliveries=deliveries)
        await self.consume(stream, [entry_id], [fields], consumer=consumer)

    async def dead_letter(self, stream: str, entry_id: str, fields: Fields, why: Rejected) -> None:
        """Move an entry aside with its original fields, the reason and where it came from (the
        stream, the entry, and the consumer group: several groups can read one stream, and each
        sets its own copy aside), and acknowledge it: it is never delivered again."""
        entry = {_text(k): _text(v) for k, v in fields.items()}
        entry.update(
            reason=str(why)[:2000],
            source_stream=stream,
            source_id=entry_id,
            source_group=self.group,
        )
        await self.redis.xadd(
            self.names.dead_letter,
            entry,  # type: ignore[arg-type]
            maxlen=DEAD_LETTER_MAXLEN,
            approximate=True,
        )
        await self.redis.xack(stream, self.group, entry_id)
        self.metrics.dead_lettered.labels(stream=stream, reason=why.kind).inc()
        log.warning(
            "dead_lettered",
            source_stream=stream,
            source_id=entry_id,
            source_group=self.group,
            reason=str(why),
        )

    def subscribe(
        self,
        broker: RedisBroker,
        stream: str,
        *,
        consumer: str,
        size: int,
        idle_ms: int,
        batches: int = 1,
    ) -> list[Any]:
        """`batches` batch subscribers for new entries (consumers `consumer`, `consumer-2`, ...)
        and one reclaimer (`consumer-reclaim`) for entries idle longer than `idle_ms`."""
        return stream_subscribers(
            broker,
            stream,
            group=self.group,
            consumer=consumer,
            size=size,
            idle_ms=idle_ms,
            ack_policy=self.acks,
            consume=self.consume,
            reclaimed=self.reclaimed,
            batches=batches,
        )

    async def _decoded(
        self, stream: str, ids: Sequence[str], entries: Sequence[Fields], consumer: str
    ) -> list[Delivered[T]]:
        batch: list[Delivered[T]] = []
        for entry_id, fields in zip(ids, entries, strict=True):
            try:
                value = self.decode(fields)
            except CodecError as err:
                await self.dead_letter(stream, entry_id, fields, Rejected("undecodable", str(err)))
            except Rejected as rejected:
                await self.dead_letter(stream, entry_id, fields, rejected)
            else:
                batch.append(Delivered(stream, entry_id, fields, value, consumer))
        return batch

    async def _alone(self, one: Delivered[T]) -> BaseException | None:
        try:
            outcomes = await self.handle_alone([one])
        except TRANSIENT:
            raise
        except Exception as exc:
            return exc
        return outcomes[0] if outcomes else None

    async def _settle(self, batch: Sequence[Delivered[T]], outcomes: Outcomes) -> None:
        """Dead-letter what failed for good; then, if any entry failed transiently, raise so the
        batch stays pending (redelivery is safe: every effect is idempotent)."""
        transient: BaseException | None = None
        for one, outcome in zip(batch, outcomes or [None] * len(batch), strict=True):
            if outcome is None:
                continue
            if isinstance(outcome, TRANSIENT):
                transient = outcome
                continue
            why = outcome if isinstance(outcome, Rejected) else Rejected("failed", repr(outcome))
            await self.dead_letter(one.stream, one.entry_id, one.fields, why)
        if transient is not None:
            raise transient


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def subscribers_running(subscribers: Iterable[Any]) -> bool:
    """A subscriber that stopped (its stream or group deleted, a crash) makes the service
    unhealthy: faststream's own ping still answers while a subscriber is dead."""
    subs = list(subscribers)
    return bool(subs) and all(getattr(s, "running", False) for s in subs)
