"""Outcomes: CompleteWorkItem ends an item `done`, CancelWorkItem ends it `cancelled` with its
waits cancelled, focus released and nothing promoted; items stored before outcomes read `done`."""

from __future__ import annotations

from typing import Any

import pytest

from services.ledger.rules import Context, LedgerState, decide
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import WaitStatus, WorkItem, WorkItemOutcome, WorkItemState
from shared.domain.stored import AgentRecord
from shared.wire.commands import CancelWorkItem, CompleteWorkItem
from tests.builders import AGENT_ID, at, make_agent, make_wait, make_work_item, wait_id
from tests.builders import work_item_id as wid

NOW = at(minutes=5)
WI = wid(1)
OTHER = wid(2)


def ids(prefix: str) -> str:
    return prefix + "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def state_with(*, current: str | None = WI, item: WorkItem | None = None) -> LedgerState:
    items = {WI: item or make_work_item(id=WI), OTHER: make_work_item(id=OTHER)}
    agent = AgentRecord(
        state=make_agent(current_work_item_id=current),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    wait = make_wait(id=wait_id(1), work_item_id=WI)
    return LedgerState(agent_id=AGENT_ID, agent=agent, items=items, waits={wait.id: wait})


def cancel(work_item_id: str = WI, *, by_operator: bool = False) -> CancelWorkItem:
    return CancelWorkItem.model_validate(
        {
            "command_id": "c1",
            "agent_id": AGENT_ID,
            "args": {"work_item_id": work_item_id, "reason": "The customer withdrew the ask"},
            "by_operator": by_operator,
        }
    )


def complete() -> CompleteWorkItem:
    return CompleteWorkItem.model_validate(
        {
            "command_id": "c1",
            "agent_id": AGENT_ID,
            "args": {"work_item_id": WI},
            "report_text": "ok",
        }
    )


def run(state: LedgerState, cmd: Any) -> Any:
    return decide(state, cmd, Context(now=NOW, new_id=ids))


@pytest.mark.parametrize(
    ("cmd", "outcome", "promoted"),
    [(complete(), WorkItemOutcome.DONE, True), (cancel(), WorkItemOutcome.CANCELLED, False)],
)
def test_completion_sets_the_outcome(cmd: Any, outcome: WorkItemOutcome, promoted: bool) -> None:
    decision = run(state_with(), cmd)
    item = decision.state.items[WI]
    assert (item.state, item.outcome) == (WorkItemState.COMPLETED, outcome)
    assert decision.result["work_item"]["outcome"] == outcome.value
    assert bool(decision.side.briefs) is promoted
    assert bool(decision.side.summaries) is promoted


@pytest.mark.parametrize(
    ("by_operator", "by"), [(False, "agent"), (True, "operator")], ids=["agent", "operator"]
)
def test_cancel_ends_waits_and_focus_and_says_who(by_operator: bool, by: str) -> None:
    decision = run(state_with(), cancel(by_operator=by_operator))
    kinds = [e.message_type for e in decision.events]
    assert kinds[0] == "work_item_cancelled"
    assert {"wait_cancelled", "work_item_focus_released"} <= set(kinds)
    assert decision.events[0].cancelled_by == by
    assert decision.events[0].reason == "The customer withdrew the ask"
    assert decision.state.current_id is None
    assert decision.state.waits[wait_id(1)].status is WaitStatus.CANCELLED
    assert decision.state.items[WI].result_summary is None
    assert decision.result["cancelled_transition"]["was_current"] is True


def test_cancelling_another_item_keeps_focus() -> None:
    decision = run(state_with(current=OTHER), cancel())
    assert decision.state.current_id == OTHER
    assert "work_item_focus_released" not in [e.message_type for e in decision.events]


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        (wid(9), ErrorKind.WORK_ITEM_NOT_FOUND),
        (WI, ErrorKind.WORK_ITEM_NOT_OPEN),
    ],
)
def test_cancel_needs_an_open_item(target: str, kind: ErrorKind) -> None:
    done = make_work_item(id=WI, state="completed")
    with pytest.raises(DomainError) as caught:
        run(state_with(item=done), cancel(target))
    assert caught.value.kind is kind


@pytest.mark.parametrize(
    ("stored", "outcome"),
    [
        ({"state": "open"}, None),
        ({"state": "completed"}, WorkItemOutcome.DONE),
        ({"state": "completed", "outcome": "cancelled"}, WorkItemOutcome.CANCELLED),
    ],
)
def test_stored_items_read_their_outcome(stored: dict[str, str], outcome: Any) -> None:
    raw = make_work_item(id=WI).model_dump(mode="json", exclude={"outcome"}) | stored
    assert WorkItem.model_validate(raw).outcome is outcome
