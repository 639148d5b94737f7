"""The `reviewer_agent` acceptance check as a delegation (docs/contract.md, acceptance and
delegation): a WorkItem entering verification with such a check delegates a review item to the
reviewer, and the reviewer's SubmitVerdict completes the review item and sends the verdict back
as `RecordVerdict` (id from `verdict_command_id`, so a re-send is a duplicate)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

from services.ledger.rules.common import view, with_running
from services.ledger.rules.completion import complete_as_done
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.acceptance import (
    AcceptanceCheck,
    CheckKind,
    ReviewerAgentCheck,
    verdict_command_id,
)
from shared.domain.delegation import (
    REVIEW_OBJECTIVE,
    DelegatedFrom,
    DelegationRecord,
    DelegationStep,
    ReviewOf,
    new_chain,
    step_command_id,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import PlanArtifact, WorkItem
from shared.wire import commands as c
from shared.wire.events import DelegationCreated, Event

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def refuse_unknown_reviewers(
    state: LedgerState, owner: str, checks: Sequence[AcceptanceCheck]
) -> None:
    """A `reviewer_agent` check must name another existing agent: its review is delegated the
    moment the item enters verification, and a review nobody can receive would hold the item
    verifying for good (agents are never deleted, so a check accepted here stays deliverable)."""
    for check in checks:
        if not isinstance(check, ReviewerAgentCheck):
            continue
        if check.agent_id == owner:
            raise DomainError(
                ErrorKind.DELEGATION_CYCLE,
                f"a reviewer_agent check names {owner!r}, the agent whose work it reviews",
                recovery_hint="Name another agent as the reviewer.",
            )
        if check.agent_id not in state.agents_found:
            raise DomainError(
                ErrorKind.AGENT_NOT_FOUND,
                f"acceptance check reviewer_agent names {check.agent_id!r}: "
                "no agent of that id in this deployment",
                details={"agent_id": check.agent_id},
                recovery_hint="Name an existing agent (GET /v1/agents lists them), or create "
                "it first.",
            )


def _plan_of(item: WorkItem, reviewer: str, review_id: str, ctx: Context) -> PlanArtifact:
    """An empty plan in the reviewer's home, beside the reviewed agent's (`<home>/<agent>/...`):
    the ledger writes no file; the reviewer's first write creates it."""
    home = PurePosixPath(item.plan_artifact.path).parents[3]
    relative = f"work-items/{review_id}/plan.md"
    return PlanArtifact(
        path=str(home / reviewer / relative),
        relative_path=relative,
        sha256=EMPTY_SHA256,
        bytes=0,
        updated_at=ctx.now,
        preview="",
        preview_complete=True,
    )


def start_reviews(
    before: WorkItem | None, item: WorkItem, state: LedgerState, ctx: Context
) -> tuple[LedgerState, list[Event], list[DelegationRecord], list[c.Command]]:
    """Delegate one review item per awaited `reviewer_agent` check of a new verification."""
    ver = item.verification
    if ver is None or not ver.is_verifying:
        return state, [], [], []
    previous = before.verification if before is not None else None
    if previous is not None and previous.attempt == ver.attempt:
        return state, [], [], []
    events: list[Event] = []
    records: list[DelegationRecord] = []
    outbox: list[c.Command] = []
    for index in ver.pending():
        check = item.acceptance[index] if index < len(item.acceptance) else None
        if ver.checks[index].kind is not CheckKind.REVIEWER_AGENT:
            continue
        assert isinstance(check, ReviewerAgentCheck)
        state, event, record, create = _review(state, item, check, index, ctx)
        events.append(event)
        records.append(record)
        outbox.append(create)
    return state, events, records, outbox


def _review(
    state: LedgerState, item: WorkItem, check: ReviewerAgentCheck, index: int, ctx: Context
) -> tuple[LedgerState, Event, DelegationRecord, c.Command]:
    ver = item.verification
    assert ver is not None
    review_id = ctx.new_id("wi_")
    chain = new_chain(item.delegated_from, state.agent_id)
    objective = (
        f"{REVIEW_OBJECTIVE} {item.id} of agent {state.agent_id} (attempt {ver.attempt}): "
        f"{item.objective}"
    )
    record = DelegationRecord(
        id=ctx.new_id("dlg_"),
        parent_agent_id=state.agent_id,
        parent_work_item_id=item.id,
        child_agent_id=check.agent_id,
        child_work_item_id=review_id,
        objective=objective,
        reason="reviewer_agent acceptance check",
        depth=len(chain),
        review=True,
        created_at=ctx.now,
    )
    state = state.with_agent(with_running(state.require_agent(), record))
    report = ver.report_candidate or "(no report)"
    create = c.CreateDelegatedWorkItem(
        command_id=step_command_id(record.id, DelegationStep.CREATE),
        agent_id=check.agent_id,
        work_item_id=review_id,
        plan_artifact=_plan_of(item, check.agent_id, review_id, ctx),
        objective=f"{objective}\nThe report to review:\n{report}"[:8000],
        delegated_from=DelegatedFrom(
            delegation_id=record.id,
            agent_id=state.agent_id,
            work_item_id=item.id,
            reason="Review this report and call SubmitVerdict with passed and a reason.",
            chain=chain,
            review_of=ReviewOf(work_item_id=item.id, attempt=ver.attempt, check_index=index),
        ),
    )
    event = DelegationCreated(agent_id=state.agent_id, work_item_id=item.id, delegation=record)
    return state, event, record, create


def verdict_for(origin: DelegatedFrom, passed: bool, reason: str) -> c.RecordVerdict:
    """The review's verdict on the check it decides, back to the reviewed agent; one id per
    (item, attempt, check), so whichever verdict comes first is the one that counts."""
    review = origin.review_of
    assert review is not None
    return c.RecordVerdict(
        command_id=verdict_command_id(review.work_item_id, review.attempt, review.check_index),
        agent_id=origin.agent_id,
        work_item_id=review.work_item_id,
        attempt=review.attempt,
        check_index=review.check_index,
        source="reviewer",
        passed=passed,
        reason=reason[:4000],
    )


def refuse_completing_a_review(item: WorkItem) -> None:
    if item.is_open_review:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"CompleteWorkItem: WorkItem {item.id} is a review item",
            recovery_hint="Decide a review item with SubmitVerdict {work_item_id, passed, "
            "reason}: the verdict is what goes back.",
        )


def submit_verdict(state: LedgerState, cmd: c.SubmitVerdict, ctx: Context) -> Decision:
    """Complete the review item (done, the verdict as its report) and send the verdict."""
    state.require_agent()
    before = state.open_item(cmd.args.work_item_id)
    origin = before.delegated_from
    if origin is None or origin.review_of is None:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"SubmitVerdict: WorkItem {before.id} is not a review item",
            recovery_hint="SubmitVerdict is only for review items (delegated by a "
            "reviewer_agent check); complete other items with CompleteWorkItem.",
        )
    verdict = "passed" if cmd.args.passed else "failed"
    report = f"{verdict}: {cmd.args.reason}"
    # No brief or delivery summary: the verdict goes back to the reviewed item instead.
    done = complete_as_done(state, before, report, None, ctx, with_records=False)
    result = {"work_item": view(done.state, done.item), "verdict": verdict}
    side = SideWrites(outbox=(verdict_for(origin, cmd.args.passed, cmd.args.reason),))
    return Decision(done.state, tuple(done.events), result, side=side)
