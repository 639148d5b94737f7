"""Ledger rule for the operator taking focus off an agent's current WorkItem (put down)."""

from __future__ import annotations

from services.ledger.rules.common import view
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.errors import DomainError, ErrorKind
from shared.wire.commands import PutDownWorkItem
from shared.wire.events import WorkItemFocusReleased


def put_down_work_item(state: LedgerState, cmd: PutDownWorkItem, ctx: Context) -> Decision:
    """Release focus from the named item, which must be the current one: naming it guards
    against putting down an item the agent has switched to since the operator looked. The item
    itself is not written (its revision stays), and nothing is picked in its place."""
    agent = state.require_agent()
    item = state.open_item(cmd.work_item_id)
    current = state.current_id
    if current != item.id:
        raise DomainError(
            ErrorKind.NO_CURRENT_WORK_ITEM,
            f"{item.id} is not the current WorkItem of {state.agent_id} "
            f"(current: {current or 'none'}); there is nothing to put down",
            recovery_hint="Read the agent's current WorkItem again before putting one down.",
        )
    new_state = agent.state.model_copy(update={"current_work_item_id": None})
    state = state.with_agent(agent.model_copy(update={"state": new_state}))
    released = WorkItemFocusReleased(
        agent_id=state.agent_id, work_item_id=item.id, cause="put_down", reason=cmd.reason
    )
    return Decision(state=state, events=(released,), result={"work_item": view(state, item)})
