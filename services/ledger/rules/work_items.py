"""Ledger rules for the WorkItem tools: create, update, pick and complete (docs/contract.md §3);
the acceptance gate they pass through lives in `acceptance`."""

from __future__ import annotations

from typing import Any

from services.ledger.rules.acceptance import (
    checks_for_create,
    checks_for_update,
    enter_verification,
    refuse_while_verifying,
)
from services.ledger.rules.attempts import refuse_while_held, release_changes, release_hold
from services.ledger.rules.common import (
    cancel_waits,
    recheck_deadline,
    recheck_timer,
    release_focus,
    revise,
    runnable,
    set_current,
    view,
)
from services.ledger.rules.completion import complete_as_done
from services.ledger.rules.reviews import refuse_completing_a_review
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.errors import DomainError, ErrorKind, missing_pick_reason_warning
from shared.domain.records import PlanStatus, TodoItem, WorkItem
from shared.domain.tools import TodoInput
from shared.domain.views import readiness
from shared.wire.commands import CompleteWorkItem, CreateWorkItem, PickWorkItem, UpdateWorkItem
from shared.wire.events import (
    Event,
    WorkItemCreated,
    WorkItemPicked,
    WorkItemUpdated,
)


def _todos(todos: tuple[TodoInput, ...]) -> tuple[TodoItem, ...]:
    # Validating two fields is cheaper than pydantic's model_construct.
    return tuple(TodoItem(text=t.text, state=t.state) for t in todos)


def create_work_item(state: LedgerState, cmd: CreateWorkItem, ctx: Context) -> Decision:
    state.require_agent()
    if cmd.work_item_id in state.items:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"WorkItem id {cmd.work_item_id} already exists; mint a fresh id for a new item",
        )
    # Todos as plain fields: validated with the item in one call, cheaper than a TodoItem each.
    item = WorkItem.model_validate(
        {
            "id": cmd.work_item_id,
            "agent_id": state.agent_id,
            "revision": 1,
            "objective": cmd.args.objective,
            "plan_status": cmd.args.plan_status,
            "plan_artifact": cmd.plan_artifact,
            "todo_list": [{"text": t.text, "state": t.state} for t in cmd.args.todo_list],
            "acceptance": checks_for_create(state, cmd, ctx),
            "created_at": ctx.now,
            "updated_at": ctx.now,
        }
    )
    state = state.with_item(item)
    event = WorkItemCreated(agent_id=state.agent_id, work_item_id=item.id, work_item=item)
    return Decision(state=state, events=(event,), result={"work_item": view(state, item)})


def _updated_fields(
    state: LedgerState, cmd: UpdateWorkItem, item: WorkItem, ctx: Context
) -> dict[str, Any]:
    args = cmd.args
    changes: dict[str, Any] = {}
    if args.objective is not None:
        changes["objective"] = args.objective
    if args.plan_status is not None:
        changes["plan_status"] = args.plan_status
    if args.todo_list is not None:
        changes["todo_list"] = _todos(args.todo_list)
    if args.sets_blocker:
        changes["blocked_by"] = args.blocked_by
        changes["recheck_at"] = recheck_deadline(state, item.id, ctx.now, args.recheck_after_ms)
        changes["recheck_consumed_at"] = None
    elif args.clears_blocker:
        changes.update(blocked_by=None, recheck_at=None, recheck_consumed_at=None)
    if args.acceptance is not None:
        changes["acceptance"] = checks_for_update(state, item, cmd, ctx)
    return changes


def update_work_item(state: LedgerState, cmd: UpdateWorkItem, ctx: Context) -> Decision:
    state.require_agent()
    before = state.open_item(cmd.args.work_item_id)
    refuse_while_verifying(before, "UpdateWorkItem")
    refuse_while_held(before, "UpdateWorkItem", by_operator=cmd.by_operator)
    was_runnable = runnable(state, before)
    # The operator's update moves a held item: a fresh set of attempts, its blocker gone.
    changes = {**release_changes(before), **_updated_fields(state, cmd, before, ctx)}
    item = revise(before, ctx.now, **changes)
    state = state.with_item(item)
    events: list[Event] = [
        WorkItemUpdated(
            agent_id=state.agent_id, work_item_id=item.id, work_item=item, changed=tuple(changes)
        )
    ]
    if cmd.args.clears_blocker:
        state, cancelled = cancel_waits(state, item.id, ctx.now, "blocker_cleared")
        events += cancelled
    if cmd.args.sets_blocker:
        events += recheck_timer(state, item)
    parks = cmd.args.sets_blocker or cmd.args.plan_status is PlanStatus.NEEDS_INPUT
    if parks and was_runnable and not runnable(state, item):
        state, released = release_focus(state, item.id, "became_non_runnable")
        events += released
    return Decision(state=state, events=tuple(events), result={"work_item": view(state, item)})


def _clear_blocker(
    state: LedgerState, item: WorkItem, ctx: Context
) -> tuple[LedgerState, WorkItem, list[Event]]:
    changes = {"blocked_by": None, "recheck_at": None, "recheck_consumed_at": None}
    item = revise(item, ctx.now, **changes)
    state = state.with_item(item)
    state, events = cancel_waits(state, item.id, ctx.now, "blocker_cleared")
    update = WorkItemUpdated(
        agent_id=state.agent_id, work_item_id=item.id, work_item=item, changed=tuple(changes)
    )
    return state, item, [update, *events]


def _switch_kind(previous_id: str | None, target_id: str) -> str:
    if previous_id is None:
        return "initial"
    return "same" if previous_id == target_id else "switch"


def pick_work_item(state: LedgerState, cmd: PickWorkItem, ctx: Context) -> Decision:
    agent = state.require_agent()
    item = state.open_item(cmd.args.work_item_id)
    refuse_while_verifying(item, "PickWorkItem")
    if cmd.args.clear_blocker:
        refuse_while_held(item, "PickWorkItem with clear_blocker", by_operator=cmd.by_operator)
        item = release_hold(item, ctx.now)
    previous_id = agent.state.current_work_item_id
    previous = state.items.get(previous_id) if previous_id else None
    events: list[Event] = []
    if cmd.args.clear_blocker:
        state, item, events = _clear_blocker(state, item, ctx)
    switch_kind = _switch_kind(previous_id, item.id)
    previous_runnable = previous is not None and runnable(state, previous)
    reason_required = switch_kind == "switch" and previous_runnable
    reason_missing = reason_required and cmd.args.reason is None
    focus_mode = "runnable" if runnable(state, item) else "inspection"
    state = state.with_agent(set_current(state.require_agent(), item.id))
    events.append(
        WorkItemPicked(
            agent_id=state.agent_id,
            work_item_id=item.id,
            previous_work_item_id=previous_id,
            switch_kind=switch_kind,
            reason=cmd.args.reason,
            reason_required=reason_required,
            reason_missing=reason_missing,
            focus_mode=focus_mode,
            blocker_cleared=cmd.args.clear_blocker,
            picked_by="operator" if cmd.by_operator else "agent",
        )
    )
    transition = {
        "switch_kind": switch_kind,
        "reason": cmd.args.reason,
        "previous_readiness": readiness(previous, state.active_waits()).value if previous else None,
        "current_readiness": readiness(item, state.active_waits()).value,
        "focus_mode": focus_mode,
        "blocker_cleared": cmd.args.clear_blocker,
    }
    result: dict[str, Any] = {
        "current_work_item": view(state, item),
        "transition": transition,
        "binding_note": _binding_note(item.id, focus_mode),
    }
    if previous is not None and switch_kind == "switch":
        result["previous_work_item"] = view(state, state.items[previous.id])
    warnings = (missing_pick_reason_warning(),) if reason_missing else ()
    return Decision(state=state, events=tuple(events), result=result, warnings=warnings)


def _binding_note(work_item_id: str, focus_mode: str) -> str:
    if focus_mode == "runnable":
        return f"{work_item_id} is now the current WorkItem; WaitFor and updates default to it."
    return (
        f"{work_item_id} is focused for inspection only: it stays non-runnable until its "
        "blocker is cleared (PickWorkItem with clear_blocker and a reason, or UpdateWorkItem)."
    )


def complete_work_item(state: LedgerState, cmd: CompleteWorkItem, ctx: Context) -> Decision:
    state.require_agent()
    before = state.open_item(cmd.args.work_item_id)
    refuse_while_verifying(before, "CompleteWorkItem")
    refuse_while_held(before, "CompleteWorkItem", by_operator=cmd.by_operator)
    refuse_completing_a_review(before)
    report = (cmd.report_text or "").strip()
    if before.acceptance:
        return enter_verification(state, cmd, before, report, ctx)
    done = complete_as_done(state, before, report, cmd.turn_id, ctx)
    return Decision(done.state, tuple(done.events), done.result(), done.warnings, done.side)
