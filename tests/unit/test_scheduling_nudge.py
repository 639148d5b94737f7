"""A delegation result is a nudge: it wakes the delegating agent while its wake budget lasts
and starts no turn once the budget is spent (fresh input clears the nudge and resets it)."""

from __future__ import annotations

from shared.domain.records import Posture, WakeBudget
from shared.domain.scheduling import AgentSnapshot, Hold, decide
from shared.domain.wake import TickKind
from tests.builders import at, make_agent, make_wait, make_work_item

NOW = at(minutes=10)


def snapshot(*, used: int, nudge: bool) -> AgentSnapshot:
    item = make_work_item(blocked_by="waiting for worker")
    wait = make_wait(
        wake="task_result",
        resource="dlg_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        trigger_count=1,
        last_triggered_at=at(minutes=9),
    )
    return AgentSnapshot(
        agent=make_agent(wake_budget=WakeBudget(used=used, limit=3)),
        work_items=(item,),
        waits=(wait,),
        inbox=1,
        nudge_pending=nudge,
    )


def test_a_result_wakes_while_the_budget_lasts() -> None:
    decision = decide(snapshot(used=2, nudge=True), NOW)
    assert decision.kind is TickKind.INPUT


def test_a_result_with_the_budget_spent_starts_no_turn_and_parks_idle() -> None:
    decision = decide(snapshot(used=3, nudge=True), NOW)
    assert decision.tick is None
    assert decision.hold is Hold.WAKE_BUDGET_EXHAUSTED
    assert decision.posture is Posture.IDLE
    assert decision.report_budget_exhausted


def test_fresh_input_behind_a_spent_budget_still_wakes() -> None:
    """Fresh input clears the nudge (and resets the budget in the ledger); with no nudge left a
    pending message wakes the agent as before."""
    decision = decide(snapshot(used=3, nudge=False), NOW)
    assert decision.kind is TickKind.INPUT
