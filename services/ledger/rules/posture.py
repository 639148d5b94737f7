"""Ledger rules for the agent's resting posture: where a finished turn leaves it, and where the
scheduler parks it. A spent wake budget is announced in the same write as the posture it
causes, so no reader sees an agent parked by its budget without the announcement."""

from __future__ import annotations

from services.ledger.rules.models import park_for_model
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.records import Posture
from shared.domain.stored import AgentRecord
from shared.domain.usage import utc_day
from shared.domain.views import is_runnable
from shared.wire.commands import ParkAgent, ParkReason
from shared.wire.events import AgentParked, Event, WakeBudgetExhausted


def resting_posture(state: LedgerState) -> Posture:
    """Idle when runnable work is left (yielded), dormant when nothing is runnable."""
    waits = state.active_waits()
    if any(item.is_open and is_runnable(item, waits) for item in state.items.values()):
        return Posture.IDLE
    return Posture.DORMANT


def _exhaustion(agent: AgentRecord) -> list[Event]:
    budget = agent.state.wake_budget
    return [
        AgentParked(
            agent_id=agent.state.agent_id,
            posture=Posture.IDLE,
            reason=ParkReason.WAKE_BUDGET_EXHAUSTED.value,
        ),
        WakeBudgetExhausted(agent_id=agent.state.agent_id, used=budget.used, limit=budget.limit),
    ]


def rest_after_turn(
    state: LedgerState, *, inbox_left: bool, posture: Posture | None = None
) -> tuple[LedgerState, list[Event]]:
    """The posture a finished turn leaves the agent in (`posture`, or the one its work
    implies). Runnable work left with the budget spent and no fresh input waiting (inbox,
    unreviewed triggers) is the scheduler's park too: announce it now rather than later."""
    agent = state.require_agent()
    posture = posture or resting_posture(state)
    announce = (
        posture is Posture.IDLE
        and agent.state.wake_budget.exhausted
        and not agent.exhaustion_reported
        and not inbox_left
        and not any(w.has_unreviewed_triggers for w in state.active_waits())
    )
    agent = agent.model_copy(
        update={
            "state": agent.state.model_copy(update={"posture": posture}),
            "current_turn_id": None,
            "current_turn_work_item_id": None,
            "turn_reviewed": {},
            "turn_inbox": (),
            "exhaustion_reported": agent.exhaustion_reported or announce,
        }
    )
    return state.with_agent(agent), _exhaustion(agent) if announce else []


def park_agent(state: LedgerState, cmd: ParkAgent, ctx: Context) -> Decision:
    """Record why the scheduler sent no tick; budget exhaustion is announced once per budget."""
    agent = state.require_agent()
    if agent.current_turn_id is not None:
        return Decision(state=state, result={"parked": False, "posture": agent.state.posture.value})
    exhausted = cmd.reason is ParkReason.WAKE_BUDGET_EXHAUSTED
    posture = Posture.DORMANT if cmd.reason is ParkReason.NOTHING_RUNNABLE else Posture.IDLE
    announce = exhausted and not agent.exhaustion_reported
    spent, model_events = park_for_model(state, cmd, ctx)
    if agent.state.posture is posture and not announce and not spent:
        return Decision(state=state, result={"parked": False, "posture": posture.value})
    agent = agent.model_copy(
        update={
            "state": agent.state.model_copy(update={"posture": posture}),
            "exhaustion_reported": agent.exhaustion_reported or exhausted,
            "budget_reported_day": utc_day(ctx.now) if spent else agent.budget_reported_day,
        }
    )
    state = state.with_agent(agent)
    if announce:
        events = _exhaustion(agent)
    else:
        events = [AgentParked(agent_id=state.agent_id, posture=posture, reason=cmd.reason.value)]
    events += model_events
    return Decision(state, tuple(events), {"parked": True, "posture": posture.value})
