"""Every reason a WorkItem can give for not running, derived from the scheduler's snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.policy import AgentSnapshot, decide
from shared.domain.records import AgentState, WaitingIntent, WakeBudget, WorkItem
from shared.domain.why import ReasonKind, why_not_running
from tests.builders import at, make_agent, make_wait, make_work_item, wait_id, work_item_id

NOW = at(hours=2)


def item(n: int, **fields: Any) -> WorkItem:
    return make_work_item(id=work_item_id(n), **fields)


def blocked(n: int, text: str = "Waiting on the vendor", **fields: Any) -> WorkItem:
    return item(n, blocked_by=text, **fields)


def wait(n: int, on: int, wake: str = "external", **fields: Any) -> WaitingIntent:
    return make_wait(id=wait_id(n), work_item_id=work_item_id(on), wake=wake, **fields)


def agent(current: int | None = None, used: int = 0, **fields: Any) -> AgentState:
    focus = work_item_id(current) if current is not None else None
    return make_agent(current_work_item_id=focus, wake_budget=WakeBudget(used=used), **fields)


def snapshot(
    items: tuple[WorkItem, ...],
    waits: tuple[WaitingIntent, ...] = (),
    state: AgentState | None = None,
    **fields: Any,
) -> AgentSnapshot:
    return AgentSnapshot(agent=state or agent(), work_items=items, waits=waits, **fields)


def test_completed_item_says_completed_with_its_report() -> None:
    done = item(1, state="completed", result_summary="Shipped the notes.")
    reason = why_not_running(done, snapshot((done,), state=agent(), turn_running=True), NOW)
    assert reason.kind is ReasonKind.COMPLETED
    assert reason.text == "Shipped the notes."


@pytest.mark.parametrize(
    "work_item",
    [pytest.param(item(1), id="runnable"), pytest.param(blocked(1), id="inspection-focus")],
)
def test_current_item_of_a_running_turn_is_running(work_item: WorkItem) -> None:
    snap = snapshot((work_item,), state=agent(current=1), turn_running=True)
    assert why_not_running(work_item, snap, NOW).kind is ReasonKind.RUNNING


def test_running_turn_does_not_make_other_items_running() -> None:
    current, queued = item(1), item(2)
    snap = snapshot((current, queued), state=agent(current=1), turn_running=True)
    reason = why_not_running(queued, snap, NOW)
    assert reason.kind is ReasonKind.QUEUED
    assert reason.rank == 1


def test_current_runnable_with_outstanding_tick_is_tick_pending() -> None:
    current = item(1)
    snap = snapshot((current,), state=agent(current=1), outstanding_tick_id="t-7")
    reason = why_not_running(current, snap, NOW)
    assert reason.kind is ReasonKind.TICK_PENDING
    assert reason.tick_id == "t-7"


def test_current_runnable_about_to_be_ticked_is_tick_pending() -> None:
    current = item(1)
    snap = snapshot((current,), state=agent(current=1))
    reason = why_not_running(current, snap, NOW)
    tick = decide(snap, NOW).tick
    assert tick is not None
    assert reason.kind is ReasonKind.TICK_PENDING
    assert reason.tick_id == tick.tick_id


WAITING_CASES = [
    pytest.param("operator_input", ReasonKind.WAITING_OPERATOR, id="operator"),
    pytest.param("task_result", ReasonKind.WAITING_TASK, id="task"),
    pytest.param("external", ReasonKind.WAITING_EXTERNAL, id="external"),
    pytest.param("timer", ReasonKind.WAITING_TIMER, id="timer"),
    pytest.param("system", ReasonKind.WAITING_SYSTEM, id="system"),
]


@pytest.mark.parametrize(("wake", "kind"), WAITING_CASES)
def test_waiting_item_names_its_wait(wake: str, kind: ReasonKind) -> None:
    waiting = blocked(1)
    intent = wait(1, 1, wake=wake, wake_at=at(hours=5) if wake == "timer" else None)
    reason = why_not_running(waiting, snapshot((waiting,), (intent,)), NOW)
    assert reason.kind is kind
    assert reason.wait == intent


def test_needs_input_with_an_operator_wait_is_waiting_operator() -> None:
    asking = blocked(1, plan_status="needs_input")
    intent = wait(1, 1, wake="operator_input")
    reason = why_not_running(asking, snapshot((asking,), (intent,)), NOW)
    assert reason.kind is ReasonKind.WAITING_OPERATOR
    assert reason.wait == intent


def test_needs_input_without_a_wait_is_needs_input() -> None:
    asking = item(1, plan_status="needs_input")
    assert why_not_running(asking, snapshot((asking,)), NOW).kind is ReasonKind.NEEDS_INPUT


def test_cancelled_wait_leaves_the_item_blocked_with_its_text() -> None:
    stuck = blocked(1, "Vendor has not answered")
    gone = wait(1, 1, status="cancelled", cancelled_at=at(hours=1))
    reason = why_not_running(stuck, snapshot((stuck,), (gone,)), NOW)
    assert reason.kind is ReasonKind.BLOCKED
    assert reason.text == "Vendor has not answered"


@pytest.mark.parametrize(
    ("items", "current"),
    [
        pytest.param((item(1),), 1, id="current-runnable"),
        pytest.param((item(1),), None, id="queued-without-current"),
        pytest.param((blocked(2), item(1)), 2, id="queued-past-inspection-focus"),
    ],
)
def test_spent_budget_is_the_reason(items: tuple[WorkItem, ...], current: int | None) -> None:
    snap = snapshot(items, state=agent(current=current, used=25))
    reason = why_not_running(item(1), snap, NOW)
    assert reason.kind is ReasonKind.WAKE_BUDGET_EXHAUSTED
    assert reason.budget == WakeBudget(used=25, limit=25)


def test_queued_behind_a_parked_current_item_is_still_queued() -> None:
    snap = snapshot((item(1), item(2)), state=agent(current=1, used=25))
    assert why_not_running(item(2), snap, NOW).kind is ReasonKind.QUEUED


def test_queued_item_gives_its_rank_among_queued_items() -> None:
    items = (
        item(1),
        item(2, updated_at=at(minutes=30)),
        item(3, updated_at=at(minutes=10)),
        item(4, updated_at=at(minutes=20)),
    )
    snap = snapshot(items, state=agent(current=1))
    ranks = {n: why_not_running(items[n - 1], snap, NOW).rank for n in (2, 3, 4)}
    assert ranks == {3: 1, 4: 2, 2: 3}


def test_stopped_agent_says_stopped() -> None:
    current = item(1)
    snap = snapshot((current,), state=agent(current=1, posture="stopped"))
    assert why_not_running(current, snap, NOW).kind is ReasonKind.STOPPED
