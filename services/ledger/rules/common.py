"""Small steps several ledger rules share: revising an item, cancelling waits, views, focus, and
a delegation's bookkeeping."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from services.ledger.rules.state import LedgerState
from shared.domain.delegation import DelegationRecord
from shared.domain.readouts import work_item_view_json
from shared.domain.records import WaitingIntent, WaitStatus, WorkItem
from shared.domain.stored import AgentRecord
from shared.domain.tools import DEFAULT_RECHECK_AFTER_MS
from shared.domain.views import is_runnable
from shared.wire.events import (
    DelegationFinished,
    Event,
    TimerScheduled,
    WaitCancelled,
    WakeBudgetReset,
    WorkItemFocusReleased,
)


def revise(item: WorkItem, now: datetime, **changes: Any) -> WorkItem:
    """A new revision of the item: every write moves `revision` and `updated_at`."""
    return item.model_copy(update={**changes, "revision": item.revision + 1, "updated_at": now})


def recheck_after(now: datetime, ms: int | None) -> datetime:
    return now + timedelta(milliseconds=ms if ms is not None else DEFAULT_RECHECK_AFTER_MS)


def recheck_deadline(
    state: LedgerState, work_item_id: str, now: datetime, ms: int | None
) -> datetime:
    """`recheck_after`, but never before an active timer wait of the item is due: the agent
    asked to be woken then, and a recheck earlier would wake it for nothing."""
    deadline = recheck_after(now, ms)
    timers = [w.wake_at for w in state.waits_of(work_item_id) if w.wake_at is not None]
    return max([deadline, *timers])


def cancel_waits(
    state: LedgerState, work_item_id: str | None, now: datetime, cause: str
) -> tuple[LedgerState, list[Event]]:
    """Cancel every active wait of one owner (an item, or the agent scope when None)."""
    events: list[Event] = []
    for wait in state.waits_of(work_item_id):
        cancelled = wait.model_copy(update={"status": WaitStatus.CANCELLED, "cancelled_at": now})
        state = state.with_wait(cancelled)
        events.append(
            WaitCancelled(
                agent_id=state.agent_id, work_item_id=work_item_id, wait_id=wait.id, cause=cause
            )
        )
    return state, events


def release_focus(
    state: LedgerState, work_item_id: str, cause: str
) -> tuple[LedgerState, list[Event]]:
    """Release focus if the item is current (a non-runnable item loses focus, contract §3)."""
    agent = state.agent
    if agent is None or agent.state.current_work_item_id != work_item_id:
        return state, []
    new_state = agent.state.model_copy(update={"current_work_item_id": None})
    state = state.with_agent(agent.model_copy(update={"state": new_state}))
    return state, [
        WorkItemFocusReleased(agent_id=state.agent_id, work_item_id=work_item_id, cause=cause)
    ]


def set_current(agent: AgentRecord, work_item_id: str | None) -> AgentRecord:
    return agent.model_copy(
        update={"state": agent.state.model_copy(update={"current_work_item_id": work_item_id})}
    )


def view(state: LedgerState, item: WorkItem, *, include_todo_list: bool = True) -> dict[str, Any]:
    return work_item_view_json(
        item, state.active_waits(), state.current_id, include_todo_list=include_todo_list
    )


def runnable(state: LedgerState, item: WorkItem) -> bool:
    return is_runnable(item, state.active_waits())


def recheck_timer(state: LedgerState, item: WorkItem) -> list[Event]:
    if item.recheck_at is None:
        return []
    return [TimerScheduled(agent_id=state.agent_id, work_item_id=item.id, due_at=item.recheck_at)]


def wait_json(wait: WaitingIntent) -> dict[str, Any]:
    return wait.model_dump(mode="json")


def with_running(agent: AgentRecord, record: DelegationRecord) -> AgentRecord:
    """The agent with `record` among its running delegations while it runs, and gone after."""
    running = dict(agent.delegations_out)
    if record.running:
        running[record.id] = record
    else:
        running.pop(record.id, None)
    return agent.model_copy(update={"delegations_out": running})


def delegation_finished(
    agent_id: str, work_item_id: str | None, record: DelegationRecord, cause: str
) -> DelegationFinished:
    """The delegation's end as this side saw it, on this side's WorkItem."""
    return DelegationFinished(
        agent_id=agent_id,
        work_item_id=work_item_id,
        delegation_id=record.id,
        status=record.status,
        report=record.report,
        cause=cause,
    )


def fresh_input(state: LedgerState, cause: str) -> tuple[LedgerState, list[Event]]:
    """Fresh input (an operator message, a callback, a task result, a timer firing) resets the
    wake budget. A recheck is not fresh input: it spends the budget like any autonomous wake."""
    agent = state.require_agent()
    if agent.nudge_pending:
        # Fresh input pays for the wake a delegation result (a nudge) was waiting for.
        agent = agent.model_copy(update={"nudge_pending": False})
        state = state.with_agent(agent)
    if agent.state.wake_budget.used == 0:
        return state, []
    budget = agent.state.wake_budget.model_copy(update={"used": 0})
    agent = agent.model_copy(
        update={
            "state": agent.state.model_copy(update={"wake_budget": budget}),
            "exhaustion_reported": False,
        }
    )
    return state.with_agent(agent), [WakeBudgetReset(agent_id=state.agent_id, cause=cause)]
