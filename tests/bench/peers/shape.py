"""The workload shape every system runs, written once: how a handler records an event and
where the follow-up goes, so the Celery and Taskiq handlers and the bench's checks agree.

The worker CLIs (`celery worker`, `taskiq worker`) import their app by name, so the settings
travel in environment variables the bench sets for the worker process only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

URL_ENV = "BENCH_PEERS_REDIS_URL"
PREFIX_ENV = "BENCH_PEERS_PREFIX"


@dataclass(frozen=True, slots=True)
class Shape:
    """Key and queue names of one system's run, all under its own prefix."""

    redis_url: str
    prefix: str

    @classmethod
    def from_env(cls) -> Shape:
        """For a worker process; a missing variable fails at start, never a default server."""
        return cls(redis_url=os.environ[URL_ENV], prefix=os.environ[PREFIX_ENV])

    def env(self) -> dict[str, str]:
        return {URL_ENV: self.redis_url, PREFIX_ENV: self.prefix}

    @property
    def events(self) -> str:
        """The queue (Celery list or Taskiq stream) the producer enqueues events to."""
        return f"{self.prefix}-events"

    @property
    def followups(self) -> str:
        """The queue the handler publishes follow-ups to; only the bench's reader consumes it."""
        return f"{self.prefix}-followups"

    def agent(self, agent: str) -> str:
        """Hash: `events` (a count) and `last` (the last event id recorded)."""
        return f"{self.prefix}:agent:{agent}"

    def history(self, agent: str) -> str:
        """List of the agent's event ids, in the order they were recorded."""
        return f"{self.prefix}:agent:{agent}:history"


RECORD_TASK = "bench.record"
FOLLOWUP_TASK = "bench.followup"
