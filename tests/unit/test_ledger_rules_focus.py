"""Focus rules: what PickWorkItem reports and records, and which writes release the current
WorkItem. Pure: `decide` on a built state at a fixed instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from shared.domain.records import WaitStatus, WorkItem
from shared.wire import commands as c
from shared.wire.events import WaitCancelled, WorkItemFocusReleased, WorkItemPicked
from tests.builders import at, make_wait, make_work_item
from tests.unit.ledger_kit import (
    ITEM,
    NOW,
    OTHER,
    chain,
    create,
    kinds,
    ledger_state,
    only,
    readiness_of,
    run,
    tool,
    warning_kinds,
)


def blocked(wid: str, blocker: str = "vendor has not replied") -> WorkItem:
    return make_work_item(id=wid, blocked_by=blocker, recheck_at=at(hours=2))


@pytest.mark.parametrize("current", [None, ITEM])
def test_create_work_item_never_changes_focus(current: str | None) -> None:
    decision = run(ledger_state(make_work_item(id=ITEM), current=current), create(2))
    assert decision.state.current_id == current
    assert decision.result is not None
    assert decision.result["work_item"]["is_current"] is False
    assert kinds(decision.events) == ["work_item_created"]


@dataclass(frozen=True)
class Pick:
    """A board, the item picked (with `args`), and what the transition must say."""

    items: tuple[WorkItem, ...]
    current: str | None
    target: str
    switch_kind: str
    focus_mode: str
    current_readiness: str
    previous_readiness: str | None
    reason_required: bool = False
    reason_missing: bool = False
    args: tuple[tuple[str, Any], ...] = ()


PICKS = {
    "first pick is initial": Pick(
        (make_work_item(id=ITEM),), None, ITEM, "initial", "runnable", "runnable", None
    ),
    "the current item again is same": Pick(
        (make_work_item(id=ITEM),), ITEM, ITEM, "same", "runnable", "runnable", "runnable"
    ),
    "a blocked item is focused for inspection only": Pick(
        (blocked(ITEM),), None, ITEM, "initial", "inspection", "blocked", None
    ),
    "switching from runnable focus without a reason": Pick(
        (make_work_item(id=ITEM), make_work_item(id=OTHER)),
        ITEM,
        OTHER,
        "switch",
        "runnable",
        "runnable",
        "runnable",
        reason_required=True,
        reason_missing=True,
    ),
    "switching from runnable focus with a reason": Pick(
        (make_work_item(id=ITEM), make_work_item(id=OTHER)),
        ITEM,
        OTHER,
        "switch",
        "runnable",
        "runnable",
        "runnable",
        reason_required=True,
        args=(("reason", "the operator asked"),),
    ),
    "switching from inspection focus needs no reason": Pick(
        (blocked(ITEM), make_work_item(id=OTHER)),
        ITEM,
        OTHER,
        "switch",
        "runnable",
        "runnable",
        "blocked",
    ),
}


@pytest.mark.parametrize("case", PICKS.values(), ids=PICKS.keys())
def test_pick_reports_and_records_the_transition(case: Pick) -> None:
    args = dict(case.args)
    state = ledger_state(*case.items, current=case.current)
    decision = run(state, tool("PickWorkItem", work_item_id=case.target, **args))
    assert decision.state.current_id == case.target
    assert decision.result is not None
    transition = decision.result["transition"]
    assert transition["switch_kind"] == case.switch_kind
    assert transition["focus_mode"] == case.focus_mode
    assert transition["current_readiness"] == case.current_readiness
    assert transition["previous_readiness"] == case.previous_readiness
    assert transition["reason"] == args.get("reason")
    assert transition["blocker_cleared"] is False
    assert decision.result["current_work_item"]["is_current"] is True
    switched = case.switch_kind == "switch"
    assert ("previous_work_item" in decision.result) is switched
    if switched:
        assert decision.result["previous_work_item"]["id"] == case.current
    (picked,) = only(decision.events, WorkItemPicked)
    assert (picked.work_item_id, picked.previous_work_item_id) == (case.target, case.current)
    assert (picked.reason_required, picked.reason_missing) == (
        case.reason_required,
        case.reason_missing,
    )
    assert picked.reason == args.get("reason")
    missing = ["missing_pick_reason_for_runnable_focus_switch"] if case.reason_missing else []
    assert warning_kinds(decision) == missing


def test_pick_with_clear_blocker_clears_blocker_recheck_and_waits() -> None:
    item = blocked(ITEM, "need sign-off")
    wait = make_wait(work_item_id=ITEM, wake="operator_input", reason="need sign-off")
    pick = tool("PickWorkItem", work_item_id=ITEM, clear_blocker=True, reason="signed by phone")
    decision = run(ledger_state(item, waits=[wait]), pick)
    assert decision.result is not None
    assert decision.result["transition"]["blocker_cleared"] is True
    assert decision.result["transition"]["focus_mode"] == "runnable"
    after = decision.state.items[ITEM]
    assert (after.blocked_by, after.recheck_at, after.recheck_consumed_at) == (None, None, None)
    assert readiness_of(decision.state, ITEM) == "runnable"
    assert decision.result["current_work_item"]["active_waits"] == []
    cancelled = decision.state.waits[wait.id]
    assert (cancelled.status, cancelled.cancelled_at) == (WaitStatus.CANCELLED, NOW)
    assert [(e.wait_id, e.cause) for e in only(decision.events, WaitCancelled)] == [
        (wait.id, "blocker_cleared")
    ]
    assert only(decision.events, WorkItemPicked)[0].blocker_cleared is True


# ---------------------------------------------------------------- focus release

RELEASES = {
    "a blocker": (tool("UpdateWorkItem", work_item_id=ITEM, blocked_by="vendor"), "blocked"),
    "needs_input": (
        tool("UpdateWorkItem", work_item_id=ITEM, plan_status="needs_input"),
        "waiting_for_operator",
    ),
    "a wait on the current item": (
        tool("WaitFor", reason="ask the operator", wake="operator_input"),
        "waiting_for_operator",
    ),
    "completion": (
        tool("CompleteWorkItem", work_item_id=ITEM, report_text="Shipped."),
        "completed",
    ),
}


@pytest.mark.parametrize(("command", "readiness"), RELEASES.values(), ids=RELEASES.keys())
def test_a_write_that_parks_the_current_item_releases_focus_in_the_same_decision(
    command: c.Command, readiness: str
) -> None:
    decision = run(ledger_state(make_work_item(id=ITEM), current=ITEM), command)
    assert decision.state.current_id is None
    assert [e.work_item_id for e in only(decision.events, WorkItemFocusReleased)] == [ITEM]
    assert readiness_of(decision.state, ITEM) == readiness
    assert decision.result is not None
    assert decision.result["work_item"]["is_current"] is False


def test_completing_the_current_item_says_focus_was_released() -> None:
    complete = tool("CompleteWorkItem", work_item_id=ITEM, report_text="Shipped.")
    decision = run(ledger_state(make_work_item(id=ITEM), current=ITEM), complete)
    assert decision.result is not None
    assert decision.result["completed_transition"] == {
        "previous_state": "open",
        "was_current": True,
        "focus_released": True,
    }


@pytest.mark.parametrize(
    "args",
    [{"objective": "sharper"}, {"todo_list": [{"text": "a"}]}, {"plan_status": "ready"}],
    ids=["objective", "todo_list", "plan_status"],
)
def test_an_update_that_leaves_the_item_runnable_keeps_focus(args: dict[str, Any]) -> None:
    update = tool("UpdateWorkItem", work_item_id=ITEM, **args)
    decision = run(ledger_state(make_work_item(id=ITEM), current=ITEM), update)
    assert decision.state.current_id == ITEM
    assert only(decision.events, WorkItemFocusReleased) == []


def test_clearing_a_blocker_never_repicks_the_item() -> None:
    state, _ = chain(
        ledger_state(make_work_item(id=ITEM), current=ITEM),
        tool("UpdateWorkItem", work_item_id=ITEM, blocked_by="waiting on vendor"),
    )
    assert state.current_id is None
    decision = run(state, tool("UpdateWorkItem", work_item_id=ITEM, blocked_by=None))
    assert decision.state.current_id is None
    assert decision.result is not None
    assert decision.result["work_item"]["readiness"] == "runnable"
    assert decision.result["work_item"]["is_current"] is False
    assert only(decision.events, WorkItemPicked) == []
