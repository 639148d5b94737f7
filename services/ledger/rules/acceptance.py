"""Ledger rules of the acceptance gate (docs/contract.md, acceptance): who may set checks, the
verification a gated CompleteWorkItem starts, and the verdicts that end it as passed (the item
done, its report promoted once) or failed (the item runnable again, the agent told why)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from services.ledger.rules.attempts import failed, operator_moves_held, passed
from services.ledger.rules.common import (
    cancel_waits,
    release_focus,
    revise,
    view,
)
from services.ledger.rules.reviews import refuse_unknown_reviewers
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.acceptance import (
    DECIDED_BY,
    AcceptanceCheck,
    CheckKind,
    CheckVerdict,
    SetBy,
    VerdictSource,
    Verification,
    VerificationStatus,
    WebhookCheck,
    awaited,
    kind_of,
    merged_checks,
    todos_verdict,
    unavailable_kinds,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import TodoState, WorkItem
from shared.wire.commands import (
    CompleteWorkItem,
    CreateWorkItem,
    RecordVerdict,
    ToolCommand,
    UpdateWorkItem,
)
from shared.wire.events import (
    CheckVerdictRecorded,
    DeadlineScheduled,
    Event,
    WorkItemUpdated,
    WorkItemVerifying,
)

Starter = Callable[[LedgerState, WorkItem, int, Context], tuple[LedgerState, list[Event]]]
STARTERS: dict[CheckKind, Starter] = {}
"""Kinds whose verification starts with a ledger write of their own (a reviewer's delegated
item); the others are run from the `work_item_verifying` event or wait for the operator."""


# ---------------------------------------------------------------- who sets checks


def _by(cmd: ToolCommand) -> SetBy:
    return SetBy.OPERATOR if cmd.by_operator else SetBy.AGENT


def _available(checks: tuple[AcceptanceCheck, ...]) -> tuple[AcceptanceCheck, ...]:
    missing = unavailable_kinds(checks)
    if missing:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"acceptance check kinds not available in this deployment: {', '.join(missing)}",
            recovery_hint="Use todos_done, operator_approval or webhook checks.",
        )
    return checks


def refuse_webhooks_not_allowed(checks: tuple[AcceptanceCheck, ...], ctx: Context) -> None:
    """A webhook check the operator did not set must point where LONGRUN_WEBHOOK_ALLOW allows
    (the scheduler checks again where its host resolves, when it calls)."""
    for check in checks:
        if (
            isinstance(check, WebhookCheck)
            and check.set_by is not SetBy.OPERATOR
            and not ctx.webhook_allow.allows_url(check.url)
        ):
            raise DomainError(
                ErrorKind.WEBHOOK_NOT_ALLOWED,
                f"webhook check URL {check.url} is not on this deployment's allow list "
                "(LONGRUN_WEBHOOK_ALLOW)",
                details={"url": check.url},
            )


def checks_for_create(
    state: LedgerState, cmd: CreateWorkItem, ctx: Context
) -> tuple[AcceptanceCheck, ...]:
    by = _by(cmd)
    checks = tuple(c.to_check().model_copy(update={"set_by": by}) for c in cmd.args.acceptance)
    refuse_unknown_reviewers(state, state.agent_id, checks)
    refuse_webhooks_not_allowed(checks, ctx)
    return _available(checks)


def checks_for_update(
    state: LedgerState, item: WorkItem, cmd: UpdateWorkItem, ctx: Context
) -> tuple[AcceptanceCheck, ...]:
    """The new list; the agent removing or changing an operator's check is refused."""
    assert cmd.args.acceptance is not None
    wanted = [c.to_check() for c in cmd.args.acceptance]
    checks, lost = merged_checks(item.acceptance, wanted, _by(cmd))
    if lost:
        raise DomainError(
            ErrorKind.WORK_ITEM_ACCESS_DENIED,
            "acceptance checks set by the operator or the delegating agent cannot be removed or "
            "changed by the agent: " + ", ".join(str(c.kind) for c in lost),
            details={"operator_checks": [c.model_dump(mode="json") for c in lost]},
            recovery_hint="Keep the operator's checks in the list unchanged; add or change "
            "only your own.",
        )
    refuse_unknown_reviewers(state, state.agent_id, checks)
    refuse_webhooks_not_allowed(checks, ctx)
    return _available(checks)


def refuse_while_verifying(item: WorkItem, tool: str) -> None:
    if item.is_verifying:
        pending = awaited(item.acceptance, item.verification)
        raise DomainError(
            ErrorKind.WORK_ITEM_VERIFYING,
            f"{tool}: WorkItem {item.id} is being verified (waiting for {', '.join(pending)})",
            details={"awaiting": pending},
        )


# ---------------------------------------------------------------- a gated CompleteWorkItem


def _first_verdicts(item: WorkItem, ctx: Context) -> tuple[CheckVerdict, ...]:
    """todos_done decided now (refusing the call when it fails); the others awaited."""
    open_todos = [t.text for t in item.todo_list if t.state is not TodoState.COMPLETED]
    verdicts = []
    for check in item.acceptance:
        kind = kind_of(check)
        if kind is CheckKind.TODOS_DONE:
            passed, reason = todos_verdict(open_todos)
            if not passed:
                raise DomainError(
                    ErrorKind.ACCEPTANCE_FAILED,
                    f"CompleteWorkItem: acceptance check todos_done failed: {reason}",
                    details={"reasons": [f"todos_done: {reason}"], "open_todos": open_todos},
                    recovery_hint="Complete the open todos (UpdateWorkItem), then call "
                    "CompleteWorkItem again.",
                )
            verdicts.append(
                CheckVerdict(
                    kind=kind,
                    passed=True,
                    reason=reason,
                    decided_by=VerdictSource.LEDGER,
                    decided_at=ctx.now,
                )
            )
        else:
            verdicts.append(CheckVerdict(kind=kind))
    return tuple(verdicts)


def enter_verification(
    state: LedgerState, cmd: CompleteWorkItem, before: WorkItem, report: str, ctx: Context
) -> Decision:
    """Verification starts in the CompleteWorkItem write: nothing is promoted yet."""
    verdicts = _first_verdicts(before, ctx)
    attempt = before.verification.attempt + 1 if before.verification else 1
    verification = Verification(
        status=VerificationStatus.VERIFYING,
        attempt=attempt,
        checks=verdicts,
        report_candidate=report or None,
        turn_id=cmd.turn_id,
        started_at=ctx.now,
        failed_attempts=before.verification.failed_attempts if before.verification else 0,
    )
    if not verification.pending():
        return passed(state, before, verification, ctx)
    item = revise(
        before,
        ctx.now,
        verification=verification,
        blocked_by=None,
        recheck_at=None,
        recheck_consumed_at=None,
    )
    state = state.with_item(item)
    state, events = cancel_waits(state, item.id, ctx.now, "work_item_verifying")
    was_current = state.current_id == item.id
    state, released = release_focus(state, item.id, "work_item_verifying")
    pending = awaited(item.acceptance, verification)
    events = [
        WorkItemVerifying(
            agent_id=state.agent_id,
            work_item_id=item.id,
            work_item=item,
            attempt=attempt,
            awaited=tuple(pending),
        ),
        *events,
        *released,
    ]
    for index in verification.pending():
        starter = STARTERS.get(verification.checks[index].kind)
        if starter is not None:
            state, started = starter(state, item, index, ctx)
            events += started
    events += check_deadlines(state, item, verification, ctx)
    result = {
        "work_item": view(state, item),
        "verification": {"status": "verifying", "attempt": attempt, "awaiting": pending},
        "verifying_transition": {"was_current": was_current, "focus_released": bool(released)},
        "report_promoted": False,
    }
    return Decision(state, tuple(events), result)


DEADLINE_PREFIX = "deadline:"
"""The id of a verdict a check's deadline decided (never the operator's own)."""

_AWAITED_VERDICTS = frozenset({CheckKind.OPERATOR_APPROVAL, CheckKind.REVIEWER_AGENT})
"""Checks a person or an agent decides: each has a deadline from the attempt's start."""


def check_deadline(item: WorkItem, ver: Verification, index: int, ctx: Context) -> datetime | None:
    """When check `index` of this attempt fails for want of a verdict (None: it has none)."""
    if ver.checks[index].kind not in _AWAITED_VERDICTS or index >= len(item.acceptance):
        return None
    seconds = getattr(item.acceptance[index], "deadline_s", None) or ctx.check_deadline_s
    return ver.started_at + timedelta(seconds=seconds)


def check_deadlines(
    state: LedgerState, item: WorkItem, ver: Verification, ctx: Context
) -> list[Event]:
    """The deadlines of this attempt's awaited operator and reviewer verdicts."""
    events: list[Event] = []
    for index in ver.pending():
        due = check_deadline(item, ver, index, ctx)
        if due is not None:
            events.append(
                DeadlineScheduled(
                    agent_id=state.agent_id,
                    work_item_id=item.id,
                    target="verification",
                    target_id=f"{item.id}:{ver.attempt}:{index}",
                    due_at=due,
                )
            )
    return events


def expire_check(
    state: LedgerState, item: WorkItem, attempt: int, index: int, ctx: Context
) -> Decision | datetime | None:
    """A check's deadline fired: the check fails with reason `deadline` when this attempt still
    awaits it and its deadline has passed by the ledger's clock (the attempt fails then, as on
    any failed check); the deadline when it has not passed; None when nothing awaits it."""
    ver = item.verification
    if not item.is_verifying or ver is None or ver.attempt != attempt:
        return None
    if index not in ver.pending():
        return None
    due = check_deadline(item, ver, index, ctx)
    if due is None:
        return None
    if ctx.now < due:
        return due
    # Decided as the check's own source would (operator or reviewer), failed for its deadline;
    # its message is no operator input (the `deadline:` id says so): it spends the budget.
    verdict = RecordVerdict.model_validate(
        {
            "command_id": f"{DEADLINE_PREFIX}{item.id}:{attempt}:{index}",
            "agent_id": state.agent_id,
            "work_item_id": item.id,
            "attempt": attempt,
            "check_index": index,
            "source": DECIDED_BY[ver.checks[index].kind].value,
            "passed": False,
            "reason": f"deadline: no verdict by {due.strftime('%Y-%m-%dT%H:%M:%SZ')}",
        }
    )
    return _decided(state, item, ver, [index], cmd=verdict, ctx=ctx)


# ---------------------------------------------------------------- verdicts


def _ignored(state: LedgerState, item: WorkItem, why: str) -> Decision:
    """A verdict that counts for nothing (another attempt, a check already decided, an item
    no longer verifying): answered, nothing written."""
    return Decision(state, (), {"ignored": why, "work_item": view(state, item)})


def _targets(item: WorkItem, ver: Verification, cmd: RecordVerdict) -> list[int] | str:
    """The checks this verdict decides, or why it decides none."""
    source = VerdictSource(cmd.source)
    if cmd.check_index is None:
        return [i for i in ver.pending() if DECIDED_BY[ver.checks[i].kind] is source]
    if cmd.check_index >= len(ver.checks):
        return "no_such_check"
    if DECIDED_BY[ver.checks[cmd.check_index].kind] is not source:
        return f"not_decided_by_{source.value}"
    if ver.checks[cmd.check_index].passed is not None:
        return "already_decided"
    return [cmd.check_index]


def _stale(item: WorkItem, cmd: RecordVerdict) -> str | None:
    ver = item.verification
    if not item.is_verifying or ver is None:
        return "not_verifying"
    if cmd.attempt is not None and cmd.attempt != ver.attempt:
        return "stale_attempt"
    return None


def record_verdict(state: LedgerState, cmd: RecordVerdict, ctx: Context) -> Decision:
    state.require_agent()
    item = state.item(cmd.work_item_id)
    from_operator = cmd.source == VerdictSource.OPERATOR.value
    if from_operator and item.held_for_operator:
        return operator_moves_held(state, item, cmd, ctx)
    stale = _stale(item, cmd)
    if stale is not None and from_operator and cmd.attempt is None:
        raise DomainError(
            ErrorKind.WORK_ITEM_NOT_VERIFYING, f"WorkItem {item.id} is not being verified"
        )
    if stale is not None:
        return _ignored(state, item, stale)
    assert item.verification is not None
    ver = item.verification
    targets = _targets(item, ver, cmd)
    if isinstance(targets, str) or not targets:
        if from_operator:
            raise DomainError(
                ErrorKind.WORK_ITEM_NOT_VERIFYING,
                f"WorkItem {item.id} awaits no operator_approval verdict",
            )
        return _ignored(state, item, targets if isinstance(targets, str) else "nothing_awaited")
    return _decided(state, item, ver, targets, cmd=cmd, ctx=ctx)


def _decided(
    state: LedgerState,
    item: WorkItem,
    ver: Verification,
    targets: list[int],
    *,
    cmd: RecordVerdict,
    ctx: Context,
) -> Decision:
    reason = cmd.reason.strip() or ("passed" if cmd.passed else "failed")
    verdicts = list(ver.checks)
    events: list[Event] = []
    for i in targets:
        verdicts[i] = verdicts[i].model_copy(
            update={
                "passed": cmd.passed,
                "reason": reason,
                "decided_by": VerdictSource(cmd.source),
                "decided_at": ctx.now,
            }
        )
        events.append(
            CheckVerdictRecorded(
                agent_id=state.agent_id,
                work_item_id=item.id,
                attempt=ver.attempt,
                check_index=i,
                kind=verdicts[i].kind.value,
                passed=cmd.passed,
                reason=reason,
                source=cmd.source,
            )
        )
    ver = ver.model_copy(update={"checks": tuple(verdicts)})
    if not cmd.passed:
        operator = cmd.source == "operator" and not cmd.command_id.startswith(DEADLINE_PREFIX)
        decision = failed(state, item, ver, ctx, by_operator=operator)
    elif not ver.pending():
        decision = passed(state, item, ver, ctx)
    else:
        item = revise(item, ctx.now, verification=ver)
        state = state.with_item(item)
        update = WorkItemUpdated(
            agent_id=state.agent_id, work_item_id=item.id, work_item=item, changed=("verification",)
        )
        decision = Decision(state, (update,), {"work_item": view(state, item)})
    return Decision(
        decision.state, (*events, *decision.events), decision.result, side=decision.side
    )
