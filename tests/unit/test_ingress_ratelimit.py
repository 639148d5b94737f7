"""Per-token rate limiting: a token bucket per key with a clock the test advances."""

from __future__ import annotations

import pytest

from services.ingress.ratelimit import RateLimiter, retry_after_header


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_full_bucket_admits_the_burst_then_refuses() -> None:
    limiter = RateLimiter(rate=2.0, burst=3, clock=FakeClock())
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)


def test_tokens_refill_at_the_rate_up_to_the_burst() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=2.0, burst=2, clock=clock)
    limiter.take("a")
    limiter.take("a")
    clock.now += 0.5
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0
    clock.now += 60
    assert [limiter.take("a") for _ in range(3)][:2] == [0.0, 0.0]


def test_keys_have_separate_buckets() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, clock=FakeClock())
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0
    assert limiter.take("b") == 0.0


def test_rate_zero_disables_limiting() -> None:
    limiter = RateLimiter(rate=0, burst=1, clock=FakeClock())
    assert all(limiter.take("a") == 0.0 for _ in range(1000))
    assert len(limiter) == 0


def test_the_least_recently_used_bucket_is_dropped_past_max_keys() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, clock=FakeClock(), max_keys=2)
    limiter.take("a")
    limiter.take("b")
    limiter.take("a")  # refused, but "a" is now the most recently used
    limiter.take("c")
    assert len(limiter) == 2
    assert limiter.take("c") > 0  # kept: still limited
    assert limiter.take("b") == 0.0  # "b" was dropped, so it comes back full


def test_a_clock_going_backwards_never_adds_tokens() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate=1.0, burst=1, clock=clock)
    limiter.take("a")
    clock.now -= 50
    assert limiter.take("a") > 0


@pytest.mark.parametrize(("wait", "header"), [(0.01, "1"), (1.0, "1"), (1.2, "2"), (9.99, "10")])
def test_retry_after_rounds_up_to_whole_seconds(wait: float, header: str) -> None:
    assert retry_after_header(wait) == header
