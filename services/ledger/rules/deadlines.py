"""Ledger rules for deadlines: a wait's (WaitFor `deadline_s`), a delegation's
(DelegateWorkItem `deadline_s`) and an awaited verdict's (an operator_approval or reviewer_agent
check's `deadline_s`, default LONGRUN_CHECK_DEADLINE_S, from the attempt's start: the check
fails with reason `deadline`, and so the attempt). Setting one records its instant and a
`deadline_scheduled` event, from which the scheduler arms a durable timer (its sorted set and
fired stream, as for WaitFor timers); the timer fires `ExpireDeadline` with an id derived from
the target and the due instant, so a timer delivered twice expires once.

Never early: the rule compares the record's own deadline with the ledger's clock and, when the
scheduler's clock ran ahead, schedules it again instead. Once: a deadline whose wait has ended
or whose delegation has finished changes nothing. An expired wait blocks its item (`deadline
passed: <reason>`) and leaves one message; an expired delegation fails (its report says why),
reaches the parent as any result does, and the child's WorkItem is cancelled.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from services.ledger.rules.acceptance import expire_check
from services.ledger.rules.common import revise
from services.ledger.rules.delegations import record_delegation_result
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.delegation import DelegationStatus, DelegationStep, step_command_id
from shared.domain.records import InboxMessage, MessageOrigin, WaitingIntent, WaitStatus
from shared.wire import commands as c
from shared.wire.events import (
    DeadlineScheduled,
    DeadlineTarget,
    Event,
    WaitExpired,
    WorkItemUpdated,
)

DEADLINE_BLOCKER = "deadline passed: "


def deadline_scheduled(
    state: LedgerState,
    target: DeadlineTarget,
    target_id: str,
    due_at: datetime,
    work_item_id: str | None,
) -> DeadlineScheduled:
    return DeadlineScheduled(
        agent_id=state.agent_id,
        work_item_id=work_item_id,
        target=target,
        target_id=target_id,
        due_at=due_at,
    )


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def expire_deadline(state: LedgerState, cmd: c.ExpireDeadline, ctx: Context) -> Decision:
    state.require_agent()
    if cmd.target == "wait":
        return _expire_wait(state, cmd, ctx)
    if cmd.target == "verification":
        return _expire_check(state, cmd, ctx)
    return _expire_delegation(state, cmd, ctx)


def check_target(target_id: str) -> tuple[str, int, int] | None:
    """`<work item id>:<attempt>:<check index>` of a check's deadline, or None if malformed."""
    item_id, _, rest = target_id.partition(":")
    attempt, _, index = rest.partition(":")
    if not item_id or not attempt.isdigit() or not index.isdigit():
        return None
    return item_id, int(attempt), int(index)


def _expire_check(state: LedgerState, cmd: c.ExpireDeadline, ctx: Context) -> Decision:
    target = check_target(cmd.target_id)
    item = state.items.get(target[0]) if target is not None else None
    if target is None or item is None:
        return Decision(state=state, result={"expired": False})
    outcome = expire_check(state, item, target[1], target[2], ctx)
    if outcome is None:
        return Decision(state=state, result={"expired": False})
    if isinstance(outcome, datetime):
        return _not_yet(state, cmd, outcome, item.id)
    result = {**(outcome.result or {}), "expired": True}
    return Decision(outcome.state, outcome.events, result, outcome.warnings, outcome.side)


def _not_yet(
    state: LedgerState, cmd: c.ExpireDeadline, deadline: datetime, work_item_id: str | None
) -> Decision:
    """Fired before the record's deadline by the ledger's clock: armed again, never early (a
    later due instant, so the new timer's command is not the one just applied)."""
    due = max(deadline, cmd.due_at + timedelta(milliseconds=1))
    event = deadline_scheduled(state, cmd.target, cmd.target_id, due, work_item_id)
    return Decision(state, (event,), {"expired": False, "due_at": due.isoformat()})


def _expire_wait(state: LedgerState, cmd: c.ExpireDeadline, ctx: Context) -> Decision:
    wait = state.waits.get(cmd.target_id)
    if wait is None or not wait.is_active or wait.deadline_at is None:
        return Decision(state=state, result={"expired": False})
    if ctx.now < wait.deadline_at:
        return _not_yet(state, cmd, wait.deadline_at, wait.work_item_id)
    expired = wait.model_copy(update={"status": WaitStatus.EXPIRED, "cancelled_at": ctx.now})
    state = state.with_wait(expired)
    events: list[Event] = [
        WaitExpired(
            agent_id=state.agent_id,
            work_item_id=wait.work_item_id,
            wait_id=wait.id,
            reason=wait.reason,
            deadline_at=wait.deadline_at,
        )
    ]
    item = state.items.get(wait.work_item_id) if wait.work_item_id else None
    if item is not None and item.is_open:
        changes = {
            "blocked_by": DEADLINE_BLOCKER + wait.reason,
            "recheck_at": None,
            "recheck_consumed_at": None,
        }
        item = revise(item, ctx.now, **changes)
        state = state.with_item(item)
        events.append(
            WorkItemUpdated(
                agent_id=state.agent_id,
                work_item_id=item.id,
                work_item=item,
                changed=tuple(changes),
            )
        )
    side = SideWrites(inbox_push=(_wait_message(state, wait, ctx),))
    return Decision(state, tuple(events), {"expired": True, "wait_id": wait.id}, side=side)


def _wait_message(state: LedgerState, wait: WaitingIntent, ctx: Context) -> InboxMessage:
    assert wait.deadline_at is not None
    about = f" of WorkItem {wait.work_item_id}" if wait.work_item_id else ""
    blocked = (
        f" The item is blocked ('{DEADLINE_BLOCKER}{wait.reason}'): decide what to do with it "
        "(clear the blocker to try again, wait again, or cancel it)."
        if wait.work_item_id
        else ""
    )
    return InboxMessage(
        id=f"msg_deadline_{wait.id}",
        agent_id=state.agent_id,
        origin=MessageOrigin.DEADLINE,
        text=(
            f"The deadline of the wait '{wait.reason}'{about} passed at "
            f"{_stamp(wait.deadline_at)} without it being answered.{blocked}"
        ),
        work_item_id=wait.work_item_id,
        created_at=ctx.now,
    )


def _expire_delegation(state: LedgerState, cmd: c.ExpireDeadline, ctx: Context) -> Decision:
    record = state.require_agent().delegations_out.get(cmd.target_id)
    if record is None or not record.running or record.deadline_at is None:
        return Decision(state=state, result={"expired": False})
    if ctx.now < record.deadline_at:
        return _not_yet(state, cmd, record.deadline_at, record.parent_work_item_id)
    report = (
        f"deadline passed: {record.child_agent_id} did not finish {record.child_work_item_id} "
        f"by {_stamp(record.deadline_at)}; its WorkItem is cancelled"
    )
    failed = c.RecordDelegationResult(
        command_id=cmd.command_id,
        agent_id=state.agent_id,
        delegation_id=record.id,
        status=DelegationStatus.FAILED,
        report=report,
        child_agent_id=record.child_agent_id,
        child_work_item_id=record.child_work_item_id,
    )
    decision = record_delegation_result(state, failed, ctx)
    cancel = c.CancelDelegatedWorkItem(
        command_id=step_command_id(record.id, DelegationStep.CANCEL),
        agent_id=record.child_agent_id,
        delegation_id=record.id,
        work_item_id=record.child_work_item_id,
        reason="the delegation's deadline passed",
    )
    side = replace(decision.side, outbox=(*decision.side.outbox, cancel))
    result = {"expired": True, "delegation_id": record.id}
    return Decision(decision.state, decision.events, result, decision.warnings, side)
