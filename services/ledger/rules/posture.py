"""Ledger rules for the agent's resting posture: where a finished turn leaves it, where a spec
change or the scheduler parks it. Every hold is decided in the write that causes it, with its
posture and its announcement, so no reader ever sees a hold with a posture that contradicts it:
a spent wake budget, a spent daily token budget, a model outage and a missing secret all leave
the agent `idle`, whichever write (a turn's end, a spec change, a park) brings them about."""

from __future__ import annotations

from datetime import datetime

from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.records import Posture
from shared.domain.stored import AgentRecord
from shared.domain.usage import budget_exhausted, utc_day
from shared.domain.views import is_runnable
from shared.wire.commands import ParkAgent, ParkReason
from shared.wire.events import (
    AgentParked,
    Event,
    TokenBudgetExhausted,
    WakeBudgetExhausted,
)


def resting_posture(state: LedgerState) -> Posture:
    """Idle when runnable work is left (yielded), dormant when nothing is runnable."""
    waits = state.active_waits()
    if any(item.is_open and is_runnable(item, waits) for item in state.items.values()):
        return Posture.IDLE
    return Posture.DORMANT


def operator_posture(agent: AgentRecord) -> Posture | None:
    """The posture the operator's control holds the agent in, whatever its work: `stopped`
    once retired, `paused` while paused; None when the operator holds nothing."""
    if agent.retired is not None:
        return Posture.STOPPED
    if agent.paused is not None:
        return Posture.PAUSED
    return None


def model_hold(agent: AgentRecord, now: datetime) -> ParkReason | None:
    """The hold in force at `now` that no turn may start under, in the scheduler's order (a
    missing secret, a model outage, each until `retry_at`; the day's token budget spent)."""
    if agent.missing_secret is not None and agent.missing_secret.retry_at > now:
        return ParkReason.MISSING_SECRET
    if agent.model_outage is not None and agent.model_outage.retry_at > now:
        return ParkReason.MODEL_UNAVAILABLE
    if budget_exhausted(agent.day_tokens, agent.daily_token_budget, now) is not None:
        return ParkReason.TOKEN_BUDGET_EXHAUSTED
    return None


def _wake_exhaustion(agent: AgentRecord) -> list[Event]:
    budget = agent.state.wake_budget
    return [
        AgentParked(
            agent_id=agent.state.agent_id,
            posture=Posture.IDLE,
            reason=ParkReason.WAKE_BUDGET_EXHAUSTED.value,
        ),
        WakeBudgetExhausted(agent_id=agent.state.agent_id, used=budget.used, limit=budget.limit),
    ]


def hold_token_budget(state: LedgerState, now: datetime) -> tuple[LedgerState, list[Event]]:
    """With the day's token budget spent and no turn running: the agent `idle`, parked with
    reason `token_budget_exhausted`, and the day's one `token_budget_exhausted` event if it was
    not recorded yet, all in the calling write."""
    agent = state.require_agent()
    spent = budget_exhausted(agent.day_tokens, agent.daily_token_budget, now)
    if spent is None or agent.current_turn_id is not None or operator_posture(agent):
        return state, []
    day = utc_day(now)
    announce = agent.budget_reported_day != day
    if agent.state.posture is Posture.IDLE and not announce:
        return state, []
    agent = agent.model_copy(
        update={
            "state": agent.state.model_copy(update={"posture": Posture.IDLE}),
            "budget_reported_day": day,
        }
    )
    events: list[Event] = [
        AgentParked(
            agent_id=state.agent_id,
            posture=Posture.IDLE,
            reason=ParkReason.TOKEN_BUDGET_EXHAUSTED.value,
        )
    ]
    if announce:
        events.append(
            TokenBudgetExhausted(
                agent_id=state.agent_id,
                used=spent.used,
                limit=spent.limit,
                resets_at=spent.resets_at,
            )
        )
    return state.with_agent(agent), events


def rest_after_turn(
    state: LedgerState, now: datetime, *, inbox_left: bool, posture: Posture | None = None
) -> tuple[LedgerState, list[Event]]:
    """The posture a finished turn leaves the agent in (`posture`, or the one its work
    implies). A token budget the turn spent parks the agent now (the scheduler would hold it
    first of all). Runnable work left with the wake budget spent and no fresh input waiting
    (inbox, unreviewed triggers) is the scheduler's park too: announced now rather than later."""
    agent = state.require_agent()
    operator = operator_posture(agent)
    posture = operator or posture or resting_posture(state)
    held = model_hold(agent, now) is not None
    announce = (
        operator is None
        and posture is Posture.IDLE
        and not held
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
    state = state.with_agent(agent)
    if announce:
        return state, _wake_exhaustion(agent)
    return hold_token_budget(state, now)


_MODEL_SIDE = frozenset(
    {ParkReason.MISSING_SECRET, ParkReason.MODEL_UNAVAILABLE, ParkReason.TOKEN_BUDGET_EXHAUSTED}
)


def park_agent(state: LedgerState, cmd: ParkAgent, ctx: Context) -> Decision:
    """Record why the scheduler sent no tick; budget exhaustion is announced once per budget.
    A hold in force keeps the agent idle whatever the park says: a park decided on an older
    snapshot (before the hold began) never makes a held agent look dormant."""
    agent = state.require_agent()
    if agent.current_turn_id is not None or operator_posture(agent) is not None:
        # A running turn rests where its end leaves it; the operator's hold outranks any park.
        return Decision(state=state, result={"parked": False, "posture": agent.state.posture.value})
    held = model_hold(agent, ctx.now)
    if held is ParkReason.TOKEN_BUDGET_EXHAUSTED:
        state, events = hold_token_budget(state, ctx.now)
        posture = state.require_agent().state.posture
        return Decision(state, tuple(events), {"parked": bool(events), "posture": posture.value})
    if cmd.reason in _MODEL_SIDE and held is None:
        # Decided on a snapshot whose hold has ended since (a raised limit, a new day, a spec
        # change): the scheduler decides again from the event that ended it.
        return Decision(state=state, result={"parked": False, "posture": agent.state.posture.value})
    exhausted = cmd.reason is ParkReason.WAKE_BUDGET_EXHAUSTED
    dormant = cmd.reason is ParkReason.NOTHING_RUNNABLE and held is None
    posture = Posture.DORMANT if dormant else Posture.IDLE
    announce = exhausted and not agent.exhaustion_reported
    if agent.state.posture is posture and not announce:
        return Decision(state=state, result={"parked": False, "posture": posture.value})
    agent = agent.model_copy(
        update={
            "state": agent.state.model_copy(update={"posture": posture}),
            "exhaustion_reported": agent.exhaustion_reported or exhausted,
        }
    )
    state = state.with_agent(agent)
    if announce:
        events = _wake_exhaustion(agent)
    else:
        reason = held.value if held is not None else cmd.reason.value
        events = [AgentParked(agent_id=state.agent_id, posture=posture, reason=reason)]
    return Decision(state, tuple(events), {"parked": True, "posture": posture.value})
