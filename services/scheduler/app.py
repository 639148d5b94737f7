"""Composition root of the scheduler: settings, Redis, broker, metrics, clock, subscribers,
background loops (timer poller, watchdog, pending sampler) and routes.

Nothing connects at import time; `build()` wires objects and `main()` serves them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import uvicorn
from faststream.asgi import AsgiFastStream
from prometheus_client import CollectorRegistry, Histogram
from pydantic import Field

from services.scheduler.archiver import ArchiveLimits, Archiver
from services.scheduler.command_checks import CommandAsker
from services.scheduler.handlers import (
    CommandCheckConsumer,
    SchedulerConsumer,
    WebhookConsumer,
    register,
    register_command_checks,
    register_webhooks,
)
from services.scheduler.service import SchedulerService, Timing
from services.scheduler.timers import Periodic, TimerPoller
from services.scheduler.watchdog import PendingSampler, Watchdog
from services.scheduler.webhooks import WebhookRunner
from shared.ledger_client import LedgerClient
from shared.metrics import build_metrics
from shared.runtime import (
    broker_logger,
    configure_logging,
    connect_broker,
    health_routes,
    make_broker,
    new_id,
    redis_client,
    tune_gc,
    until_redis_answers,
    utc_now,
)
from shared.settings import CommonSettings
from shared.store.client import AnyRedis
from shared.store.functions import load_functions
from shared.streams import consumer_name, ensure_groups
from shared.wire.names import Group


class SchedulerSettings(CommonSettings):
    scheduler_port: int = Field(default=9102, ge=0, le=65535)
    """Port of /healthz, /readyz and /metrics (0: pick a free one)."""
    scheduler_batch_size: int = Field(default=100, ge=1, le=1000)
    reclaim_idle_ms: int = Field(default=30_000, ge=100)
    """Idle time before a pending entry is reclaimed: above the slowest batch (consumer rule 2)."""
    timer_poll_ms: int = Field(default=100, ge=5)
    """How often due timers are moved to the fired streams: the timers' resolution."""
    watchdog_interval_ms: int = Field(default=1000, ge=10)
    watchdog_batch: int = Field(default=100, ge=1, le=10_000)
    """Agents one watchdog step reads (of one partition)."""
    watchdog_grace_ms: int = Field(default=10_000, ge=0)
    """How long an agent's ledger must be quiet before missing work counts as orphaned:
    longer than an event normally takes to become a tick, so in-flight events are not repaired."""
    tick_ttl_ms: int = Field(default=300_000, ge=1000)
    """Lifetime of the outstanding-tick marker: bounds how long a lost tick holds an agent."""
    nudge_ms: int = Field(default=200, ge=1)
    """Delay of the re-decision after a turn ended while its lease was still held."""
    pending_sample_ms: int = Field(default=5000, ge=100)
    webhook_concurrency: int = Field(default=256, ge=1, le=10_000)
    """Webhook checks called at once by one scheduler process (and the event entries whose
    checks are in flight: reading the stream waits beyond that)."""
    webhook_sweep_ms: int = Field(default=30_000, ge=100)
    """How often verifying items are scanned for webhook checks without a verdict (also once
    at start, which is how checks resume after a crash)."""
    hot_events: int = Field(default=5000, ge=2)
    """LONGRUN_HOT_EVENTS: past this many hot history events, the archiver cuts a segment of
    all but the newest fifth."""
    hot_finished: int = Field(default=200, ge=0)
    """LONGRUN_HOT_FINISHED: past this many finished WorkItems in Redis, the archiver moves the
    oldest to the archive (down to four fifths of it)."""
    hot_days: float = Field(default=7.0, ge=0)
    """LONGRUN_HOT_DAYS: finished WorkItems older than this many days move to the archive."""
    archive_interval_s: float = Field(default=5.0, gt=0)
    """LONGRUN_ARCHIVE_INTERVAL_S: how often the archiver runs."""

    def archive_limits(self) -> ArchiveLimits:
        return ArchiveLimits(
            hot_events=self.hot_events, hot_finished=self.hot_finished, hot_days=self.hot_days
        )

    def timing(self) -> Timing:
        return Timing(
            tick_ttl_ms=self.tick_ttl_ms,
            nudge_ms=self.nudge_ms,
            watchdog_grace=timedelta(milliseconds=self.watchdog_grace_ms),
        )


@dataclass
class SchedulerApp:
    app: AsgiFastStream
    service: SchedulerService
    subscribers: list[Any]
    loops: list[Periodic]
    settings: SchedulerSettings


def _loops(
    settings: SchedulerSettings,
    service: SchedulerService,
    webhooks: WebhookRunner,
    archiver: Archiver,
    asker: CommandAsker,
) -> list[Periodic]:
    redis, names, metrics = service.redis, service.names, service.metrics
    poller = TimerPoller(redis, names, utc_now)
    watchdog = Watchdog(service, settings.watchdog_batch)
    sampler = PendingSampler(redis, names, metrics)
    return [
        Periodic("timers", settings.timer_poll_ms / 1000, poller.step),
        Periodic("watchdog", settings.watchdog_interval_ms / 1000, watchdog.step),
        Periodic("pending", settings.pending_sample_ms / 1000, sampler.step),
        Periodic("webhooks", settings.webhook_sweep_ms / 1000, webhooks.sweep),
        Periodic("command-checks", settings.webhook_sweep_ms / 1000, asker.sweep),
        Periodic("archive", settings.archive_interval_s, archiver.step),
    ]


Hook = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Lifecycle:
    on_startup: list[Hook]
    after_startup: list[Hook]
    on_shutdown: list[Hook]
    after_shutdown: list[Hook]


def _lifecycle(
    redis: AnyRedis, settings: SchedulerSettings, loops: list[Periodic], pauses: Histogram
) -> Lifecycle:
    """Groups at `0` before faststream reads (consumer rule 4); loops only while the broker runs."""
    names, partitions = settings.names(), range(settings.partitions)

    async def prepare() -> None:
        await until_redis_answers(redis)
        await load_functions(redis)
        await ensure_groups(redis, (names.events(p) for p in partitions), Group.SCHEDULER)
        await ensure_groups(redis, (names.timers_fired(p) for p in partitions), Group.SCHEDULER)
        await ensure_groups(redis, (names.events(p) for p in partitions), Group.WEBHOOKS)
        await ensure_groups(redis, (names.events(p) for p in partitions), Group.COMMAND_CHECKS)

    async def start_loops() -> None:
        # Once the subscribers run, so their set-up is frozen too: a full collection walked
        # the start-up heap for 60-110 ms, every 2-3 s at 1,000 events/s.
        tune_gc(pauses)
        for loop in loops:
            loop.start()

    async def stop_loops() -> None:
        for loop in loops:
            await loop.stop()

    async def close() -> None:
        await redis.aclose()

    return Lifecycle([prepare], [start_loops], [stop_loops], [close])


def build(settings: SchedulerSettings) -> SchedulerApp:
    names = settings.names()
    redis = redis_client(settings)
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    broker = make_broker(settings)
    ledger = LedgerClient(redis, names, clock=utc_now, new_id=new_id)
    service = SchedulerService(
        redis, names, metrics, ledger, clock=utc_now, new_id=new_id, timing=settings.timing()
    )
    partitions = range(settings.partitions)
    archiver = Archiver(
        redis,
        names,
        ledger,
        settings.archive_root(),
        metrics,
        limits=settings.archive_limits(),
        clock=utc_now,
    )
    subscribers = register(
        broker,
        SchedulerConsumer(service, redis, names, archiver.note),
        partitions=partitions,
        consumer_name=consumer_name("scheduler"),
        batch_size=settings.scheduler_batch_size,
        reclaim_idle_ms=settings.reclaim_idle_ms,
    )
    secret = settings.webhook_secret
    webhooks = WebhookRunner(
        redis,
        names,
        ledger,
        secret=secret.get_secret_value() if secret else None,
        concurrency=settings.webhook_concurrency,
        allow=settings.webhook_allowlist(),
    )
    subscribers += register_webhooks(
        broker,
        WebhookConsumer(webhooks, redis, names, metrics),
        partitions=partitions,
        consumer_name=consumer_name("scheduler-webhooks"),
        reclaim_idle_ms=settings.reclaim_idle_ms,
    )
    asker = CommandAsker(redis, names)
    subscribers += register_command_checks(
        broker,
        CommandCheckConsumer(asker, redis, names, metrics),
        partitions=partitions,
        consumer_name=consumer_name("scheduler-command-checks"),
        reclaim_idle_ms=settings.reclaim_idle_ms,
    )
    loops = _loops(settings, service, webhooks, archiver, asker)
    hooks = _lifecycle(redis, settings, loops, metrics.gc_pauses)
    app = AsgiFastStream(
        broker,
        logger=broker_logger(),
        asgi_routes=health_routes(lambda: [*subscribers, *loops], redis, registry),
        on_startup=[*hooks.on_startup, partial(connect_broker, broker)],
        after_startup=hooks.after_startup,
        on_shutdown=hooks.on_shutdown,
        after_shutdown=[webhooks.close, *hooks.after_shutdown],
    )
    return SchedulerApp(
        app=app, service=service, subscribers=subscribers, loops=loops, settings=settings
    )


def main() -> None:
    settings = SchedulerSettings()
    configure_logging(settings.log_level)
    built = build(settings)
    uvicorn.run(
        built.app, host=settings.http_host, port=settings.scheduler_port, log_level="warning"
    )
