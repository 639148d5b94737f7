"""Ledger rule for ending a WorkItem without doing it: cancel (docs/contract.md, cancel)."""

from __future__ import annotations

from dataclasses import dataclass

from services.ledger.rules.attempts import refuse_while_held
from services.ledger.rules.common import cancel_waits, release_focus, revise, view
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.records import WorkItem, WorkItemOutcome, WorkItemState
from shared.wire.commands import CancelWorkItem
from shared.wire.events import CancelledBy, Event, WorkItemCancelled


@dataclass(frozen=True, slots=True)
class Cancelled:
    """An open item ended as cancelled: the state after, the item, the `work_item_cancelled`
    event, and what followed it (its waits cancelled, focus released)."""

    state: LedgerState
    item: WorkItem
    event: WorkItemCancelled
    after: tuple[Event, ...]
    was_current: bool
    focus_released: bool


def end_cancelled(
    state: LedgerState, before: WorkItem, reason: str, cancelled_by: CancelledBy, ctx: Context
) -> Cancelled:
    """Complete the item with outcome cancelled: its waits end and focus leaves it, and no
    result is promoted because nothing was delivered. Whoever cancels (the agent, the
    operator, the delegator) ends it the same way."""
    item = revise(
        before,
        ctx.now,
        state=WorkItemState.COMPLETED,
        outcome=WorkItemOutcome.CANCELLED,
        blocked_by=None,
        recheck_at=None,
        recheck_consumed_at=None,
    )
    state = state.with_item(item)
    state, waits = cancel_waits(state, item.id, ctx.now, "work_item_cancelled")
    was_current = state.current_id == item.id
    state, released = release_focus(state, item.id, "work_item_cancelled")
    event = WorkItemCancelled(
        agent_id=state.agent_id,
        work_item_id=item.id,
        work_item=item,
        reason=reason,
        cancelled_by=cancelled_by,
    )
    return Cancelled(state, item, event, (*waits, *released), was_current, bool(released))


def cancel_work_item(state: LedgerState, cmd: CancelWorkItem, ctx: Context) -> Decision:
    """The agent's CancelWorkItem, or the operator's cancel."""
    state.require_agent()
    before = state.open_item(cmd.args.work_item_id)
    refuse_while_held(before, "CancelWorkItem", by_operator=cmd.by_operator)
    by: CancelledBy = "operator" if cmd.by_operator else "agent"
    done = end_cancelled(state, before, cmd.args.reason, by, ctx)
    result = {
        "work_item": view(done.state, done.item),
        "cancelled_transition": {
            "previous_state": WorkItemState.OPEN.value,
            "was_current": done.was_current,
            "focus_released": done.focus_released,
        },
    }
    return Decision(done.state, (done.event, *done.after), result)
