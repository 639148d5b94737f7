"""What every service process shares at its composition root: the clock, id minting, logging,
and the health and metrics routes served beside its subscribers."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import structlog
from faststream.asgi import AsgiResponse, get
from faststream.asgi.types import ASGIApp
from prometheus_client import CollectorRegistry, make_asgi_app
from ulid import ULID

from shared.store.client import AnyRedis
from shared.streams import subscribers_running


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_id(prefix: str) -> str:
    """`prefix` + a 26-character ULID: sortable by creation time, unique across processes."""
    return prefix + str(ULID())


def configure_logging(level: str) -> None:
    """JSON lines on stderr; per-message logging stays out of the hot path (NOTES 15)."""
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


def broker_logger() -> logging.Logger:
    """The logger brokers get: faststream logs every consumed message and its task lifecycle
    at INFO on its own loggers (NOTES 15); longrun keeps that at WARNING and logs decisions."""
    logger = logging.getLogger("longrun.broker")
    logger.setLevel(logging.WARNING)
    return logger


def health_routes(
    subscribers: Callable[[], Iterable[Any]], redis: AnyRedis, registry: CollectorRegistry
) -> list[tuple[str, ASGIApp]]:
    """/healthz fails when a subscriber stopped; /readyz also needs Redis; /metrics."""

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
        return AsgiResponse(b"ready", 200)

    return [("/healthz", healthz), ("/readyz", readyz), ("/metrics", make_asgi_app(registry))]
