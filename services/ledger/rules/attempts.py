"""Ledger rules of a verification's end: passed (the item done, its report promoted once),
failed (the item runnable again, the agent told why, its wake budget spent), and failed
LONGRUN_MAX_VERIFY_ATTEMPTS times (the item blocked and held for the operator, whose verdict,
update or cancel is all that moves it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.ledger.rules.common import fresh_input, revise, view
from services.ledger.rules.completion import complete_as_done
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.acceptance import VerdictSource, Verification, VerificationStatus
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import InboxMessage, MessageOrigin, WorkItem
from shared.wire.commands import RecordVerdict
from shared.wire.events import (
    AcceptanceFailed,
    AcceptancePassed,
    CheckVerdictRecorded,
    Event,
    WorkItemUpdated,
)

BLOCKER_MAX = 2000
"""Characters of the blocker a held item gets (the reasons are cut there)."""


def refuse_while_held(item: WorkItem, tool: str, *, by_operator: bool) -> None:
    """An item whose attempts are spent is the operator's: the agent's tools cannot move it."""
    if item.held_for_operator and not by_operator:
        raise DomainError(
            ErrorKind.ACCEPTANCE_FAILED,
            f"{tool}: WorkItem {item.id} is blocked ({item.blocked_by}); only the operator can "
            "move it now",
            details={"blocked_by": item.blocked_by, "held_for_operator": True},
            recovery_hint="Leave this item to the operator (approve, reject, update or cancel "
            "it) and work on something else.",
        )


def passed(state: LedgerState, item: WorkItem, ver: Verification, ctx: Context) -> Decision:
    """Every check passed: done, and only now the report is promoted (once: a later verdict
    finds the item completed and is ignored)."""
    ver = ver.model_copy(update={"status": VerificationStatus.PASSED, "finished_at": ctx.now})
    done = complete_as_done(
        state, item, ver.report_candidate or "", ver.turn_id, ctx, verification=ver
    )
    passed = AcceptancePassed(
        agent_id=state.agent_id, work_item_id=item.id, work_item=done.item, attempt=ver.attempt
    )
    result: dict[str, Any] = {**done.result(), "verification": {"status": "passed"}}
    return Decision(done.state, (passed, *done.events), result, done.warnings, done.side)


def failed(
    state: LedgerState, item: WorkItem, ver: Verification, ctx: Context, *, by_operator: bool
) -> Decision:
    """A check failed: the item is open and runnable again, and the agent hears why through
    its inbox (which makes the scheduler send an `input` tick). That message is not fresh
    input unless the operator rejected: its turn spends the wake budget. After
    `max_verify_attempts` failed attempts the item is blocked instead, and only the operator
    moves it."""
    failed = ver.failed_attempts + 1
    held = failed >= ctx.max_verify_attempts
    ver = ver.model_copy(
        update={
            "status": VerificationStatus.FAILED,
            "finished_at": ctx.now,
            "failed_attempts": failed,
            "held_for_operator": held,
        }
    )
    reasons = ver.failures()
    changes: dict[str, Any] = {"verification": ver}
    if held:
        blocker = f"acceptance failed {failed} times: " + "; ".join(reasons)
        changes.update(blocked_by=blocker[:BLOCKER_MAX], recheck_at=None, recheck_consumed_at=None)
    item = revise(item, ctx.now, **changes)
    state = state.with_item(item)
    message = InboxMessage(
        id=ctx.new_id("msg_"),
        agent_id=state.agent_id,
        origin=MessageOrigin.ACCEPTANCE,
        text=_failure_text(item, ver, reasons),
        work_item_id=item.id,
        created_at=ctx.now,
    )
    events: list[Event] = [
        AcceptanceFailed(
            agent_id=state.agent_id,
            work_item_id=item.id,
            work_item=item,
            attempt=ver.attempt,
            reasons=tuple(reasons),
        )
    ]
    if by_operator:
        state, reset = fresh_input(state, "operator_verdict")
        events += reset
    else:
        agent = state.require_agent()
        state = state.with_agent(agent.model_copy(update={"nudge_pending": True}))
    result = {"work_item": view(state, item), "verification": {"status": "failed"}}
    return Decision(state, tuple(events), result, side=SideWrites(inbox_push=(message,)))


def _failure_text(item: WorkItem, ver: Verification, reasons: list[str]) -> str:
    head = f"Acceptance checks failed for WorkItem {item.id} (attempt {ver.attempt}): " + "; ".join(
        reasons
    )
    if ver.held_for_operator:
        return (
            f"{head}. That is {ver.failed_attempts} failed attempts: the item is blocked and "
            "only the operator can move it now (approve, reject, update or cancel it). Leave it "
            "and work on something else."
        )
    return f"{head}. The item is open again: fix what failed, then call CompleteWorkItem again."


# ---------------------------------------------------------------- an item the operator holds


def release_changes(item: WorkItem) -> dict[str, Any]:
    """What the operator moving a held item changes: the agent gets a fresh set of attempts and
    the acceptance blocker goes (an update applies any blocker the operator sets after these)."""
    ver = item.verification
    if ver is None or not item.held_for_operator:
        return {}
    ver = ver.model_copy(update={"held_for_operator": False, "failed_attempts": 0})
    return {
        "verification": ver,
        "blocked_by": None,
        "recheck_at": None,
        "recheck_consumed_at": None,
    }


def release_hold(item: WorkItem, now: datetime) -> WorkItem:
    changes = release_changes(item)
    return revise(item, now, **changes) if changes else item


def operator_moves_held(
    state: LedgerState, item: WorkItem, cmd: RecordVerdict, ctx: Context
) -> Decision:
    """The operator's verdict on an item whose attempts are spent. Approved: every check of the
    last attempt is decided by the operator (passed, the note as the reason) and the item is
    done with that attempt's report. Rejected: the item is open again with a fresh set of
    attempts and the agent is told why (operator input: the wake budget resets)."""
    ver = item.verification
    assert ver is not None
    note = cmd.reason.strip() or ("approved" if cmd.passed else "rejected")
    if not cmd.passed:
        item = release_hold(item, ctx.now)
        state = state.with_item(item)
        state, reset = fresh_input(state, "operator_verdict")
        message = InboxMessage(
            id=ctx.new_id("msg_"),
            agent_id=state.agent_id,
            origin=MessageOrigin.ACCEPTANCE,
            text=f"The operator sent WorkItem {item.id} back to you: {note}. Its acceptance "
            "checks have a fresh set of attempts: fix what failed, then call CompleteWorkItem.",
            work_item_id=item.id,
            created_at=ctx.now,
        )
        update = WorkItemUpdated(
            agent_id=state.agent_id,
            work_item_id=item.id,
            work_item=item,
            changed=("verification", "blocked_by"),
        )
        result = {"work_item": view(state, item), "verification": {"status": "failed"}}
        return Decision(state, (update, *reset), result, side=SideWrites(inbox_push=(message,)))
    decided = tuple(
        v.model_copy(
            update={
                "passed": True,
                "reason": f"operator override: {note}",
                "decided_by": VerdictSource.OPERATOR,
                "decided_at": ctx.now,
            }
        )
        for v in ver.checks
    )
    events = [
        CheckVerdictRecorded(
            agent_id=state.agent_id,
            work_item_id=item.id,
            attempt=ver.attempt,
            check_index=i,
            kind=v.kind.value,
            passed=True,
            reason=v.reason or "",
            source="operator",
        )
        for i, v in enumerate(decided)
    ]
    ver = ver.model_copy(update={"checks": decided, "held_for_operator": False})
    item = revise(item, ctx.now, verification=ver, blocked_by=None)
    decision = passed(state.with_item(item), item, ver, ctx)
    return Decision(
        decision.state,
        (*events, *decision.events),
        decision.result,
        decision.warnings,
        decision.side,
    )
