"""Retrying model calls and backing off an agent: pure decisions, time and jitter as arguments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.model_failures import (
    ModelOutage,
    OutageBackoff,
    RetryPolicy,
    is_transient_status,
    next_outage,
    parse_retry_after,
    retry_delay,
)

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (429, True),
        (408, True),
        (500, True),
        (503, True),
        (529, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (413, False),
        (422, False),
    ],
)
def test_only_429_timeouts_and_5xx_are_transient(status: int, transient: bool) -> None:
    assert is_transient_status(status) is transient


def test_full_jitter_spreads_the_delay_below_a_doubling_ceiling() -> None:
    policy = RetryPolicy(max_retries=6, base_s=1.0, cap_s=8.0)
    assert retry_delay(policy, 1, None, 0.0) == 0.0
    assert retry_delay(policy, 1, None, 0.5) == 0.5
    assert retry_delay(policy, 2, None, 0.5) == 1.0
    assert retry_delay(policy, 3, None, 0.5) == 2.0
    assert retry_delay(policy, 6, None, 0.5) == 4.0  # 32 s capped at 8 s


def test_retries_count_after_the_first_attempt_and_then_give_up() -> None:
    policy = RetryPolicy(max_retries=6)
    assert retry_delay(policy, 6, None, 0.3) is not None
    assert retry_delay(policy, 7, None, 0.3) is None
    assert retry_delay(RetryPolicy(max_retries=0), 1, None, 0.3) is None


def test_retry_after_is_a_floor_and_a_long_one_gives_up() -> None:
    policy = RetryPolicy(base_s=0.1, cap_s=1.0, retry_after_cap_s=60.0)
    assert retry_delay(policy, 1, 1.0, 0.0) == 1.0
    assert retry_delay(policy, 1, 0.01, 0.99) == pytest.approx(0.099)
    assert retry_delay(policy, 1, 61.0, 0.5) is None


def test_retry_after_reads_seconds_dates_and_milliseconds() -> None:
    assert parse_retry_after("1", None, NOW) == 1.0
    assert parse_retry_after("2.5", None, NOW) == 2.5
    assert parse_retry_after("1", "250", NOW) == 0.25
    assert parse_retry_after("Thu, 26 Nov 2026 12:00:30 GMT", None, NOW) == 30.0
    assert parse_retry_after("Thu, 26 Nov 2026 11:00:00 GMT", None, NOW) == 0.0
    assert parse_retry_after("soon", None, NOW) is None
    assert parse_retry_after(None, None, NOW) is None


def test_agent_backoff_doubles_from_30_s_to_30_min() -> None:
    backoff = OutageBackoff()
    delays = [backoff.delay(n).total_seconds() for n in range(1, 10)]
    assert delays == [30, 60, 120, 240, 480, 960, 1800, 1800, 1800]


def test_consecutive_outages_push_retry_at_further_out() -> None:
    backoff = OutageBackoff(base_s=30, cap_s=1800)
    first = next_outage(None, provider="openai", status=503, now=NOW, backoff=backoff)
    assert first == ModelOutage(
        provider="openai", status=503, retry_at=NOW + timedelta(seconds=30), outages=1
    )
    later = NOW + timedelta(minutes=5)
    second = next_outage(first, provider="openai", status=None, now=later, backoff=backoff)
    assert (second.outages, second.retry_at, second.status) == (
        2,
        later + timedelta(seconds=60),
        None,
    )
