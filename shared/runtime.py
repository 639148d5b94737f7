"""What every service process shares at its composition root: the clock, id minting, logging,
and the health and metrics routes served beside its subscribers."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import structlog
from faststream.asgi import AsgiResponse, get
from faststream.asgi.types import ASGIApp
from faststream.redis import RedisBroker, RedisClusterBroker
from prometheus_client import CollectorRegistry, Histogram, make_asgi_app
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from ulid import ULID

from shared.consumer import subscribers_running
from shared.settings import CommonSettings
from shared.store.client import (
    CLUSTER_UNAVAILABLE,
    AnyRedis,
    HiredisPackingConnection,
    connect,
    use_packing_connections,
)

_log = structlog.get_logger("longrun.runtime")


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_id(prefix: str) -> str:
    """`prefix` + a 26-character ULID: sortable by creation time, unique across processes."""
    return prefix + str(ULID())


def configure_logging(level: str) -> None:
    """JSON lines on stderr; per-message logging stays out of the hot path (consumer rule 9)."""
    logging.basicConfig(stream=sys.stderr, level=level.upper(), format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


GC_THRESHOLDS = (50_000, 20, 100)
"""Young-generation collections every 50,000 net allocations instead of 700. The services
allocate many short-lived pydantic objects per message; with CPython's defaults the cyclic
collector took a large share of the ledger's CPU (measured; see docs/benchmarks.md), and every full
collection walks the ledger's slice cache. Refcounting still frees acyclic garbage at once."""


def tune_gc(pauses: Histogram | None = None) -> None:
    """Call once the service is built, before it serves: what was allocated at start-up (modules,
    settings, the app) moves to the permanent generation and is never scanned again. With
    `pauses`, every later collection is timed into it (see `watch_gc`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    if pauses is not None:
        watch_gc(pauses)


_GcCallback = Callable[[str, dict[str, Any]], None]
_gc_watch: list[_GcCallback] = []
"""The process's one timing callback (a service tunes once; a test may build several apps)."""


def watch_gc(pauses: Histogram) -> None:
    """Observe how long each collection holds the process, labelled by generation: a collection
    stops the event loop, and objects left in reference cycles make the young ones long (a
    cycle in the ledger's rounds once made them 50-100 ms, which was its tool-call p99).
    Replaces the callback an earlier call installed."""
    started = 0.0

    def timed(phase: str, info: dict[str, Any]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
            return
        pauses.labels(generation=str(info["generation"])).observe(time.perf_counter() - started)

    for old in _gc_watch:
        if old in gc.callbacks:
            gc.callbacks.remove(old)
    _gc_watch[:] = [timed]
    gc.callbacks.append(timed)


def broker_logger() -> logging.Logger:
    """The logger brokers get: faststream logs every consumed message and its task lifecycle
    at INFO on its own loggers (consumer rule 9); longrun keeps that at WARNING and logs
    decisions."""
    logger = logging.getLogger("longrun.broker")
    logger.setLevel(logging.WARNING)
    return logger


_NOT_YET: tuple[type[Exception], ...] = (
    BusyLoadingError,
    RedisConnectionError,
    OSError,
    *CLUSTER_UNAVAILABLE,
)

REDIS_START_WAIT_S = 120.0
"""How long a starting service waits for Redis to answer: longer than Redis takes to replay a
large AOF after a restart (seconds per GB)."""


async def until_redis_answers(redis: AnyRedis, *, within: float = REDIS_START_WAIT_S) -> None:
    """Wait while Redis refuses connections (not up yet) or answers LOADING (replaying its AOF
    after a restart). A service restarted in that window used to fail its start-up and exit; a
    supervisor would restart it, but `longrun up` stops the whole stack when a child exits."""
    deadline = time.monotonic() + within
    while True:
        try:
            await redis.ping()
            return
        except _NOT_YET as exc:
            if time.monotonic() >= deadline:
                raise
            _log.info("waiting_for_redis", error=str(exc))
            await asyncio.sleep(0.2)


def redis_client(settings: CommonSettings) -> AnyRedis:
    """The service's own Redis client: one server, or a Redis Cluster (`redis_cluster`)."""
    return connect(settings.redis_url, cluster=settings.redis_cluster)


def make_broker(settings: CommonSettings) -> RedisBroker:
    """The service's broker, for the same Redis as `redis_client`, its connections packing
    commands with hiredis like longrun's own client. The cluster broker reads each stream from
    the node owning its slot; subscribers keep the same settings (their streams are single
    keys, so nothing about them changes on a cluster). Connect it with `connect_broker`."""
    if settings.redis_cluster:
        return RedisClusterBroker(
            settings.redis_url, logger=broker_logger(), log_level=logging.DEBUG
        )
    return RedisBroker(
        settings.redis_url,
        connection_class=HiredisPackingConnection,
        logger=broker_logger(),
        log_level=logging.DEBUG,
    )


async def connect_broker(broker: RedisBroker) -> None:
    """Connect the broker before it starts (a start-up hook, or before `broker.start()`).

    On a cluster its nodes' connections become HiredisPackingConnection too, for their handling
    of a socket closed under a command in flight while a node restarts (a ConnectionError that
    redis-py's cluster client retries, not an AttributeError): faststream's cluster broker takes
    no connection class, so it is set on the client `connect()` returns, before its first
    command."""
    client = await broker.connect()
    if isinstance(client, RedisCluster):
        use_packing_connections(client)


def health_routes(
    subscribers: Callable[[], Iterable[Any]],
    redis: AnyRedis,
    registry: CollectorRegistry,
    notes: Callable[[], Iterable[str]] = tuple,
) -> list[tuple[str, ASGIApp]]:
    """/healthz fails when a subscriber stopped; /readyz also needs Redis, and adds `notes`
    (lines about optional parts, such as the executor's sandbox) to its answer; /metrics."""

    @get(include_in_schema=False)
    async def healthz(scope: Any) -> AsgiResponse:
        ok = subscribers_running(subscribers())
        return AsgiResponse(b"ok" if ok else b"a subscriber has stopped", 200 if ok else 503)

    @get(include_in_schema=False)
    async def readyz(scope: Any) -> AsgiResponse:
        if not subscribers_running(subscribers()):
            return AsgiResponse(b"a subscriber has stopped", 503)
        try:
            await redis.ping()
        except Exception as exc:  # any failure to reach Redis means not ready
            return AsgiResponse(f"redis unreachable: {exc}".encode(), 503)
        return AsgiResponse("\n".join(["ready", *notes()]).encode(), 200)

    return [("/healthz", healthz), ("/readyz", readyz), ("/metrics", make_asgi_app(registry))]
