"""Completing a WorkItem as done and promoting its report: one step shared by CompleteWorkItem
on an ungated item, by the acceptance gate once every check has passed, and by SubmitVerdict on
a review item (whose report is its verdict, sent back as one instead of promoted)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.ledger.rules.common import cancel_waits, release_focus, revise, view
from services.ledger.rules.state import Context, LedgerState, SideWrites
from shared.domain.errors import (
    ToolWarning,
    missing_completion_report_warning,
    unfinished_todos_warning,
)
from shared.domain.records import (
    BriefKind,
    BriefRecord,
    DeliverySummaryRecord,
    TodoState,
    WorkItem,
    WorkItemOutcome,
    WorkItemState,
)
from shared.wire.events import (
    BriefRecorded,
    DeliverySummaryRecorded,
    Event,
    WorkItemCompleted,
)


@dataclass(frozen=True, slots=True)
class Done:
    """A WorkItem completed as done: the state after, the facts, the promoted records."""

    state: LedgerState
    item: WorkItem
    events: list[Event]
    side: SideWrites
    warnings: tuple[ToolWarning, ...]
    was_current: bool
    focus_released: bool
    report_promoted: bool

    def result(self) -> dict[str, Any]:
        return {
            "work_item": view(self.state, self.item),
            "completed_transition": {
                "previous_state": WorkItemState.OPEN.value,
                "was_current": self.was_current,
                "focus_released": self.focus_released,
            },
            "report_promoted": self.report_promoted,
        }


def _records(
    state: LedgerState,
    item: WorkItem,
    report: str,
    *,
    turn_id: str | None,
    ctx: Context,
    warnings: tuple[ToolWarning, ...],
) -> tuple[SideWrites, list[Event]]:
    brief = BriefRecord(
        id=ctx.new_id("brief_"),
        agent_id=state.agent_id,
        work_item_id=item.id,
        kind=BriefKind.RESULT,
        text=report,
        turn_id=turn_id,
        created_at=ctx.now,
    )
    summary = DeliverySummaryRecord(
        id=ctx.new_id("ds_"),
        agent_id=state.agent_id,
        work_item_id=item.id,
        text=report,
        turn_id=turn_id,
        created_at=ctx.now,
        # The operator reading the summary learns what the agent was warned about.
        warnings=tuple(w.kind.value for w in warnings),
    )
    events: list[Event] = [
        BriefRecorded(agent_id=state.agent_id, work_item_id=item.id, brief=brief),
        DeliverySummaryRecorded(agent_id=state.agent_id, work_item_id=item.id, summary=summary),
    ]
    return SideWrites(briefs=(brief,), summaries=(summary,)), events


def complete_as_done(
    state: LedgerState,
    before: WorkItem,
    report: str,
    turn_id: str | None,
    ctx: Context,
    *,
    with_records: bool = True,
    **changes: Any,
) -> Done:
    """State completed, outcome done, waits cancelled, focus released, and the report (if
    any) promoted: result_summary and, unless `with_records` is false, a result brief and a
    delivery summary."""
    pending = [t.text for t in before.todo_list if t.state is TodoState.PENDING]
    in_progress = [t.text for t in before.todo_list if t.state is TodoState.IN_PROGRESS]
    item = revise(
        before,
        ctx.now,
        state=WorkItemState.COMPLETED,
        outcome=WorkItemOutcome.DONE,
        blocked_by=None,
        recheck_at=None,
        recheck_consumed_at=None,
        result_summary=report or None,
        **changes,
    )
    state = state.with_item(item)
    state, events = cancel_waits(state, item.id, ctx.now, "work_item_completed")
    was_current = state.current_id == item.id
    state, released = release_focus(state, item.id, "work_item_completed")
    unfinished = len(pending) + len(in_progress)
    completed = WorkItemCompleted(
        agent_id=state.agent_id,
        work_item_id=item.id,
        work_item=item,
        report_promoted=bool(report),
        completed_with_unfinished_todos=unfinished > 0,
        unfinished_todo_count=unfinished,
        pending_todo_count=len(pending),
        in_progress_todo_count=len(in_progress),
    )
    events = [completed, *events, *released]
    warnings: list[ToolWarning] = []
    if not report:
        warnings.append(missing_completion_report_warning())
    if unfinished:
        warnings.append(unfinished_todos_warning(pending, in_progress))
    side = SideWrites()
    if report and with_records:
        side, records = _records(
            state, item, report, turn_id=turn_id, ctx=ctx, warnings=tuple(warnings)
        )
        events += records
    return Done(
        state,
        item,
        events,
        side,
        tuple(warnings),
        was_current,
        bool(released),
        bool(report),
    )
