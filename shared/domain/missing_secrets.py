"""A spec that names environment variables the executor lacks: which one is missing, and when
the agent is tried again. No turn runs without every variable its spec names; the agent waits a
per-agent backoff (doubling, like a model outage) or a spec change. Time is an argument."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import Field

from shared.domain.base import Record, UtcDatetime
from shared.domain.model_failures import OutageBackoff
from shared.domain.specs import AgentSpec, required_env_names


class MissingSecret(Record):
    """The executor that took the agent's tick lacks the variable `name` its spec (version
    `spec_version`) names; retried from `retry_at`, or at once when the spec changes."""

    name: str = Field(min_length=1, max_length=128)
    spec_version: int = Field(ge=0)
    retry_at: UtcDatetime
    attempts: int = Field(default=1, ge=1)
    """Consecutive ticks refused for this variable and spec version."""


def first_missing(spec: AgentSpec, environ: Mapping[str, str]) -> str | None:
    """The first variable (sorted by name) the spec names and `environ` lacks, or None."""
    return next((name for name in required_env_names(spec) if name not in environ), None)


def next_missing(
    previous: MissingSecret | None,
    *,
    name: str,
    spec_version: int,
    now: datetime,
    backoff: OutageBackoff,
) -> MissingSecret:
    """The hold to record: the backoff doubles while the same variable of the same spec version
    stays missing, and starts over otherwise."""
    same = previous is not None and previous.name == name and previous.spec_version == spec_version
    attempts = previous.attempts + 1 if previous is not None and same else 1
    return MissingSecret(
        name=name,
        spec_version=spec_version,
        retry_at=now + backoff.delay(attempts),
        attempts=attempts,
    )
