"""Composition root of the ledger: settings, Redis, broker, metrics, clock, subscribers, routes.

Nothing connects at import time; `build()` wires objects and `main()` serves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog
import uvicorn
from faststream.asgi import AsgiFastStream
from prometheus_client import CollectorRegistry
from pydantic import Field, SecretStr, field_validator

from services.ledger.handlers import ROUNDS_AT_ONCE, CommandConsumer, register
from services.ledger.outbox import DEFAULT_RETRY_MS, OutboxRelay
from services.ledger.service import LedgerService
from shared.domain.acceptance import DEFAULT_CHECK_DEADLINE_S, DEFAULT_MAX_VERIFY_ATTEMPTS
from shared.domain.delegation import DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DELEGATION_DEPTH
from shared.domain.signing import SigningKey
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
from shared.store.functions import load_functions
from shared.store.signing_keys import publish_public_key
from shared.streams import consumer_name, ensure_groups
from shared.wire.names import Group


class LedgerSettings(CommonSettings):
    ledger_port: int = Field(default=9101, ge=0, le=65535)
    """Port of /healthz, /readyz and /metrics (0: pick a free one)."""
    ledger_batch_size: int = Field(default=100, ge=1, le=1000)
    ledger_rounds: int = Field(default=ROUNDS_AT_ONCE, ge=1, le=64)
    """Coalesced rounds in flight at once; partitions' batches arriving while they all run share
    the next round (one Redis round trip for all of them instead of one each)."""
    reclaim_idle_ms: int = Field(default=30_000, ge=100)
    """Idle time before a pending entry is reclaimed: above the slowest batch (consumer rule 2)."""
    max_delegation_depth: int = Field(default=DEFAULT_MAX_DELEGATION_DEPTH, ge=1, le=100)
    """LONGRUN_MAX_DELEGATION_DEPTH: hops from the root WorkItem a delegation may reach."""
    check_deadline_s: int = Field(default=DEFAULT_CHECK_DEADLINE_S, ge=1, le=366 * 24 * 3600)
    """LONGRUN_CHECK_DEADLINE_S: an awaited operator_approval or reviewer_agent verdict's
    deadline (from the attempt's start) when the check sets none."""
    max_children: int = Field(default=DEFAULT_MAX_CHILDREN, ge=1, le=1000)
    """LONGRUN_MAX_CHILDREN: private children (spawned, delegation running) an agent may have."""
    outbox_retry_ms: int = Field(default=DEFAULT_RETRY_MS, ge=100)
    """LONGRUN_OUTBOX_RETRY_MS: how long a sent outbox command waits before it is checked and,
    if its target has not applied it, sent again."""
    outbox_interval_ms: int = Field(default=1000, ge=10)
    """LONGRUN_OUTBOX_INTERVAL_MS: how often the relay looks for due outbox entries."""
    max_verify_attempts: int = Field(default=DEFAULT_MAX_VERIFY_ATTEMPTS, ge=1, le=100)
    """LONGRUN_MAX_VERIFY_ATTEMPTS: failed verification attempts after which a WorkItem is
    blocked and only the operator moves it (its verdict, update or cancel)."""
    signing_key: SecretStr | None = None
    """LONGRUN_SIGNING_KEY: base64 raw Ed25519 private key history heads are signed with
    (`longrun keygen`); unset, the process makes an ephemeral one and logs its id."""

    @field_validator("signing_key")
    @classmethod
    def _a_real_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None  # empty (a blank Secret entry): same as unset
        SigningKey.from_base64(value.get_secret_value())  # SigningKeyError is a ValueError
        return value


@dataclass
class LedgerApp:
    app: AsgiFastStream
    service: LedgerService
    subscribers: list[Any]
    settings: LedgerSettings


def build(settings: LedgerSettings) -> LedgerApp:
    names = settings.names()
    redis = redis_client(settings)
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    broker = make_broker(settings)
    signing_key = signing_key_of(settings)
    service = LedgerService(
        redis,
        names,
        metrics,
        clock=utc_now,
        new_id=new_id,
        wake_limit=settings.max_wake_cycles,
        signing_key=signing_key,
        max_delegation_depth=settings.max_delegation_depth,
        webhook_allow=settings.webhook_allowlist(),
        check_deadline_s=settings.check_deadline_s,
        max_verify_attempts=settings.max_verify_attempts,
        max_children=settings.max_children,
    )
    service.planner.outbox_retry_ms = settings.outbox_retry_ms
    relay = OutboxRelay(
        redis,
        names,
        clock=utc_now,
        retry_ms=settings.outbox_retry_ms,
        interval_s=settings.outbox_interval_ms / 1000,
    )
    consumer = CommandConsumer(service, redis, names, rounds=settings.ledger_rounds)
    partitions = range(settings.partitions)
    subscribers = register(
        broker,
        consumer,
        partitions=partitions,
        consumer_name=consumer_name("ledger"),
        batch_size=settings.ledger_batch_size,
        reclaim_idle_ms=settings.reclaim_idle_ms,
    )

    async def prepare() -> None:
        await until_redis_answers(redis)
        await load_functions(redis)
        await publish_public_key(redis, names, signing_key, utc_now())
        await ensure_groups(redis, (names.commands(p) for p in partitions), Group.LEDGER)
        await connect_broker(broker)
        relay.start()

    async def close() -> None:
        await relay.stop()
        await redis.aclose()

    app = AsgiFastStream(
        broker,
        logger=broker_logger(),
        asgi_routes=health_routes(lambda: [*subscribers, relay], redis, registry),
        on_startup=[prepare],
        after_shutdown=[close],
    )
    return LedgerApp(app=app, service=service, subscribers=subscribers, settings=settings)


def signing_key_of(settings: LedgerSettings) -> SigningKey:
    if settings.signing_key is not None:
        return SigningKey.from_base64(settings.signing_key.get_secret_value())
    key = SigningKey.generate()
    structlog.get_logger("ledger").warning(
        "ephemeral_signing_key",
        key_id=key.key_id,
        hint="set LONGRUN_SIGNING_KEY (longrun keygen) for a key that outlives this process",
    )
    return key


def main() -> None:
    settings = LedgerSettings()
    configure_logging(settings.log_level)
    built = build(settings)
    tune_gc(built.service.metrics.gc_pauses)
    uvicorn.run(built.app, host=settings.http_host, port=settings.ledger_port, log_level="warning")
