"""Ledger rules for delegation between agents (docs/contract.md, delegation).

A delegation touches two agents that may live in different partitions, and no atomic step spans
two partitions. So each side decides only about its own agent, and what the other side must
learn leaves as a command in this commit's outbox (`SideWrites.outbox`), with an id derived from
the delegation id: `<dlg>:create` to the child, `<dlg>:result` back to the parent, `<dlg>:cancel`
down to the child. Each rule below is also idempotent by state, so a re-sent command whose
idempotency record has expired still changes nothing.
"""

from __future__ import annotations

from services.ledger.rules.common import release_focus, revise, view, wait_json
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
from shared.domain.stored import AgentRecord
from shared.wire import commands as c
from shared.wire.events import (
    DelegationCreated,
    DelegationFinished,
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


def _with_running(agent: AgentRecord, record: DelegationRecord) -> AgentRecord:
    running = dict(agent.delegations_out)
    if record.running:
        running[record.id] = record
    else:
        running.pop(record.id, None)
    return agent.model_copy(update={"delegations_out": running})


def delegate_work_item(state: LedgerState, cmd: c.DelegateWorkItem, ctx: Context) -> Decision:
    """Record the delegation and wait for it on the current WorkItem (focus released, as WaitFor
    does); the child's WorkItem is created by the `<dlg>:create` command this leaves in the
    outbox. Unlike WaitFor, the wait replaces no other wait: one item may await several
    delegations at once."""
    agent = state.require_agent()
    current = state.current_id
    if current is None:
        raise DomainError(
            ErrorKind.NO_CURRENT_WORK_ITEM, "DelegateWorkItem waits on the current WorkItem"
        )
    item = state.open_item(current)
    _refuse(state, cmd, ctx, item)
    checks = _child_checks(state, cmd)
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
    )
    wait = WaitingIntent(
        id=ctx.new_id("wait_"),
        agent_id=state.agent_id,
        work_item_id=item.id,
        wake=WakeKind.TASK_RESULT,
        reason=args.reason,
        resource=record.id,
        created_at=ctx.now,
    )
    state = state.with_agent(_with_running(agent, record)).with_wait(wait)
    changes = {"blocked_by": args.reason, "recheck_at": None, "recheck_consumed_at": None}
    item = revise(item, ctx.now, **changes)
    state = state.with_item(item)
    state, released = release_focus(state, item.id, "waiting")
    events: list[Event] = [
        DelegationCreated(agent_id=state.agent_id, work_item_id=item.id, delegation=record),
        WaitCreated(agent_id=state.agent_id, work_item_id=item.id, wait=wait),
        WorkItemUpdated(
            agent_id=state.agent_id, work_item_id=item.id, work_item=item, changed=tuple(changes)
        ),
        *released,
    ]
    create = c.CreateDelegatedWorkItem(
        command_id=step_command_id(record.id, DelegationStep.CREATE),
        agent_id=args.to_agent,
        work_item_id=cmd.child_work_item_id,
        plan_artifact=cmd.child_plan_artifact,
        objective=args.objective,
        todo_list=tuple(TodoItem(text=t.text, state=t.state) for t in args.todo_list),
        acceptance=checks,
        delegated_from=DelegatedFrom(
            delegation_id=record.id,
            agent_id=state.agent_id,
            work_item_id=item.id,
            reason=args.reason,
            chain=chain,
        ),
    )
    side = SideWrites(delegations=(record,), outbox=(create,))
    result = {
        "delegation": record.model_dump(mode="json"),
        "wait": wait_json(wait),
        "work_item": view(state, item),
    }
    return Decision(state, tuple(events), result, side=side)


def _running(state: LedgerState, delegation_id: str) -> DelegationRecord:
    found = state.require_agent().delegations_out.get(delegation_id)
    if found is None:
        raise DomainError(
            ErrorKind.DELEGATION_NOT_FOUND,
            f"{delegation_id!r} is not a running delegation of this agent",
        )
    return found


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
    state = state.with_agent(_with_running(state.require_agent(), final))
    events: list[Event] = [
        DelegationFinished(
            agent_id=state.agent_id,
            work_item_id=record.parent_work_item_id,
            delegation_id=record.id,
            status=final.status,
            cause=cause,
        )
    ]
    for wait in state.active_waits():
        if wait.wake is WakeKind.TASK_RESULT and wait.resource == record.id:
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
    record = _running(state, cmd.args.delegation_id)
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
    reset, and the turn it wakes spends it."""
    agent = state.require_agent()
    record = agent.delegations_out.get(cmd.delegation_id)
    if record is None:
        return Decision(state, result={"delegation_id": cmd.delegation_id, "recorded": False})
    final = record.model_copy(
        update={"status": cmd.status, "report": cmd.report, "finished_at": ctx.now}
    )
    if record.review:
        # A review's outcome is its verdict (RecordVerdict): no wait, no message, no nudge.
        state = state.with_agent(_with_running(agent, final))
        finished = DelegationFinished(
            agent_id=state.agent_id,
            work_item_id=record.parent_work_item_id,
            delegation_id=record.id,
            status=final.status,
            report=final.report,
            cause="review_done",
        )
        side = SideWrites(delegations=(final,))
        result = {"delegation_id": record.id, "recorded": True, "status": final.status.value}
        return Decision(state, (finished,), result, side=side)
    agent = _with_running(agent, final).model_copy(update={"nudge_pending": True})
    state = state.with_agent(agent)
    events: list[Event] = [
        DelegationFinished(
            agent_id=state.agent_id,
            work_item_id=record.parent_work_item_id,
            delegation_id=record.id,
            status=final.status,
            report=final.report,
            cause="child_result",
        )
    ]
    wait = next(
        (
            w
            for w in state.active_waits()
            if w.wake is WakeKind.TASK_RESULT and w.resource == record.id
        ),
        None,
    )
    if wait is not None:
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
    message = InboxMessage(
        id=f"msg_{record.id}",
        agent_id=state.agent_id,
        origin=MessageOrigin.TASK_RESULT,
        text=_result_text(final),
        work_item_id=record.parent_work_item_id,
        delegation_id=record.id,
        status=final.status.value,
        report=final.report,
        created_at=ctx.now,
    )
    side = SideWrites(inbox_push=(message,), delegations=(final,))
    result = {"delegation_id": record.id, "recorded": True, "status": final.status.value}
    return Decision(state, tuple(events), result, side=side)


def _result_text(record: DelegationRecord) -> str:
    head = (
        f"Delegation {record.id} to {record.child_agent_id} ({record.child_work_item_id}) "
        f"{record.status.value}."
    )
    return f"{head}\nReport:\n{record.report}" if record.report else head
