"""Usage summed per UTC day (pure): a turn's counters become its day's hash fields and back, and
a range over the rows is split into whole days and the days a bound cuts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.domain.usage import (
    TurnUsage,
    Usage,
    UsageRecord,
    day_increments,
    is_midnight,
    last_seq_field,
    usage_days,
    usage_plan,
)


def _turn(at: datetime, calls: int = 1, model: str = "openai/m|x") -> UsageRecord:
    usage = TurnUsage()
    for _ in range(calls):
        usage = usage.plus_call(
            model, Usage(input_tokens=10, cached_input_tokens=2, output_tokens=3)
        )
    return UsageRecord(turn_id="t", at=at, usage=usage)


def _fold(records: list[tuple[UsageRecord, int]]) -> dict[str, int]:
    fields: dict[str, int] = {}
    for record, seq in records:
        for field, amount in day_increments(record):
            fields[field] = fields.get(field, 0) + amount
        fields[last_seq_field(record)] = seq
    return fields


def test_a_days_fields_sum_its_turns_by_model_even_with_a_bar_in_the_models_name() -> None:
    day = datetime(2026, 11, 28, 23, 59, tzinfo=UTC)
    rows = usage_days(
        _fold(
            [
                (_turn(day, 2), 5),
                (_turn(day, 1, "anthropic/c"), 9),
                (_turn(day + timedelta(minutes=2)), 12),
            ]
        )
    )
    assert [(r.day, r.turns, r.model_calls, r.last_seq) for r in rows] == [
        ("2026-11-28", 2, 3, 9),
        ("2026-11-29", 1, 1, 12),
    ]
    first = rows[0]
    assert (first.input_tokens, first.cached_input_tokens, first.output_tokens) == (30, 6, 9)
    assert first.by_model["openai/m|x"].model_calls == 2
    assert first.by_model["anthropic/c"].input_tokens == 10


def test_a_range_is_whole_days_plus_the_days_its_bounds_cut() -> None:
    base = datetime(2026, 11, 1, 12, tzinfo=UTC)
    rows = usage_days(_fold([(_turn(base + timedelta(days=d)), 10 * (d + 1)) for d in range(5)]))
    midnight = datetime(2026, 11, 2, tzinfo=UTC)
    whole, partial = usage_plan(rows, midnight, midnight + timedelta(days=2))
    assert ([r.day for r in whole], partial) == (["2026-11-02", "2026-11-03"], [])
    whole, partial = usage_plan(rows, midnight + timedelta(hours=6), None)
    assert [r.day for r in whole] == ["2026-11-03", "2026-11-04", "2026-11-05"]
    assert [(p.day, p.after_seq, p.upto_seq, p.until) for p in partial] == [
        ("2026-11-02", 10, 20, midnight + timedelta(days=1))
    ]
    inside = usage_plan(rows, midnight + timedelta(hours=1), midnight + timedelta(hours=2))
    assert inside[0] == []
    assert [(p.day, p.since) for p in inside[1]] == [("2026-11-02", midnight + timedelta(hours=1))]
    assert is_midnight(datetime.fromisoformat("2026-11-02T01:00:00+01:00"))
    assert not is_midnight(midnight + timedelta(microseconds=1))
