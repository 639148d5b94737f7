"""When to retry a model call and when to give up: the pure decisions behind model failures.

Inside a turn, a transient failure (HTTP 429, 5xx, a timeout, a refused or reset connection) is
retried with exponential backoff and full jitter, or after the provider's `Retry-After`; a
permanent one (any other 4xx) is not. Once a turn's retries run out, the agent waits a
per-agent backoff (30 s doubling to 30 min by default) before its next turn. Time and the
jitter source are arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

from shared.domain.base import Record, UtcDatetime

TOO_MANY_REQUESTS = 429
REQUEST_TIMEOUT = 408


def is_transient_status(status: int) -> bool:
    """429, 408 and every 5xx may succeed on retry; any other 4xx will not."""
    return status in (TOO_MANY_REQUESTS, REQUEST_TIMEOUT) or status >= 500


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries of one model call inside a turn."""

    max_retries: int = 6
    """Retries after the first attempt."""
    base_s: float = 0.5
    cap_s: float = 30.0
    """No computed delay is longer than this."""
    retry_after_cap_s: float = 60.0
    """A `Retry-After` longer than this is not waited out inside the turn: the turn gives up
    and the agent's own backoff takes over."""


def retry_delay(
    policy: RetryPolicy, retry: int, retry_after_s: float | None, jitter: float
) -> float | None:
    """Seconds to wait before retry number `retry` (1 = the first retry), or None to give up.

    `jitter` is a draw from [0, 1): full jitter spreads the delay uniformly over [0, ceiling),
    so many turns hit by one outage do not come back in step. A `Retry-After` is honoured as a
    floor."""
    if retry > policy.max_retries:
        return None
    if retry_after_s is not None and retry_after_s > policy.retry_after_cap_s:
        return None
    ceiling = min(policy.cap_s, policy.base_s * 2.0 ** (retry - 1))
    delay = ceiling * min(max(jitter, 0.0), 1.0)
    return max(delay, retry_after_s or 0.0)


def parse_retry_after(
    retry_after: str | None, retry_after_ms: str | None, now: datetime
) -> float | None:
    """Seconds from `Retry-After` (seconds or an HTTP date) or `retry-after-ms`; None if absent
    or unreadable."""
    if retry_after_ms:
        try:
            return max(float(retry_after_ms) / 1000, 0.0)
        except ValueError:
            pass
    if not retry_after:
        return None
    try:
        return max(float(retry_after), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(retry_after)
    except (TypeError, ValueError):
        return None
    return max((when - now).total_seconds(), 0.0)


@dataclass(frozen=True, slots=True)
class OutageBackoff:
    """How long an agent whose model stayed unavailable waits before its next turn."""

    base_s: float = 30.0
    cap_s: float = 1800.0

    def delay(self, outages: int) -> timedelta:
        """The wait after the `outages`-th consecutive outage (1 = the first): doubling."""
        seconds = self.base_s * 2.0 ** max(outages - 1, 0)
        return timedelta(seconds=min(seconds, self.cap_s))


class ModelOutage(Record):
    """The model an agent needs could not be reached: retried from `retry_at`."""

    provider: str
    status: int | None = None
    """The last HTTP status, None for a timeout or a connection failure."""
    retry_at: UtcDatetime
    outages: int = 1
    """Consecutive outages so far; one successful model call resets the count."""


def next_outage(
    previous: ModelOutage | None,
    *,
    provider: str,
    status: int | None,
    now: datetime,
    backoff: OutageBackoff,
) -> ModelOutage:
    """The outage to record after a turn's retries ran out."""
    outages = (previous.outages if previous is not None else 0) + 1
    return ModelOutage(
        provider=provider, status=status, retry_at=now + backoff.delay(outages), outages=outages
    )
