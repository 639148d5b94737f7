"""Ledger rule for ending a WorkItem without doing it: cancel (docs/contract.md, cancel)."""

from __future__ import annotations

from services.ledger.rules.common import cancel_waits, release_focus, revise, view
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.records import WorkItemOutcome, WorkItemState
from shared.wire.commands import CancelWorkItem
from shared.wire.events import WorkItemCancelled


def cancel_work_item(state: LedgerState, cmd: CancelWorkItem, ctx: Context) -> Decision:
    """Complete the item with outcome cancelled: its waits end and focus leaves it, and no
    result is promoted because nothing was delivered."""
    state.require_agent()
    before = state.open_item(cmd.args.work_item_id)
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
    cancelled = WorkItemCancelled(
        agent_id=state.agent_id,
        work_item_id=item.id,
        work_item=item,
        reason=cmd.args.reason,
        cancelled_by="operator" if cmd.by_operator else "agent",
    )
    result = {
        "work_item": view(state, item),
        "cancelled_transition": {
            "previous_state": WorkItemState.OPEN.value,
            "was_current": was_current,
            "focus_released": bool(released),
        },
    }
    return Decision(state, (cancelled, *waits, *released), result)
