"""Completion-report promotion binds a round's text to one focused completion; rounds are capped."""

from __future__ import annotations

from typing import Any

from services.turn_executor.promotion import (
    PromotionOutcome,
    RoundEnd,
    account_round,
    promotion,
    report_text_for,
    turn_ending_call,
)
from shared.domain.errors import (
    DomainError,
    ErrorKind,
    WarningKind,
    missing_completion_report_warning,
    unfinished_todos_warning,
)
from shared.domain.tools import ToolEnvelope
from tests.builders import work_item_id

FOCUSED = work_item_id(1)
OTHER = work_item_id(2)
REPORT = "  Shipped the release notes; links checked.  "


def completed(item_id: str, *warnings: Any) -> ToolEnvelope:
    result = {"work_item": {"id": item_id}, "completed_transition": {}, "report_promoted": True}
    return ToolEnvelope.success("CompleteWorkItem", result, warnings)


def failed(tool: str = "CompleteWorkItem") -> ToolEnvelope:
    return ToolEnvelope.failure(tool, DomainError(ErrorKind.WORK_ITEM_NOT_OPEN, "completed"))


def ok(tool: str) -> ToolEnvelope:
    return ToolEnvelope.success(tool, {})


def test_text_and_one_focused_completion_is_promoted() -> None:
    result = promotion(REPORT, [ok("UpdateWorkItem"), completed(FOCUSED)], FOCUSED)
    assert result.promoted
    assert result.outcome is PromotionOutcome.PROMOTED
    assert result.work_item_id == FOCUSED
    assert result.text == "Shipped the release notes; links checked."


def test_promoted_report_keeps_the_completion_warnings() -> None:
    warning = unfinished_todos_warning(["Publish"], [])
    result = promotion(REPORT, [completed(FOCUSED, warning)], FOCUSED)
    assert result.promoted
    assert result.warnings == (warning,)


def test_two_completions_in_a_round_promote_nothing() -> None:
    result = promotion(REPORT, [completed(FOCUSED), completed(OTHER)], FOCUSED)
    assert not result.promoted
    assert result.outcome is PromotionOutcome.MULTIPLE_COMPLETIONS
    assert result.text is None


def test_completion_without_text_warns_missing_completion_report() -> None:
    result = promotion(" \n\t", [completed(FOCUSED)], FOCUSED)
    assert not result.promoted
    assert result.outcome is PromotionOutcome.MISSING_REPORT
    assert [w.kind for w in result.warnings] == [WarningKind.MISSING_COMPLETION_REPORT]


def test_missing_report_warning_is_not_repeated_when_the_ledger_gave_it() -> None:
    result = promotion("", [completed(FOCUSED, missing_completion_report_warning())], FOCUSED)
    assert [w.kind for w in result.warnings] == [WarningKind.MISSING_COMPLETION_REPORT]


def test_completion_of_a_non_focused_item_is_not_promoted() -> None:
    result = promotion(REPORT, [completed(OTHER)], FOCUSED)
    assert not result.promoted
    assert result.outcome is PromotionOutcome.NOT_FOCUSED
    assert promotion(REPORT, [completed(OTHER)], None).outcome is PromotionOutcome.NOT_FOCUSED


def test_failed_completion_is_not_promoted() -> None:
    result = promotion(REPORT, [failed()], FOCUSED)
    assert not result.promoted
    assert result.outcome is PromotionOutcome.NO_COMPLETION


def test_one_success_beside_a_failed_completion_is_promoted() -> None:
    result = promotion(REPORT, [failed(), completed(FOCUSED)], FOCUSED)
    assert result.promoted


def test_text_without_a_completion_stays_process_trace() -> None:
    result = promotion(REPORT, [ok("UpdateWorkItem")], FOCUSED)
    assert result.outcome is PromotionOutcome.NO_COMPLETION
    assert result.warnings == ()


def test_report_text_is_offered_for_one_focused_completion_call() -> None:
    calls = [
        ("UpdateWorkItem", {"work_item_id": FOCUSED}),
        ("CompleteWorkItem", {"work_item_id": FOCUSED}),
    ]
    assert report_text_for(REPORT, calls, FOCUSED) == REPORT.strip()


def test_report_text_is_withheld_when_the_round_is_ambiguous() -> None:
    one = [("CompleteWorkItem", {"work_item_id": FOCUSED})]
    two = [*one, ("CompleteWorkItem", {"work_item_id": OTHER})]
    assert report_text_for(REPORT, two, FOCUSED) is None
    assert report_text_for("   ", one, FOCUSED) is None
    assert report_text_for(REPORT, one, OTHER) is None
    assert report_text_for(REPORT, one, None) is None
    assert report_text_for(REPORT, [("CompleteWorkItem", {})], FOCUSED) is None


def test_turn_ending_call_is_the_first_wait_or_completion() -> None:
    assert turn_ending_call(["GetWorkItem", "WaitFor", "CompleteWorkItem"]) == "WaitFor"
    assert turn_ending_call(["ReadFile", "UpdateWorkItem"]) is None


def test_successful_wait_ends_the_turn() -> None:
    account = account_round([ok("UpdateWorkItem"), ok("WaitFor")], 1, max_rounds=16)
    assert account.ends_turn
    assert (account.end, account.ending_tool) == (RoundEnd.TOOL, "WaitFor")


def test_rejected_wait_does_not_end_the_turn() -> None:
    account = account_round([failed("WaitFor")], 1, max_rounds=16)
    assert account.end is RoundEnd.CONTINUE
    assert not account.ends_turn


def test_round_without_tool_calls_ends_the_turn() -> None:
    assert account_round([], 3, max_rounds=16).end is RoundEnd.NO_TOOL_CALLS


def test_round_cap_ends_the_turn() -> None:
    assert account_round([ok("ReadFile")], 4, max_rounds=5).end is RoundEnd.CONTINUE
    capped = account_round([ok("ReadFile")], 5, max_rounds=5)
    assert (capped.end, capped.rounds_used) == (RoundEnd.ROUND_CAP, 5)


def test_turn_ending_tool_wins_over_the_cap() -> None:
    account = account_round([completed(FOCUSED)], 5, max_rounds=5)
    assert (account.end, account.ending_tool) == (RoundEnd.TOOL, "CompleteWorkItem")
