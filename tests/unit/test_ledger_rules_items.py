"""WorkItem writes: UpdateWorkItem's blocker, recheck, todo and revision rules, and
CompleteWorkItem's report, warnings and clean-up. Pure: `decide` at a fixed instant."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain.records import WaitStatus
from shared.wire.events import (
    TimerScheduled,
    WaitCancelled,
    WorkItemCompleted,
)
from tests.builders import at, make_todo, make_wait, make_work_item
from tests.unit.ledger_kit import (
    ITEM,
    NOW,
    chain,
    ledger_state,
    only,
    readiness_of,
    run,
    tool,
    warning_kinds,
)


@pytest.mark.parametrize(
    ("recheck_after_ms", "delay"),
    [(None, timedelta(hours=1)), (90_000, timedelta(seconds=90))],
    ids=["default one hour", "recheck_after_ms"],
)
def test_a_blocker_schedules_a_recheck(recheck_after_ms: int | None, delay: timedelta) -> None:
    extra = {"recheck_after_ms": recheck_after_ms} if recheck_after_ms else {}
    update = tool("UpdateWorkItem", work_item_id=ITEM, blocked_by="waiting on vendor", **extra)
    decision = run(ledger_state(make_work_item(id=ITEM)), update)
    item = decision.state.items[ITEM]
    assert (item.blocked_by, item.recheck_at, item.recheck_consumed_at) == (
        "waiting on vendor",
        NOW + delay,
        None,
    )
    assert [e.due_at for e in only(decision.events, TimerScheduled)] == [NOW + delay]


def test_clearing_a_blocker_clears_the_recheck_and_cancels_active_waits() -> None:
    item = make_work_item(id=ITEM, blocked_by="build running", recheck_at=at(hours=2))
    wait = make_wait(work_item_id=ITEM, wake="system", reason="build running")
    update = tool("UpdateWorkItem", work_item_id=ITEM, blocked_by=None)
    decision = run(ledger_state(item, waits=[wait]), update)
    after = decision.state.items[ITEM]
    assert (after.blocked_by, after.recheck_at, after.recheck_consumed_at) == (None, None, None)
    assert decision.state.active_waits() == []
    assert decision.state.waits[wait.id].status is WaitStatus.CANCELLED
    assert [(e.wait_id, e.cause) for e in only(decision.events, WaitCancelled)] == [
        (wait.id, "blocker_cleared")
    ]
    assert readiness_of(decision.state, ITEM) == "runnable"
    assert decision.result is not None
    assert decision.result["work_item"]["active_waits"] == []


def test_a_todo_list_replaces_the_whole_list() -> None:
    item = make_work_item(id=ITEM, todo_list=[make_todo("a"), make_todo("b"), make_todo("c")])
    todos = [{"text": "b", "state": "completed"}, {"text": "d", "state": "in_progress"}]
    decision = run(ledger_state(item), tool("UpdateWorkItem", work_item_id=ITEM, todo_list=todos))
    assert decision.result is not None
    view = decision.result["work_item"]
    assert view["todo_list"] == todos
    assert view["current_todo"] == {"text": "d", "state": "in_progress"}


def test_every_write_moves_the_revision_by_one_and_stamps_updated_at() -> None:
    state = ledger_state(make_work_item(id=ITEM))
    revisions = []
    for minute, objective in enumerate(("one", "two", "three"), start=1):
        when = NOW + timedelta(minutes=minute)
        update = tool("UpdateWorkItem", work_item_id=ITEM, objective=objective)
        state, _ = chain(state, update, now=when)
        revisions.append((state.items[ITEM].revision, state.items[ITEM].updated_at))
    assert revisions == [(n + 1, NOW + timedelta(minutes=n)) for n in (1, 2, 3)]
    state, _ = chain(state, tool("WaitFor", work_item_id=ITEM, reason="wait", wake="system"))
    assert state.items[ITEM].revision == 5


# ---------------------------------------------------------------- completion

REPORTS = {
    "a report is promoted": ("  Report sent.  ", "Report sent.", "completed_recent"),
    "a blank report promotes nothing": (" \n\t ", None, "completed"),
    "no report promotes nothing": (None, None, "completed"),
}


@pytest.mark.parametrize(("text", "promoted", "candidate"), REPORTS.values(), ids=REPORTS.keys())
def test_a_completion_report_is_promoted_once_when_there_is_one(
    text: str | None, promoted: str | None, candidate: str
) -> None:
    complete = tool("CompleteWorkItem", work_item_id=ITEM, report_text=text, turn_id="turn-1")
    decision = run(ledger_state(make_work_item(id=ITEM)), complete)
    assert decision.result is not None
    assert decision.result["report_promoted"] is (promoted is not None)
    view = decision.result["work_item"]
    assert (view["state"], view["result_summary"], view["candidate_class"]) == (
        "completed",
        promoted,
        candidate,
    )
    side = decision.side
    if promoted is None:
        assert warning_kinds(decision) == ["missing_completion_report"]
        assert (side.briefs, side.summaries) == ((), ())
        return
    assert decision.warnings == ()
    assert [(b.kind.value, b.text, b.turn_id) for b in side.briefs] == [
        ("result", promoted, "turn-1")
    ]
    assert [s.text for s in side.summaries] == [promoted]


@pytest.mark.parametrize(
    ("todos", "counts", "sample"),
    [
        (
            [("done", "completed"), ("p1", "pending"), ("p2", "pending"), ("ip", "in_progress")],
            (2, 1),
            {"p1", "p2", "ip"},
        ),
        ([(f"todo {n}", "pending") for n in range(8)], (8, 0), {f"todo {n}" for n in range(5)}),
    ],
    ids=["counted by state", "sample holds at most five"],
)
def test_completing_with_unfinished_todos_warns_and_records_counts(
    todos: list[tuple[str, str]], counts: tuple[int, int], sample: set[str]
) -> None:
    item = make_work_item(id=ITEM, todo_list=[make_todo(text, s) for text, s in todos])
    complete = tool("CompleteWorkItem", work_item_id=ITEM, report_text="Partly done.")
    decision = run(ledger_state(item), complete)
    (warning,) = decision.warnings
    assert warning.kind.value == "unfinished_todos"
    assert (warning.pending_count, warning.in_progress_count) == counts
    assert warning.sample is not None
    assert set(warning.sample) == sample
    assert len(warning.sample) == len(sample)
    (completed,) = only(decision.events, WorkItemCompleted)
    assert completed.completed_with_unfinished_todos is True
    assert completed.unfinished_todo_count == sum(counts)
    assert (completed.pending_todo_count, completed.in_progress_todo_count) == counts


def test_completion_cancels_waits_and_clears_the_blocker_and_recheck() -> None:
    item = make_work_item(
        id=ITEM, blocked_by="hook", recheck_at=at(hours=2), recheck_consumed_at=at(minutes=30)
    )
    wait = make_wait(work_item_id=ITEM, wake="external", reason="hook")
    complete = tool("CompleteWorkItem", work_item_id=ITEM, report_text="Resolved another way.")
    decision = run(ledger_state(item, waits=[wait]), complete)
    after = decision.state.items[ITEM]
    assert (after.blocked_by, after.recheck_at, after.recheck_consumed_at) == (None, None, None)
    assert decision.state.active_waits() == []
    assert [(e.wait_id, e.cause) for e in only(decision.events, WaitCancelled)] == [
        (wait.id, "work_item_completed")
    ]
    (completed,) = only(decision.events, WorkItemCompleted)
    assert completed.completed_with_unfinished_todos is False
