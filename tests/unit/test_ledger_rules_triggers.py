"""What triggers a wait: operator messages, task results and timers count a trigger and never
unblock; due rechecks are consumed once. Pure: `decide` at a fixed instant."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain.records import WaitingIntent, WorkItem
from shared.domain.stored import Evidence
from shared.wire import commands as c
from shared.wire.events import RecheckConsumed, WaitTriggered
from tests.builders import at, make_wait, make_work_item, wait_id
from tests.unit.ledger_kit import (
    ITEM,
    NOW,
    OTHER,
    chain,
    ledger_state,
    new_id,
    only,
    operator_message,
    run,
)

FIRST_WAIT, SECOND_WAIT = wait_id(1), wait_id(2)


def waiting(
    wid: str, wait: str, wake: str = "operator_input", **fields: str
) -> tuple[WorkItem, WaitingIntent]:
    """An item blocked by its one active wait."""
    item = make_work_item(id=wid, blocked_by="which region?", recheck_at=at(hours=2))
    return item, make_wait(id=wait, work_item_id=wid, wake=wake, reason="which region?", **fields)


def test_an_operator_message_triggers_the_single_operator_wait_without_unblocking() -> None:
    item, wait = waiting(ITEM, FIRST_WAIT)
    decision = run(ledger_state(item, waits=[wait]), operator_message())
    assert decision.result is not None
    assert decision.result["triggered_wait_id"] == wait.id
    after = decision.state.waits[wait.id]
    assert (after.is_active, after.trigger_count, after.last_triggered_at) == (True, 1, NOW)
    assert decision.state.items[ITEM] is item  # not revised: a trigger never unblocks
    assert [
        (e.wait_id, e.trigger_count, e.source) for e in only(decision.events, WaitTriggered)
    ] == [(wait.id, 1, "operator_message")]
    (message,) = decision.side.inbox_push
    assert (message.origin.value, message.text) == ("operator", "here is the answer")


ROUTES = {
    "two operator waits, no item named: none": (None, None),
    "two operator waits, an item named: its wait": (OTHER, SECOND_WAIT),
}


@pytest.mark.parametrize(("named", "triggered"), ROUTES.values(), ids=ROUTES.keys())
def test_an_operator_message_triggers_a_wait_only_when_it_is_unambiguous(
    named: str | None, triggered: str | None
) -> None:
    first, first_wait = waiting(ITEM, FIRST_WAIT)
    second, second_wait = waiting(OTHER, SECOND_WAIT)
    state = ledger_state(first, second, waits=[first_wait, second_wait])
    decision = run(state, operator_message(named))
    assert decision.result is not None
    assert decision.result["triggered_wait_id"] == triggered
    counts = {w.id: w.trigger_count for w in decision.state.active_waits()}
    assert counts == {w: int(w == triggered) for w in (FIRST_WAIT, SECOND_WAIT)}
    assert len(decision.side.inbox_push) == 1


def task_result(task_id: str, status: c.TaskStatus = c.TaskStatus.SUCCEEDED) -> c.RecordTaskResult:
    return c.RecordTaskResult(
        command_id=new_id("cmd_"),
        agent_id="agent-1",
        task_id=task_id,
        status=status,
        summary="green",
    )


def test_a_task_result_triggers_the_wait_for_that_task_and_keeps_evidence() -> None:
    build, build_wait = waiting(ITEM, FIRST_WAIT, "task_result", resource="task-7")
    lint, lint_wait = waiting(OTHER, SECOND_WAIT, "task_result", resource="task-8")
    decision = run(ledger_state(build, lint, waits=[build_wait, lint_wait]), task_result("task-7"))
    assert decision.result == {"wait_id": build_wait.id, "disposition": "triggered"}
    counts = {w.resource: w.trigger_count for w in decision.state.active_waits()}
    assert counts == {"task-7": 1, "task-8": 0}
    assert decision.state.items[ITEM].blocked_by == "which region?"
    (evidence,) = decision.side.evidence
    assert isinstance(evidence, Evidence)
    assert (evidence.origin, evidence.wait_id, evidence.work_item_id) == (
        "task_result",
        build_wait.id,
        ITEM,
    )
    assert evidence.body == "task task-7 succeeded: green"


def test_a_due_timer_triggers_its_active_wait() -> None:
    item, wait = waiting(ITEM, FIRST_WAIT, "timer", wake_at=at(minutes=30))
    fire = c.FireTimer(command_id="fire-1", agent_id="agent-1", wait_id=wait.id, due_at=NOW)
    decision = run(ledger_state(item, waits=[wait]), fire)
    assert decision.result == {"wait_id": wait.id, "fired": True}
    after = decision.state.waits[wait.id]
    assert (after.is_active, after.trigger_count) == (True, 1)
    assert decision.state.items[ITEM].blocked_by == "which region?"


def test_a_timer_whose_wait_was_replaced_fires_nothing() -> None:
    item, old = waiting(ITEM, FIRST_WAIT, "timer", wake_at=at(minutes=30))
    replacement = make_wait(id=SECOND_WAIT, work_item_id=ITEM, wake="operator_input")
    replaced = old.model_copy(update={"status": "cancelled", "cancelled_at": at(minutes=10)})
    state = ledger_state(item, waits=[replaced, replacement])
    fire = c.FireTimer(command_id="fire-1", agent_id="agent-1", wait_id=old.id, due_at=NOW)
    decision = run(state, fire)
    assert decision.result == {"wait_id": old.id, "fired": False}
    assert decision.events == ()
    assert decision.state is state


def test_a_due_recheck_is_consumed_once_and_a_later_one_is_left() -> None:
    due = make_work_item(id=ITEM, blocked_by="poll", recheck_at=NOW - timedelta(seconds=1))
    later = make_work_item(id=OTHER, blocked_by="poll", recheck_at=NOW + timedelta(minutes=5))
    consume = c.ConsumeRecheck(command_id="r-1", agent_id="agent-1", work_item_ids=(ITEM, OTHER))
    decision = run(ledger_state(due, later), consume)
    assert decision.result == {"consumed": [ITEM]}
    assert [e.work_item_ids for e in only(decision.events, RecheckConsumed)] == [(ITEM,)]
    assert decision.state.items[ITEM].recheck_consumed_at == NOW
    assert decision.state.items[ITEM].blocked_by == "poll"
    assert decision.state.items[OTHER].recheck_consumed_at is None
    again = consume.model_copy(update={"command_id": "r-2"})
    state, events = chain(decision.state.committed(), again, now=NOW + timedelta(seconds=1))
    assert events == []
    assert state.items[ITEM].recheck_consumed_at == NOW
