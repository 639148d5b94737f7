"""Stream in, use case, stream out: per partition, a batch subscriber and a reclaimer on the
event stream and on the fired-timers stream (group `scheduler`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import structlog
from faststream.redis import RedisBroker

from services.scheduler.policy import EventFacts, TimerRef, event_facts
from services.scheduler.service import SchedulerService
from shared.coalesce import Coalescer
from shared.consumer import Delivered, StreamConsumer, required
from shared.store.client import AnyRedis
from shared.wire.codec import CodecError
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.scheduler")

ROUND_LIMIT = 200
"""Entries one coalesced round decides at most: two full batches, about 30 ms of decisions."""
ROUNDS_AT_ONCE = 4
"""Coalesced rounds in flight at once: one decides while others wait for Redis; batches that
arrive with all four running share the next one. With one, the process would sit idle during
each round's Redis waits; with one per partition (16), nothing would coalesce."""


def decode_events(fields: Mapping[Any, Any]) -> EventFacts:
    try:
        doc = orjson.loads(required(fields, "m"))
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CodecError("envelope must be a JSON object")
    return event_facts(doc)


def decode_timer(fields: Mapping[Any, Any]) -> TimerRef:
    return TimerRef.parse(required(fields, "m"))


class SchedulerConsumer:
    """Hands decoded events and fired timers to the service, under the shared consumer policy."""

    def __init__(self, service: SchedulerService, redis: AnyRedis, names: Names) -> None:
        self.service = service
        self.names = names
        # Partitions' batches that arrive while one is decided share the next round's reads and
        # writes: at 1,000 events/s over 16 partitions most batches hold one entry.
        self.rounds = Coalescer(service.on_events, limit=ROUND_LIMIT, rounds=ROUNDS_AT_ONCE)
        self.events = StreamConsumer(
            redis,
            names,
            service.metrics,
            group=Group.SCHEDULER,
            decode=decode_events,
            handle=self.decide,
            # Alone means alone: a coalesced round could fail again for another batch's entry.
            handle_alone=self.decide_alone,
        )
        self.fired = StreamConsumer(
            redis,
            names,
            service.metrics,
            group=Group.SCHEDULER,
            decode=decode_timer,
            handle=self.fire,
        )

    async def decide(self, batch: Sequence[Delivered[EventFacts]]) -> None:
        await self.rounds.submit([d.value for d in batch])

    async def decide_alone(self, batch: Sequence[Delivered[EventFacts]]) -> None:
        await self.service.on_events([d.value for d in batch])

    async def fire(self, batch: Sequence[Delivered[TimerRef]]) -> None:
        await self.service.on_fired([d.value for d in batch])


def register(
    broker: RedisBroker,
    consumer: SchedulerConsumer,
    *,
    partitions: Sequence[int],
    consumer_name: str,
    batch_size: int,
    reclaim_idle_ms: int,
) -> list[Any]:
    """Per partition and stream: a batch subscriber and a reclaimer."""
    subscribers = []
    names = consumer.names
    for p in partitions:
        for stream, policy in (
            (names.events(p), consumer.events),
            (names.timers_fired(p), consumer.fired),
        ):
            subscribers += policy.subscribe(
                broker, stream, consumer=consumer_name, size=batch_size, idle_ms=reclaim_idle_ms
            )
    return subscribers
