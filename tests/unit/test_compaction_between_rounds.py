"""Compaction between rounds, the pure parts: where a turn's rounds sit in its request, how many
of the oldest leave it, and how the prompt's positions move when a notes message is inserted."""

from __future__ import annotations

from typing import Any

from services.turn_executor.compaction import RoundSpan, round_spans, to_compact
from services.turn_executor.guard import PromptParts


def msg(role: str) -> dict[str, Any]:
    return {"role": role, "content": role}


def test_a_round_is_its_assistant_message_and_the_tool_answers_after_it() -> None:
    opening = [msg("system"), msg("user"), msg("user")]
    rounds = [msg("assistant"), msg("tool"), msg("tool"), msg("user"), msg("assistant")]
    rounds += [msg("tool"), msg("assistant")]
    spans = round_spans([*opening, *rounds], start=3, first_round=4)
    # The operator's message between rounds 4 and 5 belongs to neither.
    assert spans == [RoundSpan(4, 3, 6), RoundSpan(5, 7, 9), RoundSpan(6, 9, 10)]


def test_nothing_leaves_while_the_rounds_fit() -> None:
    assert to_compact([100, 100, 100], cap=300, bound=[True] * 3) == 0


def test_the_oldest_rounds_leave_until_half_the_cap_is_left_never_the_newest() -> None:
    assert to_compact([100, 100, 100, 100], cap=350, bound=[True] * 4) == 3
    assert to_compact([400, 400], cap=100, bound=[True, True]) == 1
    assert to_compact([400], cap=100, bound=[True]) == 0


def test_a_round_bound_to_another_work_item_stops_the_compaction() -> None:
    assert to_compact([100, 100, 100, 100], cap=150, bound=[True, False, True, True]) == 1
    assert to_compact([100, 100, 100], cap=150, bound=[False, True, True]) == 0


def test_inserting_a_message_moves_the_positions_after_it() -> None:
    parts = PromptParts(summary=1, trace=2, evidence={3: "e"}, rounds_start=5)
    parts.inserted(2)
    assert (parts.summary, parts.trace, parts.evidence, parts.rounds_start) == (1, 3, {4: "e"}, 6)
