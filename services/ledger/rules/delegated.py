"""Ledger rules for the delegated agent's side of a delegation: the delegated WorkItem arrives
(`<dlg>:create`) or is cancelled by its delegator (`<dlg>:cancel`). See rules/delegations.py for
why each side decides only about its own agent."""

from __future__ import annotations

from services.ledger.rules.common import delegation_finished, fresh_input, view
from services.ledger.rules.outcomes import end_cancelled
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.delegation import (
    CANCELLED_MEMORY,
    DelegatedFrom,
    DelegationRecord,
    DelegationStatus,
)
from shared.domain.records import InboxMessage, MessageOrigin, WorkItem
from shared.wire import commands as c
from shared.wire.events import DelegationReceived, Event, WorkItemCreated


def in_record(item: WorkItem, status: DelegationStatus, ctx: Context) -> DelegationRecord:
    origin = item.delegated_from
    assert origin is not None
    finished = None if status is DelegationStatus.RUNNING else ctx.now
    return DelegationRecord(
        id=origin.delegation_id,
        parent_agent_id=origin.agent_id,
        parent_work_item_id=origin.work_item_id,
        child_agent_id=item.agent_id,
        child_work_item_id=item.id,
        status=status,
        report=item.result_summary if status is DelegationStatus.SUCCEEDED else None,
        objective=item.objective,
        reason=origin.reason or "delegated",
        depth=max(origin.depth, 1),
        created_at=item.created_at,
        finished_at=finished,
    )


def create_delegated_work_item(
    state: LedgerState, cmd: c.CreateDelegatedWorkItem, ctx: Context
) -> Decision:
    """Create the delegated WorkItem with its origin, and a message that wakes this agent with
    an `input` tick; a delegation reaching an agent is fresh input for it, except a review: a
    review item spends the reviewer's wake budget and never resets it, so a worker and its
    reviewer cannot keep each other turning without outside input."""
    agent = state.require_agent()
    origin = cmd.delegated_from
    if (
        cmd.work_item_id in state.items
        or cmd.work_item_id in state.archived_items  # created, finished and archived since
        or origin.delegation_id in agent.cancelled_delegations
    ):
        return Decision(state, result={"work_item_id": cmd.work_item_id, "created": False})
    item = WorkItem(
        id=cmd.work_item_id,
        agent_id=state.agent_id,
        revision=1,
        objective=cmd.objective,
        plan_status=cmd.plan_status,
        plan_artifact=cmd.plan_artifact,
        todo_list=cmd.todo_list,
        acceptance=cmd.acceptance,
        delegated_from=origin,
        created_at=ctx.now,
        updated_at=ctx.now,
    )
    state = state.with_item(item)
    record = in_record(item, DelegationStatus.RUNNING, ctx)
    message = _arrival(item, origin, ctx)
    if origin.review_of is not None:
        reset: list[Event] = []
        state = state.with_agent(state.require_agent().model_copy(update={"nudge_pending": True}))
    else:
        state, reset = fresh_input(state, "delegation")
    events: list[Event] = [
        WorkItemCreated(agent_id=state.agent_id, work_item_id=item.id, work_item=item),
        DelegationReceived(agent_id=state.agent_id, work_item_id=item.id, delegation=record),
        *reset,
    ]
    side = SideWrites(inbox_push=(message,), delegations=(record,))
    return Decision(state, tuple(events), {"work_item": view(state, item)}, side=side)


def _arrival(item: WorkItem, origin: DelegatedFrom, ctx: Context) -> InboxMessage:
    """The message that tells the agent what arrived, and how what it does goes back."""
    how = (
        "Review it and decide it with SubmitVerdict (passed and a reason): the verdict goes back."
        if origin.review_of is not None
        else "Pick it up, do it, and complete it with a report: the report goes back to the "
        "delegating agent."
    )
    return InboxMessage(
        id=f"msg_{origin.delegation_id}",
        agent_id=item.agent_id,
        origin=MessageOrigin.DELEGATION,
        text=(
            f"Agent {origin.agent_id} delegated WorkItem {item.id} to you ({origin.delegation_id})."
            f"\nObjective: {item.objective}\nWhy: {origin.reason}\n{how}"
        ),
        work_item_id=item.id,
        delegation_id=origin.delegation_id,
        created_at=ctx.now,
    )


def cancel_delegated_work_item(
    state: LedgerState, cmd: c.CancelDelegatedWorkItem, ctx: Context
) -> Decision:
    """The delegator cancelled: the WorkItem completes with outcome cancelled (what it delegated
    in turn is cancelled by `delegation_effects`); a cancel that overtook the creation leaves a
    mark so the creation, when it comes, creates nothing."""
    agent = state.require_agent()
    spawned = agent.spawned_by
    work_item_id = cmd.work_item_id
    if work_item_id is None and spawned is not None and spawned.delegation_id == cmd.delegation_id:
        work_item_id = spawned.bound_work_item_id
        if work_item_id is not None and work_item_id not in state.items:
            # Bound after the parent cancelled: cancel it by name (a load that reads it).
            again = cmd.model_copy(
                update={"command_id": f"{cmd.command_id}:bound", "work_item_id": work_item_id}
            )
            return Decision(state, result={"cancelled": False}, side=SideWrites(outbox=(again,)))
    item = state.items.get(work_item_id) if work_item_id is not None else None
    if item is None and work_item_id in state.archived_items:
        return Decision(state, result={"cancelled": False})  # finished and archived
    if item is None:
        memory = (*agent.cancelled_delegations, cmd.delegation_id)[-CANCELLED_MEMORY:]
        agent = agent.model_copy(update={"cancelled_delegations": memory})
        return Decision(state.with_agent(agent), result={"cancelled": False, "early": True})
    if not item.is_open or item.agent_id != state.agent_id:
        return Decision(state, result={"cancelled": False})
    done = end_cancelled(state, item, cmd.reason, "delegator", ctx)
    record = in_record(done.item, DelegationStatus.CANCELLED, ctx)
    finished = delegation_finished(state.agent_id, item.id, record, "cancelled_by_parent")
    side = SideWrites(delegations=(record,))
    events = (done.event, finished, *done.after)
    result = {"cancelled": True, "work_item": view(done.state, done.item)}
    return Decision(done.state, events, result, side=side)
