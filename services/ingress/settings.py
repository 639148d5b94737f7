"""Ingress settings: the common ones plus HTTP binding, stream consumption and rate limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from shared.settings import CommonSettings


class MisconfiguredError(Exception):
    """Ingress cannot start as configured; the message says which variable to set."""


class IngressSettings(CommonSettings):
    ingress_batch_size: int = Field(default=100, ge=1, le=1000)
    """Entries of `<prefix>:callbacks` read per batch (bounded prefetch, consumer rule 3)."""
    ingress_stream_consumers: int = Field(default=16, ge=1, le=64)
    """Batches of `<prefix>:callbacks` in flight per ingress process, one group consumer each.
    A batch waits for the ledger's verdict on every entry before it is acked, so a backlog
    drains at most (consumers x batch) per ledger round trip: 16 drained a backlog measurably
    faster than 4 (docs/benchmarks.md, "Performance choices in the code")."""
    reclaim_idle_ms: int = Field(default=30_000, ge=100)
    """Idle time before a pending callbacks entry is reclaimed: above the slowest batch, which
    can wait the ledger client's full resend cycle (consumer rule 2 in docs/architecture.md)."""
    ledger_timeout_s: float = Field(default=5.0, gt=0)
    """Seconds to wait for one ledger reply before resending the same command."""
    callback_rate: float = Field(default=100.0, ge=0)
    """Callbacks per second admitted per capability token (0: unlimited)."""
    callback_burst: int = Field(default=200, ge=1)
    agent_rate: float = Field(default=50.0, ge=0)
    """Requests per second admitted per agent token (0: unlimited); the operator is not limited."""
    agent_burst: int = Field(default=100, ge=1)
    ingress_workers: int = Field(default=1, ge=1, le=64)
    """HTTP worker processes behind the one port (uvicorn's supervisor shares the socket).
    Each is a full, stateless ingress: its own ledger client, callbacks consumer, rate-limit
    buckets and metrics (so N workers admit up to N times a token's rate, and /metrics shows
    the worker that answered the scrape: in Kubernetes prefer replicas of 1 worker)."""
    http_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    """Event loop: `auto` is uvloop (a dependency) where it is installed."""
    http_parser: Literal["auto", "h11", "httptools"] = "auto"
    """HTTP/1.1 parser: `auto` is httptools (a dependency) where it is installed."""

    def required_operator_token(self) -> SecretStr:
        token = self.operator_token
        if token is None or not token.get_secret_value().strip():
            raise MisconfiguredError(
                "LONGRUN_OPERATOR_TOKEN is not set: ingress refuses to start without it. "
                "Set it to a long random secret (for example `openssl rand -hex 32`) and give "
                "the same value to the operator's CLI."
            )
        return token
