"""The reviewer_agent acceptance check as a delegation: completing a gated item delegates a
review item to the reviewer, whose SubmitVerdict completes it and decides the check (passed: the
item is done with its report promoted; failed: it is open again), each delivery once."""

from __future__ import annotations

from typing import Any

import pytest

from shared.domain.acceptance import VerificationStatus
from shared.domain.delegation import DelegationStatus
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import MessageOrigin, WorkItemOutcome
from shared.wire import commands as c
from shared.wire.events import WorkItemCompleted
from tests.builders import make_plan_artifact
from tests.delegation_world import World


def gated(w: World, agent: str, reviewer: str) -> str:
    wid = w.new_id("wi_")
    w.apply(
        c.CreateWorkItem.model_validate(
            {
                "command_id": w.new_id("cmd_"),
                "agent_id": agent,
                "args": {
                    "objective": "Write the release note",
                    "acceptance": [{"kind": "reviewer_agent", "agent_id": reviewer}],
                },
                "work_item_id": wid,
                "plan_artifact": make_plan_artifact(agent_id=agent, item_id=wid),
            }
        )
    )
    return wid


def reviewed(passed: bool) -> tuple[World, str, Any]:
    w = World()
    w.add_agent("writer")
    w.add_agent("reviewer")
    wid = gated(w, "writer", "reviewer")
    w.complete("writer", wid, "Release 1.2: faster ledger")
    item = w.item("writer", wid)
    assert item.verification is not None
    assert item.verification.status is VerificationStatus.VERIFYING
    w.deliver_all()
    (review,) = w.delegated_items("reviewer")
    assert review.delegated_from is not None
    assert review.delegated_from.review_of is not None
    assert "Release 1.2: faster ledger" in review.objective
    verdict = {"work_item_id": review.id, "passed": passed, "reason": "clear and correct"}
    w.tool("reviewer", c.SubmitVerdict, verdict)
    w.outbox += list(w.outbox)  # every delivery twice
    w.deliver_all()
    return w, wid, review


def test_a_passing_review_completes_the_item_done_with_its_report() -> None:
    w, wid, review = reviewed(passed=True)
    item = w.item("writer", wid)
    assert item.outcome is WorkItemOutcome.DONE
    assert item.result_summary == "Release 1.2: faster ledger"
    assert w.item("reviewer", review.id).result_summary == "passed: clear and correct"
    (record,) = w.records["writer"].values()
    assert record.review
    assert record.status is DelegationStatus.SUCCEEDED
    assert not any(m.origin is MessageOrigin.TASK_RESULT for m in w.inbox.get("writer", []))


def test_a_verdict_completes_the_review_item_once_and_promotes_no_result_there() -> None:
    """The review item ends done like any completion (waits, focus, one event), but its report
    is the verdict, sent back to the reviewed item: no brief and no delivery summary of its own."""
    w, _, review = reviewed(passed=True)
    kinds = [e.message_type for e in w.events["reviewer"] if e.work_item_id == review.id]
    assert kinds.count("work_item_completed") == 1
    assert "brief_recorded" not in kinds
    assert "delivery_summary_recorded" not in kinds
    (completed,) = [e for e in w.events["reviewer"] if isinstance(e, WorkItemCompleted)]
    assert completed.report_promoted
    assert w.item("reviewer", review.id).outcome is WorkItemOutcome.DONE


def test_a_failing_review_opens_the_item_again_with_the_reason() -> None:
    w, wid, _ = reviewed(passed=False)
    item = w.item("writer", wid)
    assert item.is_open
    assert item.verification is not None
    assert item.verification.status is VerificationStatus.FAILED
    (message,) = [m for m in w.inbox["writer"] if m.origin is MessageOrigin.ACCEPTANCE]
    assert "clear and correct" in message.text


def test_submit_verdict_on_an_ordinary_item_is_refused() -> None:
    w = World()
    w.add_agent("solo")
    wid = w.create("solo")
    err = w.tool("solo", c.SubmitVerdict, {"work_item_id": wid, "passed": True, "reason": "ok"})
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.INVALID_TOOL_INPUT


@pytest.mark.parametrize("by_operator", [True])
def test_cancelling_a_verifying_item_cancels_its_review(by_operator: bool) -> None:
    w = World()
    w.add_agent("writer")
    w.add_agent("reviewer")
    wid = gated(w, "writer", "reviewer")
    w.complete("writer", wid, "draft")
    w.deliver_all()
    w.tool(
        "writer",
        c.CancelWorkItem,
        {"work_item_id": wid, "reason": "dropped"},
        by_operator=by_operator,
    )
    w.deliver_all()
    (review,) = w.delegated_items("reviewer")
    assert review.outcome is WorkItemOutcome.CANCELLED


def _under_review() -> tuple[World, str, Any]:
    w = World()
    w.add_agent("writer")
    w.add_agent("reviewer")
    wid = gated(w, "writer", "reviewer")
    w.complete("writer", wid, "Release 1.2: faster ledger")
    w.deliver_all()
    (review,) = w.delegated_items("reviewer")
    return w, wid, review


def test_a_review_item_is_decided_by_submit_verdict_not_completed() -> None:
    w, _, review = _under_review()
    err = w.complete("reviewer", review.id, "looks fine")
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.INVALID_TOOL_INPUT
    assert "SubmitVerdict" in (err.recovery_hint or "")
    assert w.item("reviewer", review.id).is_open


@pytest.mark.parametrize("by_operator", [False, True])
def test_a_review_cancelled_before_its_verdict_fails_the_check(by_operator: bool) -> None:
    """Fail-closed: the reviewed item does not verify for good; it is open again with why."""
    w, wid, review = _under_review()
    args = {"work_item_id": review.id, "reason": "not my area"}
    w.tool("reviewer", c.CancelWorkItem, args, by_operator=by_operator)
    w.outbox += list(w.outbox)  # every delivery twice
    w.deliver_all()
    item = w.item("writer", wid)
    assert item.is_open
    assert item.verification is not None
    assert item.verification.status is VerificationStatus.FAILED
    (check,) = item.verification.checks
    assert check.passed is False
    assert "was cancelled before a verdict" in (check.reason or "")
    (message,) = [m for m in w.inbox["writer"] if m.origin is MessageOrigin.ACCEPTANCE]
    assert review.id in message.text
