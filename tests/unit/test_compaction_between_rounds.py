"""Compaction between rounds, the pure parts: where a turn's rounds sit in its request, how many
of the oldest leave it, and how the prompt's positions move when a notes message is inserted."""

from __future__ import annotations

from typing import Any

from services.turn_executor.compaction import RoundSpan, leave, round_spans, to_compact
from services.turn_executor.guard import PromptParts
from services.turn_executor.turn import Turn
from shared.runtime import utc_now
from shared.wire.ticks import Tick


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


def test_rounds_that_leave_take_their_tool_answers_and_leave_operator_messages() -> None:
    tick = Tick(tick_id="t1", agent_id="agent-1", kind="continue_current", issued_at=utc_now())
    messages = [msg("system"), msg("user")]
    messages += [msg("assistant"), msg("tool"), {"role": "user", "content": "Operator message"}]
    messages += [msg("assistant"), msg("tool"), msg("assistant")]
    turn = Turn(tick, "turn_1", 1, None, messages, None, 0, {})  # type: ignore[arg-type]
    turn.parts = PromptParts(summary=1, rounds_start=2)
    for n in (1, 2, 3):
        turn.rounds = n
        turn.note("assistant", f"round {n}")
    spans = round_spans(turn.messages, 2, 1)
    leave(turn, spans[:2], "[rounds 1..2 left]")
    assert [m["content"] for m in turn.messages] == [
        "system",
        "user",
        "[rounds 1..2 left]",
        "Operator message",
        "assistant",
    ]
    assert turn.parts.first_round == 3
    assert [entry.round for _, entry in turn.own] == [3]
    assert round_spans(turn.messages, 2, turn.parts.first_round) == [RoundSpan(3, 4, 5)]
