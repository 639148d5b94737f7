"""PutDownWorkItem: the operator takes focus off the agent's current WorkItem; the item itself
is not written, and an item that is not current (or is completed) is refused."""

from __future__ import annotations

from typing import Any

import pytest

from services.ledger.rules import Context, LedgerState, decide
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import WorkItemOutcome, WorkItemState
from shared.domain.stored import AgentRecord
from shared.wire.commands import PutDownWorkItem
from shared.wire.events import WorkItemFocusReleased
from tests.builders import AGENT_ID, at, make_agent, make_work_item
from tests.builders import work_item_id as wid

NOW = at(minutes=5)
WI = wid(1)
OTHER = wid(2)


def state_with(current: str | None, **item: Any) -> LedgerState:
    items = {WI: make_work_item(id=WI, **item), OTHER: make_work_item(id=OTHER)}
    agent = AgentRecord(
        state=make_agent(current_work_item_id=current),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    return LedgerState(agent_id=AGENT_ID, agent=agent, items=items, waits={})


def put_down(work_item_id: str = WI) -> PutDownWorkItem:
    return PutDownWorkItem(
        command_id="c1", agent_id=AGENT_ID, work_item_id=work_item_id, reason="operator: org edit"
    )


def run(state: LedgerState) -> Any:
    return decide(state, put_down(), Context(now=NOW, new_id=lambda p: p + "x"))


def test_put_down_releases_focus_and_leaves_the_item_unwritten() -> None:
    before = state_with(WI)
    decision = run(before)
    assert decision.state.current_id is None
    assert decision.state.items[WI] == before.items[WI]
    (event,) = decision.events
    assert isinstance(event, WorkItemFocusReleased)
    assert (event.work_item_id, event.cause, event.reason) == (WI, "put_down", "operator: org edit")
    assert decision.result["work_item"]["is_current"] is False


@pytest.mark.parametrize("current", [None, OTHER], ids=["no current", "another current"])
def test_put_down_of_an_item_that_is_not_current_is_refused(current: str | None) -> None:
    with pytest.raises(DomainError) as refused:
        run(state_with(current))
    assert refused.value.kind is ErrorKind.NO_CURRENT_WORK_ITEM
    assert WI in str(refused.value)


def test_put_down_of_a_completed_item_is_refused() -> None:
    finished = state_with(None, state=WorkItemState.COMPLETED, outcome=WorkItemOutcome.CANCELLED)
    with pytest.raises(DomainError) as refused:
        run(finished)
    assert refused.value.kind is ErrorKind.WORK_ITEM_NOT_OPEN
