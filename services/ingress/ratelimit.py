"""Per-token rate limiting: one token bucket per key, kept in this process's memory.

Each ingress replica keeps its own buckets, so N replicas admit up to N times the rate; a shared
limit would cost a Redis round trip on every request, and the point here is to keep one noisy
token from starving the others on the same process, not exact global quotas.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_MAX_KEYS = 100_000
"""Buckets kept at most; the least recently used is dropped first (it comes back full)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """`rate` tokens per second refill a bucket of `burst`; a rate of 0 disables limiting."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float],
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        self.rate = rate
        self.burst = max(burst, 1)
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, key: str) -> float:
        """Take one token: 0.0 when allowed, else the seconds until the next token."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(tokens=float(self.burst), stamp=now)
            self._buckets[key] = bucket
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            elapsed = max(now - bucket.stamp, 0.0)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate)
            bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after_header(wait_seconds: float) -> str:
    """Retry-After takes whole seconds; round up so a client that obeys it is admitted."""
    return str(max(1, math.ceil(wait_seconds)))
