"""What a decision's WorkItem changes mean for delegations, whichever rule made them.

Applied after every decision (`decide`): a delegated WorkItem that ends (done, cancelled by its
own agent or the operator) or is blocked by the crash rule reports back to its delegator through
the outbox (`<dlg>:result`: succeeded, cancelled or failed); a WorkItem that ends while it has
running delegations cancels them (`<dlg>:cancel`), and so on down the tree, since each child's
cancellation is itself an ending here. A cancellation the delegator asked for reports nothing
back. Rules that complete items need not know about delegations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from services.ledger.rules.common import delegation_finished
from services.ledger.rules.delegated import in_record
from services.ledger.rules.delegations import stop_child
from services.ledger.rules.reviews import start_reviews, verdict_for
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.delegation import DelegationRecord, DelegationStatus, DelegationStep
from shared.domain.delegation import step_command_id as command_id
from shared.domain.records import WorkItem, WorkItemOutcome
from shared.wire import commands as c
from shared.wire.events import Event

_CRASH_RULE_COMMANDS = (c.BeginTurn, c.FinishTurn)
"""The commands whose failure counting blocks an item (the crash rule): a delegated item they
block fails its delegation."""


def _ending(cmd: c.Command, before: WorkItem, after: WorkItem) -> DelegationStatus | None:
    """The status this change reports to the item's delegator, if any."""
    if not before.is_open:
        return None
    if not after.is_open:
        if isinstance(cmd, c.CancelDelegatedWorkItem):
            return None  # the delegator asked: it already knows
        if after.outcome is WorkItemOutcome.CANCELLED:
            return DelegationStatus.CANCELLED
        return DelegationStatus.SUCCEEDED
    crashed = after.blocked_by is not None and after.blocked_by != before.blocked_by
    if crashed and isinstance(cmd, _CRASH_RULE_COMMANDS):
        return DelegationStatus.FAILED
    return None


def _report(item: WorkItem, status: DelegationStatus) -> c.RecordDelegationResult:
    origin = item.delegated_from
    assert origin is not None
    report = item.result_summary if status is DelegationStatus.SUCCEEDED else item.blocked_by
    return c.RecordDelegationResult(
        command_id=command_id(origin.delegation_id, DelegationStep.RESULT),
        agent_id=origin.agent_id,
        delegation_id=origin.delegation_id,
        status=status,
        report=report,
        child_agent_id=item.agent_id,
        child_work_item_id=item.id,
    )


def _no_verdict(item: WorkItem, status: DelegationStatus) -> list[c.Command]:
    """A review item that ends or fails without SubmitVerdict fails its check (fail-closed), or
    the reviewed item would verify for good; a verdict already sent has the same command id, so
    the first one counts."""
    origin = item.delegated_from
    if origin is None or origin.review_of is None or status is DelegationStatus.SUCCEEDED:
        return []
    why = "was cancelled" if status is DelegationStatus.CANCELLED else f"failed ({item.blocked_by})"
    reason = f"the review item {item.id} of {item.agent_id} {why} before a verdict"
    return [verdict_for(origin, passed=False, reason=reason)]


@dataclass
class _Effects:
    """What the decision's WorkItem changes add: events, delegation records, outbox commands."""

    events: list[Event] = field(default_factory=list)
    records: list[DelegationRecord] = field(default_factory=list)
    outbox: list[c.Command] = field(default_factory=list)

    def take(
        self,
        state: LedgerState,
        events: list[Event],
        records: list[DelegationRecord],
        outbox: list[c.Command],
    ) -> LedgerState:
        self.events += events
        self.records += records
        self.outbox += outbox
        return state

    def report(
        self, cmd: c.Command, old: WorkItem, item: WorkItem, agent_id: str, ctx: Context
    ) -> None:
        """A delegated item that ended or was blocked by the crash rule tells its delegator."""
        status = _ending(cmd, old, item)
        if status is None or item.delegated_from is None:
            return
        self.outbox.append(_report(item, status))
        self.outbox += _no_verdict(item, status)
        record = in_record(item, status, ctx)
        self.records.append(record)
        cause = "work_item_ended" if not item.is_open else "crash_rule"
        self.events.append(delegation_finished(agent_id, item.id, record, cause))


def delegation_effects(
    before: LedgerState, cmd: c.Command, decision: Decision, ctx: Context
) -> Decision:
    after = decision.state
    if not after.touched:
        return decision
    state = after
    fx = _Effects()
    for work_item_id in sorted(after.touched):
        old, item = before.items.get(work_item_id), after.items[work_item_id]
        if old is not None:
            fx.report(cmd, old, item, state.agent_id, ctx)
            if old.is_open and not item.is_open:
                state = fx.take(*_cascade(state, item, ctx))
        state = fx.take(*start_reviews(old, item, state, ctx))
    if not fx.outbox:
        return decision
    # Ours first: a review's result reaches its parent before the verdict that ends the item
    # (which would otherwise cancel the review delegation as still running).
    side = replace(
        decision.side,
        delegations=(*decision.side.delegations, *fx.records),
        outbox=(*fx.outbox, *decision.side.outbox),
    )
    return replace(decision, state=state, events=(*decision.events, *fx.events), side=side)


def _cascade(
    state: LedgerState, item: WorkItem, ctx: Context
) -> tuple[LedgerState, list[Event], list[DelegationRecord], list[c.Command]]:
    """Cancel the ended item's running delegations (their children cancel theirs in turn)."""
    events: list[Event] = []
    records: list[DelegationRecord] = []
    outbox: list[c.Command] = []
    agent = state.require_agent()
    running = [d for d in agent.delegations_out.values() if d.parent_work_item_id == item.id]
    reason = f"the delegating WorkItem {item.id} ended ({(item.outcome or 'done')})"
    for record in sorted(running, key=lambda d: d.id):
        state, stopped, final, cancel = stop_child(state, record, reason, ctx, "parent_ended")
        events += stopped
        records.append(final)
        outbox.append(cancel)
    return state, events, records, outbox
