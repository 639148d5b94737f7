"""Composition root of ingress: settings, Redis, ledger client, read model, tool gateway,
callbacks consumer, rate limiters, metrics and the FastAPI app whose lifespan runs the broker.

faststream's FastAPI integration is deprecated (consumer rule 11 in docs/architecture.md), so the
broker is started
and stopped in the app's lifespan. Nothing connects at import time; `build()` wires objects and
`main()` serves them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CollectorRegistry

from services.ingress import (
    mcp_http,
    routes_agents,
    routes_callbacks,
    routes_control,
    routes_delegations,
    routes_gate,
    routes_ops,
    routes_presets,
    routes_signing,
    routes_telemetry,
    routes_usage,
    routes_wakes,
    routes_work,
)
from services.ingress.asyncapi import asyncapi_document
from services.ingress.console.setup import build_console, install_console
from services.ingress.console.web import Console
from services.ingress.deps import Ingress
from services.ingress.errors import install
from services.ingress.handlers import CallbackConsumer, register
from services.ingress.middleware import BodyLimit, RequestMetrics
from services.ingress.ratelimit import RateLimiter
from services.ingress.service import CallbackIntake
from services.ingress.settings import IngressSettings
from services.ingress.wake_feed import WakeFeed
from services.ingress.workers import refuse_if_misconfigured, serve_workers, serving
from shared.consumer import subscribers_running
from shared.domain.capability import hash_token
from shared.domain.why import Reason
from shared.file_runner import FileTools
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics, build_metrics
from shared.runtime import (
    configure_logging,
    connect_broker,
    make_broker,
    new_id,
    redis_client,
    tune_gc,
    until_redis_answers,
    utc_now,
)
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.store.why import explain_not_running
from shared.streams import consumer_name, ensure_groups
from shared.tool_gateway import ToolGateway
from shared.wire.names import Group

VERSION = "0.1.0"
TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}
"""FastAPI's built-in OpenTelemetry is off: longrun's metrics are Prometheus (/metrics), and the
hot callback route should not pay for spans nobody collects."""


@dataclass
class IngressApp:
    app: FastAPI
    ingress: Ingress
    subscribers: list[Any]
    settings: IngressSettings
    console: Console
    wake_feed: WakeFeed

    def close_feeds_soon(self) -> None:
        """Ends every open console stream and wake feed (from a signal handler)."""
        self.console.feed.close_soon()
        self.wake_feed.close_soon()


def _probes(
    subscribers: list[Any], client: LedgerClient, redis: AnyRedis
) -> tuple[Callable[[], str | None], Callable[[], Awaitable[str | None]]]:
    def not_alive() -> str | None:
        if not subscribers_running(subscribers):
            return "a callbacks stream subscriber has stopped"
        if not client.running:
            return "the ledger reply reader has stopped"
        return None

    async def not_ready() -> str | None:
        problem = not_alive()
        if problem is not None:
            return problem
        try:
            await redis.ping()
        except Exception as exc:  # any failure to reach Redis means not ready
            return f"redis unreachable: {exc}"
        return None

    return not_alive, not_ready


@dataclass(frozen=True, slots=True)
class _Parts:
    redis: AnyRedis
    registry: CollectorRegistry
    metrics: Metrics
    client: LedgerClient
    intake: CallbackIntake


def _parts(settings: IngressSettings) -> _Parts:
    redis = redis_client(settings)
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    # Commands from concurrent requests share pipelines: the ledger client's outbox.
    client = LedgerClient(
        redis, settings.names(), clock=utc_now, new_id=new_id, timeout=settings.ledger_timeout_s
    )
    limiter = RateLimiter(settings.callback_rate, settings.callback_burst, clock=time.monotonic)
    intake = CallbackIntake(
        client, metrics, max_body_bytes=settings.max_body_bytes, limiter=limiter
    )
    return _Parts(redis, registry, metrics, client, intake)


def _ingress(
    settings: IngressSettings, parts: _Parts, consumer: CallbackConsumer, subscribers: list[Any]
) -> Ingress:
    operator = settings.required_operator_token().get_secret_value()
    not_alive, not_ready = _probes(subscribers, parts.client, parts.redis)
    return Ingress(
        reads=ReadModel(parts.redis, settings.names(), settings.archive_root()),
        client=parts.client,
        gateway=ToolGateway(
            parts.client,
            agent_home=settings.agent_home,
            callback_base_url=settings.callback_base_url(),
            clock=utc_now,
            new_id=new_id,
            archive=settings.archive_root(),
        ),
        intake=parts.intake,
        metrics=parts.metrics,
        agent_limiter=RateLimiter(settings.agent_rate, settings.agent_burst, clock=time.monotonic),
        operator_token_hash=hash_token(operator),
        callback_secret=operator.encode(),
        callback_base_url=settings.callback_base_url(),
        new_id=new_id,
        not_alive=not_alive,
        not_ready=not_ready,
        before_scrape=consumer.sample_pending,
        why=_why(parts.redis, settings),
        files=FileTools(settings.agent_home, search_timeout_ms=settings.search_timeout_ms),
    )


def _why(
    redis: AnyRedis, settings: IngressSettings
) -> Callable[[str, str], Awaitable[Reason | None]]:
    names = settings.names()

    async def why(agent_id: str, work_item_id: str) -> Reason | None:
        return await explain_not_running(redis, names, agent_id, work_item_id, utc_now())

    return why


def build(settings: IngressSettings) -> IngressApp:
    """Wire everything; raises MisconfiguredError before touching anything if misconfigured."""
    settings.required_operator_token()
    parts = _parts(settings)
    broker = make_broker(settings)
    consumer = CallbackConsumer(parts.intake, parts.redis, settings.names(), parts.metrics)
    subscribers = register(
        broker,
        consumer,
        consumer_name=consumer_name("ingress"),
        batch_size=settings.ingress_batch_size,
        consumers=settings.ingress_stream_consumers,
        reclaim_idle_ms=settings.reclaim_idle_ms,
    )
    ingress = _ingress(settings, parts, consumer, subscribers)
    mcp = mcp_http.mcp_endpoint(ingress, max_body_bytes=settings.max_body_bytes)
    # Its own client: each live-feed reader holds a connection while it blocks in XREAD.
    console_redis = redis_client(settings)
    console = build_console(
        console_redis,
        settings.names(),
        settings.required_operator_token().get_secret_value(),
        public_url=settings.public_url,
    )
    # The agents' wake feeds: one more XREAD reader on the same client (`<prefix>:wakes`).
    wake_feed = WakeFeed(console_redis, settings.names())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await until_redis_answers(parts.redis)
        await ensure_groups(parts.redis, [settings.names().callbacks], Group.INGRESS)
        await parts.client.start()
        await connect_broker(broker)
        await broker.start()
        try:
            async with mcp.running():
                yield
        finally:
            await console.feed.stop()
            await wake_feed.stop()
            await broker.stop()
            await parts.client.stop()
            await console_redis.aclose()
            await parts.redis.aclose()

    app = _fastapi(ingress, settings, parts.registry, lifespan)
    app.state.wake_feed = wake_feed
    app.router.routes.append(mcp.route())
    install_console(app, console)
    return IngressApp(
        app=app,
        ingress=ingress,
        subscribers=subscribers,
        settings=settings,
        console=console,
        wake_feed=wake_feed,
    )


def _fastapi(
    ingress: Ingress, settings: IngressSettings, registry: CollectorRegistry, lifespan: Any
) -> FastAPI:
    app = FastAPI(
        title="longrun ingress",
        version=VERSION,
        description="The HTTP API of longrun (docs/contract.md §6). Streams: /asyncapi.json.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        telemetry=TELEMETRY,
    )
    app.state.ingress = ingress
    app.state.registry = registry
    app.state.asyncapi = asyncapi_document(
        prefix=settings.prefix, redis_url=settings.redis_url, version=VERSION
    )
    install(app)
    # Callbacks first: the router tries routes in order, and they are the hot path.
    app.router.routes.append(routes_callbacks.route)
    for module in (
        routes_agents,
        routes_control,
        routes_signing,
        routes_work,
        routes_gate,
        routes_usage,
        routes_telemetry,
        routes_delegations,
        routes_presets,
        routes_ops,
        routes_wakes,
    ):
        app.include_router(module.router)
    app.openapi = _with_callbacks(app)  # type: ignore[method-assign]
    # Added first = innermost: the callback shortcut runs inside the body limit and counter.
    app.add_middleware(routes_callbacks.CallbackShortcut)
    # Added last = outermost: the counter sees the 413s the body limit answers.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        RequestMetrics, counter=ingress.metrics.http_requests, routes=lambda: app.routes
    )
    return app


def _with_callbacks(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """FastAPI's generated document plus the hand-declared callbacks route."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = routes_callbacks.document(generate())
        return app.openapi_schema

    return openapi


def create_app() -> FastAPI:
    """The app from the environment: uvicorn calls this in every worker process."""
    settings = IngressSettings()
    configure_logging(settings.log_level)
    built = build(settings)
    tune_gc(built.ingress.metrics.gc_pauses)
    return built.app


def main() -> None:
    """One process serving HTTP and consuming callbacks (several: `workers.serve_workers`)."""
    settings = IngressSettings()
    if settings.ingress_workers > 1:
        serve_workers(settings)
        return
    configure_logging(settings.log_level)
    refuse_if_misconfigured(settings)
    built = build(settings)
    tune_gc(built.ingress.metrics.gc_pauses)
    config = uvicorn.Config(built.app, **serving(settings))
    server = ClosingServer(config, built.close_feeds_soon)
    server.run()
    if not server.started:
        raise SystemExit(3)  # as uvicorn.run exits when the server could not start


class ClosingServer(uvicorn.Server):
    """uvicorn waits for open responses before it stops; console pages and wake feeds stream
    forever, so the first stop signal ends their streams too (they reconnect to another ingress
    and resume by id)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)
