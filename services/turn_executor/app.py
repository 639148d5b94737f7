"""Composition root of the turn executor: settings, Redis, broker, ledger client, tool gateway,
provider, leases, metrics, clock, subscribers and routes.

Nothing connects at import time; `build()` wires objects and `main()` serves them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import uvicorn
from faststream.asgi import AsgiFastStream
from prometheus_client import CollectorRegistry
from pydantic import Field, model_validator

from services.turn_executor.check_runner import CheckConsumer, CheckRunner, register_checks
from services.turn_executor.command_calls import CommandCalls
from services.turn_executor.handlers import TickConsumer, register
from services.turn_executor.lease import Leases
from services.turn_executor.mcp_client import McpClients
from services.turn_executor.memory import MemorySettings
from services.turn_executor.model_calls import ModelCaller
from services.turn_executor.models import SCRIPTED_MODEL, Models
from services.turn_executor.providers import ProviderConfig, ProviderKind
from services.turn_executor.rounds import ToolRunner
from services.turn_executor.sandbox import (
    Sandbox,
    SandboxLimits,
    build_sandbox,
    default_extra_paths,
)
from services.turn_executor.service import TurnConfig, TurnService
from shared.domain.model_failures import OutageBackoff, RetryPolicy
from shared.domain.specs import MAX_ROUNDS_CEILING
from shared.file_runner import FileTools
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics, build_metrics
from shared.runtime import (
    broker_logger,
    configure_logging,
    connect_broker,
    health_routes,
    make_broker,
    new_id,
    tune_gc,
    until_redis_answers,
    utc_now,
)
from shared.settings import CommonSettings
from shared.store.client import AnyRedis, connect
from shared.store.functions import load_functions
from shared.store.readmodel import ReadModel
from shared.streams import consumer_name, ensure_groups
from shared.tool_gateway import ToolGateway
from shared.wire.names import Group


class ExecutorSettings(CommonSettings):
    executor_port: int = Field(default=9103, ge=0, le=65535)
    """Port of /healthz, /readyz and /metrics (0: pick a free one)."""
    executor_concurrency: int = Field(default=100, ge=1, le=10_000)
    """Turns one process runs at once; turns wait on the model, so this is I/O concurrency."""
    executor_batch_size: int = Field(default=16, ge=1, le=1000)
    max_rounds_per_turn: int = Field(default=MAX_ROUNDS_CEILING, ge=1, le=1000)
    """A ceiling on every agent's `limits.max_rounds_per_turn` (its spec decides below it)."""
    lease_ttl_ms: int | None = Field(default=None, ge=100)
    """A dead executor's turn is retried once its lease expires; renewed every ttl/3. Unset:
    15 s, or two thirds of `reclaim_idle_ms` when that is shorter."""
    reclaim_idle_ms: int = Field(default=30_000, ge=100)
    provider_timeout_s: float = Field(default=60.0, gt=0)
    model_max_retries: int = Field(default=6, ge=0, le=100)
    """Retries of a model call after its first attempt, for transient failures only."""
    model_retry_base_ms: int = Field(default=500, ge=0)
    model_retry_cap_ms: int = Field(default=30_000, ge=0)
    model_retry_after_cap_ms: int = Field(default=60_000, ge=0)
    """A longer `Retry-After` is not waited out inside a turn: the agent's backoff takes over."""
    model_outage_backoff_ms: int = Field(default=30_000, ge=1)
    model_outage_backoff_max_ms: int = Field(default=1_800_000, ge=1)
    missing_secret_backoff_ms: int = Field(default=30_000, ge=1)
    missing_secret_backoff_max_ms: int = Field(default=1_800_000, ge=1)
    """How long an agent waits after a tick this executor could not serve because the spec
    names an environment variable it lacks (doubling per consecutive refusal)."""
    script_file: Path | None = None
    """Scripted provider only: replay these rounds (JSON or YAML list) instead of the policy."""
    scripted_latency_ms: int = Field(default=0, ge=0)
    """Scripted provider only: a fixed delay per round, a stand-in for model latency."""
    shutdown_grace_s: float = Field(default=5.0, ge=0)
    """On SIGTERM, running turns get this long to end; the rest finish as interrupted."""
    trace_tokens: int = Field(default=8000, ge=100)
    """Tokens of the current WorkItem's process trace a prompt shows (LONGRUN_TRACE_TOKENS)."""
    notes_tokens: int = Field(default=2000, ge=100)
    """Tokens its process notes may take before older ones are merged."""
    transcript_max_rounds: int = Field(default=2000, ge=10)
    """Recorded rounds kept per agent once covered by a note or a completed WorkItem."""
    mcp_tools_ttl_s: float = Field(default=300.0, ge=0)
    """How long an MCP server's tool list is reused for one (spec version, server)."""
    sandbox: Literal["bubblewrap", "none"] = "bubblewrap"
    """LONGRUN_SANDBOX: the backend RunCommand runs in; `none` turns commands off."""
    command_max_s: int = Field(default=600, ge=1, le=86_400)
    """The largest `timeout_s` a RunCommand call may ask for (LONGRUN_COMMAND_MAX_S)."""
    sandbox_memory_mb: int = Field(default=1024, ge=64)
    sandbox_pids: int = Field(default=128, ge=8)
    sandbox_concurrency: int = Field(default=4, ge=1, le=256)
    """Commands one executor process runs at once; later ones wait."""
    sandbox_paths: tuple[Path, ...] | None = None
    """Directories a command sees read-only besides /usr (JSON list); unset: the executor's
    own Python installation when it lies outside /usr (a virtualenv), so commands can run
    `python -m pytest` with the packages installed there."""

    def command_sandbox(self) -> Sandbox:
        limits = SandboxLimits(memory_mb=self.sandbox_memory_mb, pids=self.sandbox_pids)
        extra = self.sandbox_paths if self.sandbox_paths is not None else default_extra_paths()
        scratch = self.agent_home.parent / ".sandbox-probe"
        return build_sandbox(self.sandbox, scratch, limits, extra)

    @property
    def lease_ttl(self) -> int:
        if self.lease_ttl_ms is not None:
            return self.lease_ttl_ms
        return min(15_000, self.reclaim_idle_ms * 2 // 3)

    @model_validator(mode="after")
    def _reclaim_after_lease(self) -> ExecutorSettings:
        if self.lease_ttl_ms is not None and self.reclaim_idle_ms <= self.lease_ttl_ms:
            raise ValueError(
                f"LONGRUN_RECLAIM_IDLE_MS ({self.reclaim_idle_ms}) must exceed "
                f"LONGRUN_LEASE_TTL_MS ({self.lease_ttl_ms}): a tick reclaimed from a dead "
                "executor must find its lease expired, or the retry is dropped as a duplicate"
            )
        return self

    def provider_configs(self) -> dict[ProviderKind, ProviderConfig]:
        """Each provider's endpoint, credentials and default model, from the environment. The
        SDKs never retry: the turn does (`model_calls`), so each attempt is seen and counted."""
        openai_key, anthropic_key = self.openai_api_key, self.anthropic_api_key
        common: dict[str, Any] = {"timeout_s": self.provider_timeout_s, "max_retries": 0}
        return {
            "scripted": ProviderConfig(
                kind="scripted",
                model=SCRIPTED_MODEL,
                script_file=self.script_file,
                latency_ms=self.scripted_latency_ms,
                **common,
            ),
            "openai": ProviderConfig(
                kind="openai",
                base_url=self.openai_base_url,
                api_key=openai_key.get_secret_value() if openai_key else None,
                model=self.model,
                **common,
            ),
            "anthropic": ProviderConfig(
                kind="anthropic",
                base_url=self.anthropic_base_url,
                api_key=anthropic_key.get_secret_value() if anthropic_key else None,
                model=self.model,
                **common,
            ),
        }

    def provider_config(self) -> ProviderConfig:
        """The default model: agents whose spec names none run on it."""
        return self.provider_configs()[self.provider]

    def models(self) -> Models:
        return Models(self.provider_config(), self.provider_configs())

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_retries=self.model_max_retries,
            base_s=self.model_retry_base_ms / 1000,
            cap_s=self.model_retry_cap_ms / 1000,
            retry_after_cap_s=self.model_retry_after_cap_ms / 1000,
        )

    def outage_backoff(self) -> OutageBackoff:
        return OutageBackoff(
            base_s=self.model_outage_backoff_ms / 1000,
            cap_s=self.model_outage_backoff_max_ms / 1000,
        )

    def secret_backoff(self) -> OutageBackoff:
        return OutageBackoff(
            base_s=self.missing_secret_backoff_ms / 1000,
            cap_s=self.missing_secret_backoff_max_ms / 1000,
        )


CLOSE_STEP_S = 3.0
CONNECTIONS_PER_TURN = 6
"""A turn holds at most this many Redis connections at once: four parallel reads, its lease
beat, and one spare; the pool is sized from it, so it can never run out."""


def executor_redis(url: str, concurrency: int, cluster: bool = False) -> AnyRedis:
    """A client whose pool fits `concurrency` turns, so no turn ever waits for a connection."""
    return connect(url, cluster=cluster, max_connections=CONNECTIONS_PER_TURN * concurrency + 64)


@dataclass
class ExecutorApp:
    app: AsgiFastStream
    service: TurnService
    consumer: TickConsumer
    subscribers: list[Any]
    settings: ExecutorSettings


def _service(
    settings: ExecutorSettings, redis: AnyRedis, client: LedgerClient, metrics: Metrics, owner: str
) -> TurnService:
    names = settings.names()
    gateway = ToolGateway(
        client,
        agent_home=settings.agent_home,
        callback_base_url=settings.callback_base_url(),
        clock=utc_now,
        new_id=new_id,
        archive=settings.archive_root(),
    )
    runner = ToolRunner(
        client=client,
        gateway=gateway,
        metrics=metrics,
        agent_home=settings.agent_home,
        clock=utc_now,
        mcp=McpClients(metrics, ttl_s=settings.mcp_tools_ttl_s),
        files=FileTools(settings.agent_home, search_timeout_ms=settings.search_timeout_ms),
        commands=CommandCalls(
            settings.command_sandbox(),
            settings.agent_home,
            max_timeout_s=settings.command_max_s,
            concurrency=settings.sandbox_concurrency,
        ),
        max_argument_bytes=settings.max_body_bytes,
    )
    return TurnService(
        reads=ReadModel(redis, names, settings.archive_root()),
        client=client,
        runner=runner,
        leases=Leases(redis, names, ttl_ms=settings.lease_ttl),
        models=settings.models(),
        caller=ModelCaller(metrics, settings.retry_policy(), clock=utc_now),
        metrics=metrics,
        config=TurnConfig(
            owner=owner,
            max_rounds=settings.max_rounds_per_turn,
            agent_home=settings.agent_home,
            outage_backoff=settings.outage_backoff(),
            secret_backoff=settings.secret_backoff(),
            memory=MemorySettings(
                trace_tokens=settings.trace_tokens,
                notes_tokens=settings.notes_tokens,
                transcript_max_rounds=settings.transcript_max_rounds,
            ),
        ),
        clock=utc_now,
        new_id=new_id,
    )


Hook = Callable[[], Awaitable[None]]


def _lifecycle(
    settings: ExecutorSettings,
    redis: AnyRedis,
    client: LedgerClient,
    consumer: TickConsumer,
    service: TurnService,
) -> tuple[Hook, Hook, Hook]:
    """Start-up, drain (before the broker stops) and close (after it stopped)."""
    names = settings.names()

    async def prepare() -> None:
        await until_redis_answers(redis)
        await load_functions(redis)
        ticks = (names.ticks(p) for p in range(settings.partitions))
        await ensure_groups(redis, ticks, Group.EXECUTOR)
        await ensure_groups(redis, [names.check_requests], Group.CHECK_RUNNERS)
        await client.start()
        status = service.runner.commands.status(utc_now())
        await redis.hset(names.sandbox_status, consumer.consumer, status)

    async def drain() -> None:
        await consumer.close(settings.shutdown_grace_s)

    async def close() -> None:
        # Bounded: on Python 3.11 a cancel can be swallowed mid-Redis-call (gh-86296), and a
        # reply reader that misses its cancel must not keep the process from exiting.
        await asyncio.wait({asyncio.ensure_future(client.stop())}, timeout=CLOSE_STEP_S)
        await redis.hdel(names.sandbox_status, consumer.consumer)
        await service.models.close()
        await service.runner.mcp.aclose()
        await redis.aclose()

    return prepare, drain, close


def build(settings: ExecutorSettings) -> ExecutorApp:
    names = settings.names()
    redis = executor_redis(
        settings.redis_url, settings.executor_concurrency, settings.redis_cluster
    )
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    broker = make_broker(settings)
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id)
    me = consumer_name("executor")
    service = _service(settings, redis, client, metrics, me)
    consumer = TickConsumer(
        service, redis, names, metrics, consumer=me, concurrency=settings.executor_concurrency
    )
    partitions = range(settings.partitions)
    checks = CheckRunner(
        service.runner.commands.sandbox,
        settings.agent_home,
        client,
        max_timeout_s=settings.command_max_s,
    )
    subscribers = register(
        broker,
        consumer,
        partitions=partitions,
        batch_size=settings.executor_batch_size,
        reclaim_idle_ms=settings.reclaim_idle_ms,
    )
    subscribers += register_checks(
        broker,
        CheckConsumer(checks, redis, names, metrics),
        consumer_name=f"{me}-checks",
        max_timeout_s=settings.command_max_s,
    )

    prepare, drain, close = _lifecycle(settings, redis, client, consumer, service)
    app = AsgiFastStream(
        broker,
        logger=broker_logger(),
        asgi_routes=health_routes(
            lambda: [*subscribers, client],
            redis,
            registry,
            notes=lambda: [service.runner.commands.readiness()],
        ),
        on_startup=[prepare, partial(connect_broker, broker)],
        on_shutdown=[drain],
        after_shutdown=[close],
    )
    return ExecutorApp(
        app=app, service=service, consumer=consumer, subscribers=subscribers, settings=settings
    )


def main() -> None:
    settings = ExecutorSettings()
    configure_logging(settings.log_level)
    built = build(settings)
    tune_gc(built.service.metrics.gc_pauses)
    uvicorn.run(
        built.app, host=settings.http_host, port=settings.executor_port, log_level="warning"
    )
