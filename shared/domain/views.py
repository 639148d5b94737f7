"""Derived views of docs/contract.md §2: pure functions of records and `now`, never stored."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from shared.domain.records import (
    PlanStatus,
    TodoItem,
    TodoState,
    WaitingIntent,
    WakeKind,
    WorkItem,
    WorkItemState,
)


class SchedulingState(StrEnum):
    COMPLETED = "completed"
    WAITING_OPERATOR = "waiting_operator"
    WAITING_TASK = "waiting_task"
    WAITING_EXTERNAL = "waiting_external"
    WAITING_TIMER = "waiting_timer"
    WAITING_SYSTEM = "waiting_system"
    BLOCKED = "blocked"
    RUNNABLE = "runnable"


class Readiness(StrEnum):
    RUNNABLE = "runnable"
    WAITING_FOR_OPERATOR = "waiting_for_operator"
    BLOCKED = "blocked"
    COMPLETED = "completed"


class CandidateClass(StrEnum):
    """Declared in ranking order: earlier members rank first."""

    CURRENT_RUNNABLE = "current_runnable"
    TRIGGERED_BLOCKED = "triggered_blocked"
    QUEUED_RUNNABLE = "queued_runnable"
    WAITING_FOR_OPERATOR = "waiting_for_operator"
    BLOCKED = "blocked"
    COMPLETED_RECENT = "completed_recent"
    COMPLETED = "completed"


CLASS_ORDER: dict[CandidateClass, int] = {c: i for i, c in enumerate(CandidateClass)}

PROMPT_LIMITS: dict[CandidateClass, int] = {
    CandidateClass.TRIGGERED_BLOCKED: 3,
    CandidateClass.QUEUED_RUNNABLE: 5,
    CandidateClass.BLOCKED: 3,
    # Decision: waiting_for_operator items are listed with the blocked limit, since both
    # are non-runnable families the agent can only inspect.
    CandidateClass.WAITING_FOR_OPERATOR: 3,
    CandidateClass.COMPLETED_RECENT: 3,
}
"""Prompt limits per class; `current_runnable` is at most one item and `completed` items
without a report never reach the prompt (completed work is shown only through its report)."""

_WAIT_STATES: tuple[tuple[WakeKind, SchedulingState], ...] = (
    (WakeKind.TASK_RESULT, SchedulingState.WAITING_TASK),
    (WakeKind.EXTERNAL, SchedulingState.WAITING_EXTERNAL),
    (WakeKind.TIMER, SchedulingState.WAITING_TIMER),
    (WakeKind.SYSTEM, SchedulingState.WAITING_SYSTEM),
)


def active_waits_of(item: WorkItem, waits: Iterable[WaitingIntent]) -> tuple[WaitingIntent, ...]:
    """The item's active waits, in creation order."""
    if not waits:
        return ()
    mine = [w for w in waits if w.is_active and w.work_item_id == item.id]
    return tuple(sorted(mine, key=lambda w: (w.created_at, w.id)))


def scheduling_state(item: WorkItem, waits: Iterable[WaitingIntent]) -> SchedulingState:
    """First match wins: completed, verifying (waiting_system), waiting_* (operator first),
    blocked, runnable."""
    if item.state is WorkItemState.COMPLETED:
        return SchedulingState.COMPLETED
    if item.is_verifying:
        # Its checks run outside the agent: waiting on the system, like a system wait.
        return SchedulingState.WAITING_SYSTEM
    kinds = {w.wake for w in active_waits_of(item, waits)}
    if item.plan_status is PlanStatus.NEEDS_INPUT or WakeKind.OPERATOR_INPUT in kinds:
        return SchedulingState.WAITING_OPERATOR
    for kind, state in _WAIT_STATES:
        if kind in kinds:
            return state
    if item.blocked_by is not None:
        return SchedulingState.BLOCKED
    return SchedulingState.RUNNABLE


def readiness_of(state: SchedulingState) -> Readiness:
    if state is SchedulingState.RUNNABLE:
        return Readiness.RUNNABLE
    if state is SchedulingState.WAITING_OPERATOR:
        return Readiness.WAITING_FOR_OPERATOR
    if state is SchedulingState.COMPLETED:
        return Readiness.COMPLETED
    return Readiness.BLOCKED


def readiness(item: WorkItem, waits: Iterable[WaitingIntent]) -> Readiness:
    return readiness_of(scheduling_state(item, waits))


def is_runnable(item: WorkItem, waits: Iterable[WaitingIntent]) -> bool:
    return scheduling_state(item, waits) is SchedulingState.RUNNABLE


def candidate_class(
    item: WorkItem, waits: Iterable[WaitingIntent], current_work_item_id: str | None
) -> CandidateClass:
    """First match wins, in the order of docs/contract.md §2."""
    mine = active_waits_of(item, waits)
    return _class_of(item, mine, scheduling_state(item, mine), current_work_item_id)


def _class_of(
    item: WorkItem,
    mine: Sequence[WaitingIntent],
    state: SchedulingState,
    current_work_item_id: str | None,
) -> CandidateClass:
    """`candidate_class` from the item's own active waits and scheduling state."""
    ready = readiness_of(state)
    if ready is Readiness.COMPLETED:
        if item.result_summary is not None:
            return CandidateClass.COMPLETED_RECENT
        return CandidateClass.COMPLETED
    if ready is Readiness.RUNNABLE:
        is_current = item.id == current_work_item_id
        return CandidateClass.CURRENT_RUNNABLE if is_current else CandidateClass.QUEUED_RUNNABLE
    if item.blocked_by is not None and any(w.is_triggered for w in mine):
        return CandidateClass.TRIGGERED_BLOCKED
    if ready is Readiness.WAITING_FOR_OPERATOR:
        return CandidateClass.WAITING_FOR_OPERATOR
    return CandidateClass.BLOCKED


def current_todo(item: WorkItem) -> TodoItem | None:
    """The first in-progress todo, else the first pending one."""
    for wanted in (TodoState.IN_PROGRESS, TodoState.PENDING):
        for todo in item.todo_list:
            if todo.state is wanted:
                return todo
    return None


def last_triggered_at(item: WorkItem, waits: Iterable[WaitingIntent]) -> datetime | None:
    stamps = [w.last_triggered_at for w in active_waits_of(item, waits) if w.last_triggered_at]
    return max(stamps) if stamps else None


@dataclass(frozen=True, slots=True)
class Ranked:
    """One WorkItem with the derived facts ranking and listing need."""

    item: WorkItem
    candidate_class: CandidateClass
    readiness: Readiness
    last_triggered_at: datetime | None


def classify(
    items: Iterable[WorkItem], waits: Sequence[WaitingIntent], current_work_item_id: str | None
) -> list[Ranked]:
    by_item: dict[str, list[WaitingIntent]] = {}
    for wait in waits:
        if wait.work_item_id is not None and wait.is_active:
            by_item.setdefault(wait.work_item_id, []).append(wait)
    out = []
    for item in items:
        # The item's active waits and scheduling state once; every derived fact reads them.
        mine = active_waits_of(item, by_item.get(item.id, ()))
        state = scheduling_state(item, mine)
        stamps = [w.last_triggered_at for w in mine if w.last_triggered_at]
        out.append(
            Ranked(
                item=item,
                candidate_class=_class_of(item, mine, state, current_work_item_id),
                readiness=readiness_of(state),
                last_triggered_at=max(stamps) if stamps else None,
            )
        )
    return out


def _neg(moment: datetime | None) -> float:
    return -moment.timestamp() if moment is not None else float("inf")


def rank_key(entry: Ranked) -> tuple[int, float, float, float, str]:
    """Sort key: class order, then the class's own order, then id for ties."""
    cls = entry.candidate_class
    item = entry.item
    if cls is CandidateClass.TRIGGERED_BLOCKED:
        within = (_neg(entry.last_triggered_at), _neg(item.updated_at), 0.0)
    elif cls is CandidateClass.QUEUED_RUNNABLE:
        within = (item.updated_at.timestamp(), item.created_at.timestamp(), 0.0)
    else:
        within = (_neg(item.updated_at), 0.0, 0.0)
    return (CLASS_ORDER[cls], *within, item.id)


def rank(
    items: Iterable[WorkItem], waits: Sequence[WaitingIntent], current_work_item_id: str | None
) -> list[Ranked]:
    """Every item in ranking order (docs/contract.md §2)."""
    return sorted(classify(items, waits, current_work_item_id), key=rank_key)


def prompt_candidates(ranked: Sequence[Ranked]) -> dict[CandidateClass, list[Ranked]]:
    """Ranked candidates per class, cut to the prompt limits; classes with nothing are absent."""
    out: dict[CandidateClass, list[Ranked]] = {}
    for entry in ranked:
        cls = entry.candidate_class
        limit = 1 if cls is CandidateClass.CURRENT_RUNNABLE else PROMPT_LIMITS.get(cls, 0)
        bucket = out.setdefault(cls, [])
        if len(bucket) < limit:
            bucket.append(entry)
    return {cls: bucket for cls, bucket in out.items() if bucket}


class ListFilter(StrEnum):
    ALL = "all"
    OPEN = "open"
    COMPLETED = "completed"
    CURRENT = "current"
    QUEUED = "queued"
    BLOCKED = "blocked"
    WAITING_FOR_OPERATOR = "waiting_for_operator"
    RUNNABLE = "runnable"


def matches_filter(entry: Ranked, wanted: ListFilter, current_work_item_id: str | None) -> bool:
    """Whether a ranked item belongs to a ListWorkItems filter (`queued`, `blocked` exclude
    the current item; `current` is the focused item whatever its readiness)."""
    is_current = entry.item.id == current_work_item_id
    is_open = entry.item.state is WorkItemState.OPEN
    rule: dict[ListFilter, bool] = {
        ListFilter.ALL: True,
        ListFilter.OPEN: is_open,
        ListFilter.COMPLETED: not is_open,
        ListFilter.CURRENT: is_current,
        ListFilter.QUEUED: is_open and not is_current and entry.readiness is Readiness.RUNNABLE,
        ListFilter.BLOCKED: is_open and not is_current and entry.readiness is Readiness.BLOCKED,
        ListFilter.WAITING_FOR_OPERATOR: entry.readiness is Readiness.WAITING_FOR_OPERATOR,
        ListFilter.RUNNABLE: entry.readiness is Readiness.RUNNABLE,
    }
    return rule[wanted]


def readiness_counts(ranked: Iterable[Ranked]) -> dict[Readiness, int]:
    counts = dict.fromkeys(Readiness, 0)
    for entry in ranked:
        counts[entry.readiness] += 1
    return counts
