"""Why a WorkItem is not running right now: one typed reason, derived from the same snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from shared.domain.acceptance import awaited
from shared.domain.records import (
    PlanStatus,
    Posture,
    WaitingIntent,
    WakeBudget,
    WakeKind,
    WorkItem,
    WorkItemState,
)
from shared.domain.scheduling import AgentSnapshot, Hold, decide
from shared.domain.views import (
    CandidateClass,
    SchedulingState,
    active_waits_of,
    rank,
    scheduling_state,
)


class ReasonKind(StrEnum):
    RUNNING = "running"
    TICK_PENDING = "tick_pending"
    WAITING_OPERATOR = "waiting_operator"
    WAITING_TASK = "waiting_task"
    WAITING_EXTERNAL = "waiting_external"
    WAITING_TIMER = "waiting_timer"
    WAITING_SYSTEM = "waiting_system"
    BLOCKED = "blocked"
    NEEDS_INPUT = "needs_input"
    WAKE_BUDGET_EXHAUSTED = "wake_budget_exhausted"
    QUEUED = "queued"
    COMPLETED = "completed"
    STOPPED = "stopped"
    PAUSED = "paused"
    MODEL_UNAVAILABLE = "model_unavailable"
    TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"  # noqa: S105 (a reason, not a secret)
    VERIFYING = "verifying"
    """CompleteWorkItem was called and the item's acceptance checks are running."""
    MISSING_SECRET = "missing_secret"  # noqa: S105 (a reason, not a secret)


_WAITING: dict[SchedulingState, tuple[ReasonKind, WakeKind]] = {
    SchedulingState.WAITING_OPERATOR: (ReasonKind.WAITING_OPERATOR, WakeKind.OPERATOR_INPUT),
    SchedulingState.WAITING_TASK: (ReasonKind.WAITING_TASK, WakeKind.TASK_RESULT),
    SchedulingState.WAITING_EXTERNAL: (ReasonKind.WAITING_EXTERNAL, WakeKind.EXTERNAL),
    SchedulingState.WAITING_TIMER: (ReasonKind.WAITING_TIMER, WakeKind.TIMER),
    SchedulingState.WAITING_SYSTEM: (ReasonKind.WAITING_SYSTEM, WakeKind.SYSTEM),
}


@dataclass(frozen=True, slots=True)
class Reason:
    """The kind, plus the one fact that explains it (the wait, the blocker, the rank, ...)."""

    kind: ReasonKind
    wait: WaitingIntent | None = None
    text: str | None = None
    """The blocker for `blocked`, the completion report for `completed`."""
    rank: int | None = None
    """For `queued`: 1 is the next queued runnable item in ranking order."""
    tick_id: str | None = None
    """For `tick_pending`: the outstanding tick, or the one the scheduler would publish now."""
    budget: WakeBudget | None = None
    awaiting: tuple[str, ...] = ()
    """For `verifying`: the checks still awaited (`webhook <url>`, `operator_approval`)."""


def _not_runnable(
    item: WorkItem, state: SchedulingState, waits: tuple[WaitingIntent, ...]
) -> Reason:
    if item.is_verifying:
        pending = awaited(item.acceptance, item.verification)
        return Reason(ReasonKind.VERIFYING, awaiting=tuple(pending))
    if state is SchedulingState.BLOCKED:
        return Reason(ReasonKind.BLOCKED, text=item.blocked_by)
    kind, wake = _WAITING[state]
    matching = [w for w in active_waits_of(item, waits) if w.wake is wake]
    if not matching and item.plan_status is PlanStatus.NEEDS_INPUT:
        return Reason(ReasonKind.NEEDS_INPUT, text=item.blocked_by)
    # Several active waits of one kind only exist transiently; the newest is the live one.
    return Reason(kind, wait=matching[-1] if matching else None)


_HELD = {
    Hold.MISSING_SECRET: ReasonKind.MISSING_SECRET,
    Hold.MODEL_UNAVAILABLE: ReasonKind.MODEL_UNAVAILABLE,
    Hold.TOKEN_BUDGET_EXHAUSTED: ReasonKind.TOKEN_BUDGET_EXHAUSTED,
}


_OPERATOR = {Posture.STOPPED: ReasonKind.STOPPED, Posture.PAUSED: ReasonKind.PAUSED}
"""The postures the operator holds an agent in (retired, paused)."""


def _current(snapshot: AgentSnapshot, now: datetime) -> Reason:
    if snapshot.outstanding_tick_id is not None:
        return Reason(ReasonKind.TICK_PENDING, tick_id=snapshot.outstanding_tick_id)
    decision = decide(snapshot, now)
    held = _HELD.get(decision.hold) if decision.hold is not None else None
    if held is not None:
        return Reason(held)
    if decision.tick is None:
        return Reason(ReasonKind.WAKE_BUDGET_EXHAUSTED, budget=snapshot.agent.wake_budget)
    return Reason(ReasonKind.TICK_PENDING, tick_id=decision.tick.tick_id)


def _queued(item: WorkItem, snapshot: AgentSnapshot, now: datetime) -> Reason:
    ranked = rank(snapshot.work_items, snapshot.waits, snapshot.agent.current_work_item_id)
    has_current = any(e.candidate_class is CandidateClass.CURRENT_RUNNABLE for e in ranked)
    if not has_current and decide(snapshot, now).hold is Hold.WAKE_BUDGET_EXHAUSTED:
        return Reason(ReasonKind.WAKE_BUDGET_EXHAUSTED, budget=snapshot.agent.wake_budget)
    queued = [e.item.id for e in ranked if e.candidate_class is CandidateClass.QUEUED_RUNNABLE]
    position = queued.index(item.id) + 1 if item.id in queued else None
    return Reason(ReasonKind.QUEUED, rank=position)


def why_not_running(item: WorkItem, snapshot: AgentSnapshot, now: datetime) -> Reason:
    """First match wins: completed, running, verifying, not runnable, stopped, current, queued."""
    if item.state is WorkItemState.COMPLETED:
        return Reason(ReasonKind.COMPLETED, text=item.result_summary)
    is_current = item.id == snapshot.agent.current_work_item_id
    if is_current and snapshot.turn_running:
        return Reason(ReasonKind.RUNNING)
    state = scheduling_state(item, snapshot.waits)
    if state is not SchedulingState.RUNNABLE:
        return _not_runnable(item, state, snapshot.waits)
    held = _OPERATOR.get(snapshot.agent.posture)
    if held is not None:
        return Reason(held)
    if is_current:
        return _current(snapshot, now)
    return _queued(item, snapshot, now)
