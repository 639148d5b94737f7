"""Usage sums and the daily token budget: pure arithmetic over a UTC day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.domain.usage import (
    BudgetExhausted,
    DayTokens,
    TurnUsage,
    Usage,
    budget_exhausted,
    budget_left,
    resets_at,
    utc_day,
)

NOON = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
MIDNIGHT = datetime(2026, 11, 27, tzinfo=UTC)


def test_a_turn_sums_its_calls_in_total_and_by_model() -> None:
    turn = TurnUsage()
    turn = turn.plus_call(
        "openai/a", Usage(input_tokens=100, cached_input_tokens=40, output_tokens=7)
    )
    turn = turn.plus_call(
        "openai/a", Usage(input_tokens=120, cached_input_tokens=100, output_tokens=3)
    )
    turn = turn.plus_call("anthropic/b", Usage(input_tokens=5, output_tokens=1))
    assert (turn.model_calls, turn.input_tokens, turn.cached_input_tokens, turn.output_tokens) == (
        3,
        225,
        140,
        11,
    )
    a = turn.by_model["openai/a"]
    assert (a.model_calls, a.input_tokens, a.cached_input_tokens, a.output_tokens) == (
        2,
        220,
        140,
        10,
    )
    assert turn.by_model["anthropic/b"].model_calls == 1
    assert turn.budget_tokens == 236


def test_the_day_turns_at_utc_midnight() -> None:
    assert utc_day(NOON) == "2026-11-26"
    assert resets_at(NOON) == MIDNIGHT
    assert resets_at(MIDNIGHT) == MIDNIGHT + timedelta(days=1)


def test_spent_tokens_count_only_on_their_day() -> None:
    spent = DayTokens(day="2026-11-26").plus(Usage(input_tokens=600, output_tokens=500), NOON)
    assert spent.used_on(NOON) == 1100
    assert spent.used_on(MIDNIGHT) == 0
    tomorrow = spent.plus(Usage(input_tokens=1, output_tokens=2), MIDNIGHT)
    assert tomorrow == DayTokens(day="2026-11-27", tokens=3)


def test_a_budget_is_exhausted_once_spent_until_midnight() -> None:
    spent = DayTokens(day="2026-11-26", tokens=1000)
    assert budget_exhausted(spent, None, NOON) is None
    assert budget_exhausted(spent, 1001, NOON) is None
    assert budget_exhausted(spent, 1000, NOON) == BudgetExhausted(
        used=1000, limit=1000, resets_at=MIDNIGHT
    )
    assert budget_exhausted(spent, 1000, MIDNIGHT) is None
    assert budget_exhausted(None, 1, NOON) is None


def test_budget_left_never_goes_negative() -> None:
    spent = DayTokens(day="2026-11-26", tokens=1200)
    assert budget_left(spent, 1000, NOON) == 0
    assert budget_left(spent, 5000, NOON) == 3800
    assert budget_left(spent, None, NOON) is None
    assert budget_left(None, 10, NOON) == 10
