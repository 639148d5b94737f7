"""Final refusals: every command the ledger must reject, and the kind of error it names. A
refused decision raises, so it returns no state to write. Pure: `decide` on a built state."""

from __future__ import annotations

import pytest

from shared.domain.errors import ErrorKind
from shared.domain.records import WorkItemState
from shared.domain.stored import CapabilityRecord
from shared.wire import commands as c
from tests.builders import AGENT_ID, make_wait, make_work_item, wait_id, work_item_id
from tests.unit.ledger_kit import (
    ITEM,
    OTHER,
    begin_turn,
    callback,
    finish_turn,
    ledger_state,
    refusal,
    tool,
)

DONE = make_work_item(id=ITEM, state=WorkItemState.COMPLETED, result_summary="Done.")
UNKNOWN = work_item_id(99)

ON_A_COMPLETED_ITEM = {
    "PickWorkItem": tool("PickWorkItem", work_item_id=ITEM),
    "UpdateWorkItem": tool("UpdateWorkItem", work_item_id=ITEM, objective="more"),
    "WaitFor": tool("WaitFor", work_item_id=ITEM, reason="too late", wake="system"),
    "CompleteWorkItem": tool("CompleteWorkItem", work_item_id=ITEM, report_text="Done again."),
}


@pytest.mark.parametrize("command", ON_A_COMPLETED_ITEM.values(), ids=ON_A_COMPLETED_ITEM.keys())
def test_a_write_to_a_completed_item_is_work_item_not_open(command: c.Command) -> None:
    assert refusal(ledger_state(DONE), command) is ErrorKind.WORK_ITEM_NOT_OPEN


@pytest.mark.parametrize(
    "command",
    [
        tool("PickWorkItem", work_item_id=UNKNOWN),
        tool("UpdateWorkItem", work_item_id=UNKNOWN, objective="x"),
        tool("CompleteWorkItem", work_item_id=UNKNOWN),
    ],
    ids=["PickWorkItem", "UpdateWorkItem", "CompleteWorkItem"],
)
def test_an_unknown_item_is_work_item_not_found(command: c.Command) -> None:
    assert refusal(ledger_state(make_work_item(id=ITEM)), command) is ErrorKind.WORK_ITEM_NOT_FOUND


def test_another_agents_item_is_work_item_access_denied() -> None:
    state = ledger_state(foreign_items=frozenset({OTHER}))
    pick = tool("PickWorkItem", work_item_id=OTHER)
    assert refusal(state, pick) is ErrorKind.WORK_ITEM_ACCESS_DENIED


def test_a_task_result_nobody_waits_for_is_wait_not_found() -> None:
    wait = make_wait(work_item_id=ITEM, wake="task_result", resource="task-7")
    state = ledger_state(make_work_item(id=ITEM, blocked_by="build"), waits=[wait])
    result = c.RecordTaskResult(
        command_id="t-1",
        agent_id=AGENT_ID,
        task_id="task-unknown",
        status=c.TaskStatus.FAILED,
        summary="?",
    )
    assert refusal(state, result) is ErrorKind.WAIT_NOT_FOUND


@pytest.mark.parametrize(
    "capability",
    [
        None,
        CapabilityRecord(token_id="cap-1", agent_id=AGENT_ID, wait_id=wait_id(7)),
        CapabilityRecord(token_id="cap-2", agent_id="agent-2", wait_id=None),
    ],
    ids=["unknown token", "its wait was cancelled", "another agent's token"],
)
def test_a_callback_whose_token_triggers_nothing_is_access_denied(
    capability: CapabilityRecord | None,
) -> None:
    state = ledger_state(make_work_item(id=ITEM), capability=capability)
    assert refusal(state, callback()) is ErrorKind.ACCESS_DENIED


SUPERSEDED = {
    "UpdateWorkItem": tool("UpdateWorkItem", work_item_id=ITEM, blocked_by="late", fencing_token=1),
    "CompleteWorkItem": tool(
        "CompleteWorkItem", work_item_id=ITEM, report_text="x", fencing_token=1
    ),
    "BeginTurn": begin_turn("turn-old", 1),
    "FinishTurn": finish_turn("turn-1", c.TurnOutcome.YIELDED, 1),
}


@pytest.mark.parametrize("command", SUPERSEDED.values(), ids=SUPERSEDED.keys())
def test_a_superseded_fencing_token_is_stale_turn(command: c.Command) -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=2)
    assert refusal(state, command) is ErrorKind.STALE_TURN
