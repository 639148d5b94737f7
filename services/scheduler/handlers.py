"""Stream in, use case, stream out: per partition, a batch subscriber and a reclaimer on the
event stream and on the fired-timers stream (group `scheduler`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson
import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker

from services.scheduler.command_checks import CommandAsker, decode_command_checks
from services.scheduler.policy import EventFacts, TimerRef, event_facts
from services.scheduler.service import SchedulerService
from services.scheduler.webhooks import WebhookRunner, decode_verifying
from shared.coalesce import Coalescer
from shared.consumer import Delivered, StreamConsumer, required
from shared.domain.acceptance import MAX_WEBHOOK_TIMEOUT_S
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

    def __init__(
        self,
        service: SchedulerService,
        redis: AnyRedis,
        names: Names,
        note: Callable[[Iterable[str]], None] = lambda _agents: None,
    ) -> None:
        self.service = service
        self.names = names
        self.note = note
        """Told which agents' histories grew (the archiver's `note`)."""
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
        self.note(d.value.agent_id for d in batch)
        await self.rounds.submit([d.value for d in batch])

    async def decide_alone(self, batch: Sequence[Delivered[EventFacts]]) -> None:
        await self.service.on_events([d.value for d in batch])

    async def fire(self, batch: Sequence[Delivered[TimerRef]]) -> None:
        await self.service.on_fired([d.value for d in batch])


class WebhookConsumer:
    """Hands the webhook checks `work_item_verifying` events start to the runner (group
    `webhooks`): an entry is acked once its verdicts are sent, so a crash leaves it pending."""

    def __init__(self, runner: WebhookRunner, redis: AnyRedis, names: Names, metrics: Any) -> None:
        self.runner = runner
        self.names = names
        self.events = StreamConsumer(
            redis,
            names,
            metrics,
            group=Group.WEBHOOKS,
            decode=decode_verifying,
            handle=runner.handle,
            # The runner acks each entry once its verdicts are sent, after `handle` returned.
            acks=AckPolicy.MANUAL,
        )


class CommandCheckConsumer:
    """Hands the command checks `work_item_verifying` events start to the asker (group
    `command-checks`); asking is one SET and one XADD, so entries are acked with their batch."""

    def __init__(self, asker: CommandAsker, redis: AnyRedis, names: Names, metrics: Any) -> None:
        self.names = names
        self.events = StreamConsumer(
            redis,
            names,
            metrics,
            group=Group.COMMAND_CHECKS,
            decode=decode_command_checks,
            handle=asker.handle,
        )


def register_command_checks(
    broker: RedisBroker,
    consumer: CommandCheckConsumer,
    *,
    partitions: Sequence[int],
    consumer_name: str,
    reclaim_idle_ms: int,
) -> list[Any]:
    """Per partition: a batch subscriber and a reclaimer on the event stream."""
    subscribers = []
    for p in partitions:
        subscribers += consumer.events.subscribe(
            broker,
            consumer.names.events(p),
            consumer=consumer_name,
            size=WEBHOOK_BATCH,
            idle_ms=reclaim_idle_ms,
        )
    return subscribers


WEBHOOK_BATCH = 100


def register_webhooks(
    broker: RedisBroker,
    consumer: WebhookConsumer,
    *,
    partitions: Sequence[int],
    consumer_name: str,
    reclaim_idle_ms: int,
) -> list[Any]:
    """Per partition: a batch subscriber and a reclaimer on the event stream. The reclaim idle
    time is at least the longest webhook timeout, so a call in progress is not taken over."""
    idle = max(reclaim_idle_ms, int(MAX_WEBHOOK_TIMEOUT_S * 1000) + 10_000)
    subscribers = []
    for p in partitions:
        subscribers += consumer.events.subscribe(
            broker,
            consumer.names.events(p),
            consumer=consumer_name,
            size=WEBHOOK_BATCH,
            idle_ms=idle,
        )
    return subscribers


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
