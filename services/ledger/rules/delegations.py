"""Ledger rules for delegation between agents (docs/contract.md, delegation).

A delegation touches two agents that may live in different partitions, and no atomic step spans
two partitions. So each side decides only about its own agent, and what the other side must
learn leaves as a command in this commit's outbox (`SideWrites.outbox`), with an id derived from
the delegation id: `<dlg>:create` to the child, `<dlg>:result` back to the parent, `<dlg>:cancel`
down to the child. Each rule below is also idempotent by state, so a re-sent command whose
idempotency record has expired still changes nothing.
"""

from __future__ import annotations

from datetime import timedelta

from services.ledger.rules.acceptance import refuse_webhooks_not_allowed
from services.ledger.rules.common import (
    delegation_finished,
    release_focus,
    revise,
    view,
    wait_json,
    with_running,
)
from services.ledger.rules.reviews import refuse_unknown_reviewers
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.acceptance import AcceptanceCheck, SetBy
from shared.domain.delegation import (
    ChainRefusal,
    DelegatedFrom,
    DelegationRecord,
    DelegationStatus,
    DelegationStep,
    chain_refusal,
    new_chain,
    step_command_id,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import (
    InboxMessage,
    MessageOrigin,
    TodoItem,
    WaitingIntent,
    WaitStatus,
    WakeKind,
    WorkItem,
)
from shared.wire import commands as c
from shared.wire.events import (
    DeadlineScheduled,
    DelegationCreated,
    Event,
    WaitCancelled,
    WaitCreated,
    WaitTriggered,
    WorkItemUpdated,
)

# ---------------------------------------------------------------- the delegating side


def _refuse(state: LedgerState, cmd: c.DelegateWorkItem, ctx: Context, item: WorkItem) -> None:
    to_agent = cmd.args.to_agent
    chain = new_chain(item.delegated_from, state.agent_id)
    refusal = chain_refusal(chain, to_agent, ctx.max_delegation_depth)
    if refusal is ChainRefusal.CYCLE:
        raise DomainError(
            ErrorKind.DELEGATION_CYCLE,
            f"{to_agent!r} already delegates in this chain ({' -> '.join(chain)})",
            details={"chain": list(chain)},
        )
    if to_agent not in state.agents_found:
        raise DomainError(ErrorKind.AGENT_NOT_FOUND, f"no agent {to_agent!r} in this deployment")
    if refusal is ChainRefusal.TOO_DEEP:
        raise DomainError(
            ErrorKind.DELEGATION_TOO_DEEP,
            f"a delegation from here would be {len(chain)} hops from the root WorkItem; "
            f"the limit is {ctx.max_delegation_depth}",
            details={"depth": len(chain), "limit": ctx.max_delegation_depth},
        )


def _child_checks(state: LedgerState, cmd: c.DelegateWorkItem) -> tuple[AcceptanceCheck, ...]:
    """The delegator's checks as the child WorkItem carries them: its agent cannot remove them."""
    by = SetBy.OPERATOR if cmd.by_operator else SetBy.DELEGATOR
    checks = tuple(a.to_check().model_copy(update={"set_by": by}) for a in cmd.args.acceptance)
    refuse_unknown_reviewers(state, cmd.args.to_agent, checks)
    return checks


def _current(state: LedgerState) -> WorkItem:
    state.require_agent()
    current = state.current_id
    if current is None:
        raise DomainError(
            ErrorKind.NO_CURRENT_WORK_ITEM, "DelegateWorkItem waits on the current WorkItem"
        )
    return state.open_item(current)


def _waiting(
    state: LedgerState, item: WorkItem, record: DelegationRecord, ctx: Context
) -> tuple[LedgerState, WaitingIntent, list[Event]]:
    """The item waits for the delegation: a `task_result` wait, the reason as its blocker, focus
    released."""
    wait = WaitingIntent(
        id=ctx.new_id("wait_"),
        agent_id=state.agent_id,
        work_item_id=item.id,
        wake=WakeKind.TASK_RESULT,
        reason=record.reason,
        resource=record.id,
        created_at=ctx.now,
    )
    changes = {"blocked_by": record.reason, "recheck_at": None, "recheck_consumed_at": None}
    item = revise(item, ctx.now, **changes)
    state = state.with_agent(with_running(state.require_agent(), record))
    state, released = release_focus(state.with_wait(wait).with_item(item), item.id, "waiting")
    agent_id = state.agent_id
    events: list[Event] = [
        DelegationCreated(agent_id=agent_id, work_item_id=item.id, delegation=record),
        WaitCreated(agent_id=agent_id, work_item_id=item.id, wait=wait),
        WorkItemUpdated(
            agent_id=agent_id, work_item_id=item.id, work_item=item, changed=tuple(changes)
        ),
        *released,
    ]
    return state, wait, events


def _create(
    cmd: c.DelegateWorkItem, record: DelegationRecord, origin: DelegatedFrom, state: LedgerState
) -> c.CreateDelegatedWorkItem:
    """`<dlg>:create`, the command that gives the child its WorkItem."""
    args = cmd.args
    return c.CreateDelegatedWorkItem(
        command_id=step_command_id(record.id, DelegationStep.CREATE),
        agent_id=args.to_agent,
        work_item_id=cmd.child_work_item_id,
        plan_artifact=cmd.child_plan_artifact,
        objective=args.objective,
        todo_list=tuple(TodoItem(text=t.text, state=t.state) for t in args.todo_list),
        acceptance=_child_checks(state, cmd),
        delegated_from=origin,
    )


def delegate_work_item(state: LedgerState, cmd: c.DelegateWorkItem, ctx: Context) -> Decision:
    """Record the delegation and wait for it on the current WorkItem (focus released, as WaitFor
    does); the child's WorkItem is created by the `<dlg>:create` command this leaves in the
    outbox. Unlike WaitFor, the wait replaces no other wait: one item may await several
    delegations at once."""
    item = _current(state)
    _refuse(state, cmd, ctx, item)
    args = cmd.args
    chain = new_chain(item.delegated_from, state.agent_id)
    record = DelegationRecord(
        id=cmd.delegation_id,
        parent_agent_id=state.agent_id,
        parent_work_item_id=item.id,
        child_agent_id=args.to_agent,
        child_work_item_id=cmd.child_work_item_id,
        objective=args.objective,
        reason=args.reason,
        depth=len(chain),
        created_at=ctx.now,
        deadline_at=None
        if args.deadline_s is None
        else ctx.now + timedelta(seconds=args.deadline_s),
    )
    origin = DelegatedFrom(
        delegation_id=record.id,
        agent_id=state.agent_id,
        work_item_id=item.id,
        reason=args.reason,
        chain=chain,
    )
    create = _create(cmd, record, origin, state)
    refuse_webhooks_not_allowed(create.acceptance, ctx)
    state, wait, events = _waiting(state, item, record, ctx)
    if record.deadline_at is not None:
        events.append(
            DeadlineScheduled(
                agent_id=state.agent_id,
                work_item_id=item.id,
                target="delegation",
                target_id=record.id,
                due_at=record.deadline_at,
            )
        )
    side = SideWrites(delegations=(record,), outbox=(create,))
    result = {
        "delegation": record.model_dump(mode="json"),
        "wait": wait_json(wait),
        "work_item": view(state, state.items[item.id]),
    }
    return Decision(state, tuple(events), result, side=side)


def _waits_for(state: LedgerState, delegation_id: str) -> list[WaitingIntent]:
    return [
        w
        for w in state.active_waits()
        if w.wake is WakeKind.TASK_RESULT and w.resource == delegation_id
    ]


def stop_child(
    state: LedgerState,
    record: DelegationRecord,
    reason: str,
    ctx: Context,
    cause: str,
) -> tuple[LedgerState, list[Event], DelegationRecord, c.Command]:
    """End one running delegation as cancelled on this side: its wait is cancelled without a
    trigger, and `<dlg>:cancel` tells the child."""
    final = record.model_copy(update={"status": DelegationStatus.CANCELLED, "finished_at": ctx.now})
    state = state.with_agent(with_running(state.require_agent(), final))
    events: list[Event] = [
        delegation_finished(state.agent_id, record.parent_work_item_id, final, cause)
    ]
    for wait in _waits_for(state, record.id):
        done = wait.model_copy(update={"status": WaitStatus.CANCELLED, "cancelled_at": ctx.now})
        state = state.with_wait(done)
        events.append(
            WaitCancelled(
                agent_id=state.agent_id,
                work_item_id=wait.work_item_id,
                wait_id=wait.id,
                cause="delegation_cancelled",
            )
        )
    cancel = c.CancelDelegatedWorkItem(
        command_id=step_command_id(record.id, DelegationStep.CANCEL),
        agent_id=record.child_agent_id,
        delegation_id=record.id,
        work_item_id=record.child_work_item_id,
        reason=reason,
    )
    return state, events, final, cancel


def cancel_delegation(state: LedgerState, cmd: c.CancelDelegation, ctx: Context) -> Decision:
    """The parent asked: nothing triggers and no message arrives for it."""
    delegation_id = cmd.args.delegation_id
    record = state.require_agent().delegations_out.get(delegation_id)
    if record is None:
        raise DomainError(
            ErrorKind.DELEGATION_NOT_FOUND,
            f"{delegation_id!r} is not a running delegation of this agent",
        )
    state, events, final, cancel = stop_child(
        state, record, cmd.args.reason, ctx, "cancelled_by_parent"
    )
    side = SideWrites(delegations=(final,), outbox=(cancel,))
    return Decision(state, tuple(events), {"delegation": final.model_dump(mode="json")}, side=side)


def record_delegation_result(
    state: LedgerState, cmd: c.RecordDelegationResult, ctx: Context
) -> Decision:
    """The child's WorkItem ended: the delegation ends, its wait is triggered once and one
    `task_result` message lands in the inbox. A nudge, not fresh input: the wake budget is not
    reset, and the turn it wakes spends it. A review's outcome is its verdict (RecordVerdict):
    its result triggers nothing and leaves no message."""
    agent = state.require_agent()
    record = agent.delegations_out.get(cmd.delegation_id)
    if record is None:
        return Decision(state, result={"delegation_id": cmd.delegation_id, "recorded": False})
    final = record.model_copy(
        update={
            "status": cmd.status,
            "report": cmd.report,
            "finished_at": ctx.now,
            "child_work_item_id": record.child_work_item_id or cmd.child_work_item_id,
        }
    )
    result = {"delegation_id": record.id, "recorded": True, "status": final.status.value}
    agent = with_running(agent, final)
    cause = "review_done" if record.review else "child_result"
    events: list[Event] = [
        delegation_finished(state.agent_id, record.parent_work_item_id, final, cause)
    ]
    if record.review:
        side = SideWrites(delegations=(final,))
        return Decision(state.with_agent(agent), tuple(events), result, side=side)
    state = state.with_agent(agent.model_copy(update={"nudge_pending": True}))
    for wait in _waits_for(state, record.id)[:1]:
        triggered = wait.model_copy(
            update={"trigger_count": wait.trigger_count + 1, "last_triggered_at": ctx.now}
        )
        state = state.with_wait(triggered)
        events.append(
            WaitTriggered(
                agent_id=state.agent_id,
                work_item_id=wait.work_item_id,
                wait_id=wait.id,
                trigger_count=triggered.trigger_count,
                source="task_result",
            )
        )
    side = SideWrites(inbox_push=(_result_message(state, final, ctx),), delegations=(final,))
    return Decision(state, tuple(events), result, side=side)


def _result_message(state: LedgerState, record: DelegationRecord, ctx: Context) -> InboxMessage:
    item = f" ({record.child_work_item_id})" if record.child_work_item_id else ""
    head = f"Delegation {record.id} to {record.child_agent_id}{item} {record.status.value}."
    return InboxMessage(
        id=f"msg_{record.id}",
        agent_id=state.agent_id,
        origin=MessageOrigin.TASK_RESULT,
        text=f"{head}\nReport:\n{record.report}" if record.report else head,
        work_item_id=record.parent_work_item_id,
        delegation_id=record.id,
        status=record.status.value,
        report=record.report,
        created_at=ctx.now,
    )
