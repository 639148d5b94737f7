"""Ledger rules for agents and turns: creation, turn begin/finish with fencing, failure counting,
parking, plan refresh and liveness records."""

from __future__ import annotations

from services.ledger.rules.common import recheck_deadline, recheck_timer, release_focus, revise
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.capability import token_id_of
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import (
    AgentState,
    BriefKind,
    BriefRecord,
    Posture,
    WakeBudget,
)
from shared.domain.stored import MAX_TURN_ATTEMPTS, AgentRecord, CapabilityRecord
from shared.domain.views import is_runnable
from shared.domain.wake import AUTONOMOUS_TICKS
from shared.wire.commands import (
    BeginTurn,
    EnsureAgent,
    FinishTurn,
    ParkAgent,
    ParkReason,
    RecordLivenessRepair,
    RecordTranscript,
    RefreshPlanArtifact,
    TurnOutcome,
)
from shared.wire.events import (
    AgentCreated,
    AgentParked,
    BriefRecorded,
    Event,
    LivenessRepaired,
    PlanArtifactRefreshed,
    TranscriptRecorded,
    TurnFinished,
    TurnStarted,
    WakeBudgetExhausted,
    WorkItemUpdated,
)


def ensure_agent(state: LedgerState, cmd: EnsureAgent, ctx: Context) -> Decision:
    if state.agent is not None:
        agent = state.agent.state
        result = {"created": False, "agent_id": agent.agent_id, "loop": agent.loop.value}
        return Decision(state=state, result=result)
    callback_token_id = token_id_of(cmd.callback_token_hash)
    record = AgentRecord(
        state=AgentState(
            agent_id=state.agent_id, loop=cmd.loop, wake_budget=WakeBudget(limit=ctx.wake_limit)
        ),
        version=1,
        agent_token_hash=cmd.agent_token_hash,
        callback_token_id=callback_token_id,
        created_at=ctx.now,
    )
    cap = CapabilityRecord(token_id=callback_token_id, agent_id=state.agent_id, wait_id=None)
    state = state.with_agent(record)
    result = {"created": True, "agent_id": state.agent_id, "loop": cmd.loop.value}
    side = SideWrites(capabilities=((cmd.callback_token_hash, cap),))
    return Decision(
        state, (AgentCreated(agent_id=state.agent_id, loop=cmd.loop),), result, side=side
    )


def check_fence(state: LedgerState, token: int | None) -> None:
    """A write carrying a fencing token is refused once a newer turn holds the agent."""
    if token is not None and token != state.fence:
        raise DomainError(
            ErrorKind.STALE_TURN,
            f"fencing token {token} is superseded (current {state.fence})",
        )


def _count_failure(
    state: LedgerState, work_item_id: str | None, error: str, ctx: Context
) -> tuple[LedgerState, list[Event]]:
    """One more failed attempt on the item; the third blocks it and releases focus."""
    agent = state.require_agent()
    if work_item_id is None or work_item_id not in state.items:
        return state, []
    attempts = agent.failed_attempts.get(work_item_id, 0) + 1
    agent = agent.model_copy(
        update={"failed_attempts": {**agent.failed_attempts, work_item_id: attempts}}
    )
    state = state.with_agent(agent)
    item = state.items[work_item_id]
    if attempts < MAX_TURN_ATTEMPTS or not item.is_open:
        return state, []
    changes = {
        "blocked_by": f"turn failed {attempts} times: {error}"[:2000],
        "recheck_at": recheck_deadline(state, item.id, ctx.now, None),
        "recheck_consumed_at": None,
    }
    item = revise(item, ctx.now, **changes)
    state = state.with_item(item)
    events: list[Event] = [
        WorkItemUpdated(
            agent_id=state.agent_id, work_item_id=item.id, work_item=item, changed=tuple(changes)
        ),
        *recheck_timer(state, item),
    ]
    state, released = release_focus(state, item.id, "turn_failed")
    return state, events + released


def _mark_reviewed(state: LedgerState, reviewed: dict[str, int]) -> LedgerState:
    for wait_id, count in reviewed.items():
        wait = state.waits.get(wait_id)
        if wait is None:
            continue
        shown = min(count, wait.trigger_count)
        if shown > wait.reviewed_trigger_count:
            state = state.with_wait(wait.model_copy(update={"reviewed_trigger_count": shown}))
    return state


def begin_turn(state: LedgerState, cmd: BeginTurn, ctx: Context) -> Decision:
    agent = state.require_agent()
    check_fence(state, cmd.fencing_token)
    events: list[Event] = []
    interrupted = agent.current_turn_id if agent.current_turn_id != cmd.turn_id else None
    if interrupted is not None:
        # The previous turn never finished: its executor died (lease expired).
        state, failed = _count_failure(
            state, agent.current_turn_work_item_id, "previous turn was interrupted", ctx
        )
        events.append(
            TurnFinished(
                agent_id=state.agent_id,
                work_item_id=agent.current_turn_work_item_id,
                turn_id=interrupted,
                outcome=TurnOutcome.INTERRUPTED,
                error="executor lost its lease",
            )
        )
        events += failed
        agent = state.require_agent()
    budget = agent.state.wake_budget
    if cmd.tick_kind in AUTONOMOUS_TICKS:
        budget = budget.model_copy(update={"used": budget.used + 1})
    turn_index = agent.state.turn_index + 1
    new_state = agent.state.model_copy(
        update={"posture": Posture.RUNNING, "turn_index": turn_index, "wake_budget": budget}
    )
    current = new_state.current_work_item_id
    agent = agent.model_copy(
        update={
            "state": new_state,
            "current_turn_id": cmd.turn_id,
            "current_turn_work_item_id": current,
            # An interrupted turn's review is dropped here: it never reached its end.
            "turn_reviewed": dict(cmd.reviewed_triggers),
        }
    )
    state = state.with_agent(agent)
    events.append(
        TurnStarted(
            agent_id=state.agent_id,
            work_item_id=current,
            turn_id=cmd.turn_id,
            fencing_token=cmd.fencing_token,
            tick_kind=cmd.tick_kind,
            turn_index=turn_index,
            interrupted_turn_id=cmd.interrupted_turn_id or interrupted,
            tick_id=cmd.tick_id,
        )
    )
    result = {"turn_id": cmd.turn_id, "turn_index": turn_index, "current_work_item_id": current}
    return Decision(state=state, events=tuple(events), result=result)


def _resting_posture(state: LedgerState) -> Posture:
    """Idle when runnable work is left (yielded), dormant when nothing is runnable."""
    waits = state.active_waits()
    if any(item.is_open and is_runnable(item, waits) for item in state.items.values()):
        return Posture.IDLE
    return Posture.DORMANT


def finish_turn(state: LedgerState, cmd: FinishTurn, ctx: Context) -> Decision:
    agent = state.require_agent()
    check_fence(state, cmd.fencing_token)
    if agent.current_turn_id != cmd.turn_id:
        return Decision(state=state, result={"turn_id": cmd.turn_id, "finished": False})
    events: list[Event] = [
        TurnFinished(
            agent_id=state.agent_id,
            work_item_id=cmd.work_item_id,
            turn_id=cmd.turn_id,
            outcome=cmd.outcome,
            error=cmd.error,
        )
    ]
    side = SideWrites(inbox_pop=cmd.inbox_consumed)
    failed = cmd.outcome in (TurnOutcome.FAILED, TurnOutcome.INTERRUPTED)
    if failed:
        state, blocked = _count_failure(state, cmd.work_item_id, cmd.error or "unknown error", ctx)
        events += blocked
        side, brief_event = _failure_brief(state, cmd, ctx, side)
        events.append(brief_event)
    else:
        # The turn reached its end: the triggers it showed are reviewed (once each).
        state = _mark_reviewed(state, agent.turn_reviewed)
        if cmd.work_item_id is not None:
            attempts = dict(state.require_agent().failed_attempts)
            attempts.pop(cmd.work_item_id, None)
            state = state.with_agent(
                state.require_agent().model_copy(update={"failed_attempts": attempts})
            )
    agent = state.require_agent()
    agent = agent.model_copy(
        update={
            "state": agent.state.model_copy(update={"posture": _resting_posture(state)}),
            "current_turn_id": None,
            "current_turn_work_item_id": None,
            "turn_reviewed": {},
        }
    )
    state = state.with_agent(agent)
    return Decision(state, tuple(events), {"turn_id": cmd.turn_id, "finished": True}, side=side)


def _failure_brief(
    state: LedgerState, cmd: FinishTurn, ctx: Context, side: SideWrites
) -> tuple[SideWrites, Event]:
    brief = BriefRecord(
        id=ctx.new_id("brief_"),
        agent_id=state.agent_id,
        work_item_id=cmd.work_item_id,
        kind=BriefKind.FAILURE,
        text=(cmd.error or f"turn {cmd.outcome.value}")[:4000],
        turn_id=cmd.turn_id,
        created_at=ctx.now,
    )
    side = SideWrites(inbox_pop=side.inbox_pop, briefs=(brief,))
    return side, BriefRecorded(agent_id=state.agent_id, work_item_id=cmd.work_item_id, brief=brief)


def refresh_plan_artifact(state: LedgerState, cmd: RefreshPlanArtifact, ctx: Context) -> Decision:
    state.require_agent()
    check_fence(state, cmd.fencing_token)
    item = state.open_item(cmd.work_item_id)
    if item.plan_artifact == cmd.artifact:
        return Decision(state=state, result={"refreshed": False})
    item = revise(item, ctx.now, plan_artifact=cmd.artifact)
    state = state.with_item(item)
    event = PlanArtifactRefreshed(
        agent_id=state.agent_id, work_item_id=item.id, artifact=cmd.artifact
    )
    return Decision(state, (event,), {"refreshed": True})


def park_agent(state: LedgerState, cmd: ParkAgent, ctx: Context) -> Decision:
    """Record why the scheduler sent no tick; budget exhaustion is announced once per budget."""
    agent = state.require_agent()
    if agent.current_turn_id is not None:
        return Decision(state=state, result={"parked": False, "posture": agent.state.posture.value})
    exhausted = cmd.reason is ParkReason.WAKE_BUDGET_EXHAUSTED
    posture = Posture.IDLE if exhausted else Posture.DORMANT
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
    events: list[Event] = [
        AgentParked(agent_id=state.agent_id, posture=posture, reason=cmd.reason.value)
    ]
    if announce:
        budget = agent.state.wake_budget
        events.append(
            WakeBudgetExhausted(agent_id=state.agent_id, used=budget.used, limit=budget.limit)
        )
    return Decision(state, tuple(events), {"parked": True, "posture": posture.value})


def record_transcript(state: LedgerState, cmd: RecordTranscript, ctx: Context) -> Decision:
    state.require_agent()
    check_fence(state, cmd.fencing_token)
    event = TranscriptRecorded(
        agent_id=state.agent_id,
        work_item_id=cmd.work_item_id,
        turn_id=cmd.turn_id,
        entries=len(cmd.entries),
    )
    side = SideWrites(transcript=tuple((cmd.turn_id, cmd.work_item_id, e) for e in cmd.entries))
    return Decision(state, (event,), {"recorded": len(cmd.entries)}, side=side)


def record_liveness_repair(state: LedgerState, cmd: RecordLivenessRepair, ctx: Context) -> Decision:
    state.require_agent()
    event = LivenessRepaired(agent_id=state.agent_id, work_item_id=cmd.work_item_id, kind=cmd.kind)
    return Decision(state, (event,), {"recorded": True})
