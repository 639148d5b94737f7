"""Ledger rules for agents and turns: creation, turn begin/finish with fencing, failure counting,
parking, plan refresh and liveness records."""

from __future__ import annotations

from dataclasses import replace

from services.ledger.rules.common import recheck_deadline, recheck_timer, release_focus, revise
from services.ledger.rules.inbox import consumed_by_success, failed_attempt
from services.ledger.rules.models import account_model_calls
from services.ledger.rules.posture import rest_after_turn
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import (
    BriefKind,
    BriefRecord,
    Posture,
)
from shared.domain.stored import MAX_TURN_ATTEMPTS
from shared.domain.usage import UsageRecord
from shared.domain.wake import AUTONOMOUS_TICKS
from shared.wire.commands import (
    BeginTurn,
    FinishTurn,
    RecordLivenessRepair,
    RecordTranscript,
    RefreshPlanArtifact,
    TurnOutcome,
)
from shared.wire.events import (
    BriefRecorded,
    Event,
    LivenessRepaired,
    PlanArtifactRefreshed,
    TranscriptRecorded,
    TurnFinished,
    TurnStarted,
    WorkItemUpdated,
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
    interrupted = agent.current_turn_id if agent.current_turn_id != cmd.turn_id else None
    events: list[Event] = []
    side = SideWrites()
    shown = cmd.inbox_shown
    if interrupted is not None:
        state, events, side = _interrupted(state, interrupted, ctx)
        # This turn's executor read the inbox before the set-aside messages left it.
        aside = set(agent.turn_inbox[: side.inbox_pop])
        shown = tuple(m for m in shown if m not in aside)
        agent = state.require_agent()
    budget = agent.state.wake_budget
    if cmd.tick_kind in AUTONOMOUS_TICKS or agent.nudge_pending:
        # A turn woken by a delegation result alone (a nudge) spends the budget too.
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
            "turn_inbox": shown,
            "nudge_pending": False,
            # This executor has every variable the spec names.
            "missing_secret": None,
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
    return Decision(state, tuple(events), result, side=side)


def _interrupted(
    state: LedgerState, turn_id: str, ctx: Context
) -> tuple[LedgerState, list[Event], SideWrites]:
    """The previous turn never finished: its executor died (lease expired). It counts as a
    failed attempt on its item and on the inbox it was shown."""
    work_item_id = state.require_agent().current_turn_work_item_id
    error = "previous turn was interrupted"
    state, failed = _count_failure(state, work_item_id, error, ctx)
    state, aside, side = failed_attempt(state, work_item_id, error, ctx)
    finished = TurnFinished(
        agent_id=state.agent_id,
        work_item_id=work_item_id,
        turn_id=turn_id,
        outcome=TurnOutcome.INTERRUPTED,
        error="executor lost its lease",
    )
    return state, [finished, *failed, *aside], side


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
            usage=cmd.usage,
            rounds=cmd.rounds,
            tool_calls=cmd.tool_calls,
            tool_errors=cmd.tool_errors,
        )
    ]
    state, accounted, usage = account_model_calls(state, cmd, ctx)
    events += accounted
    unavailable = cmd.outcome is TurnOutcome.MODEL_UNAVAILABLE
    failed = cmd.outcome in (TurnOutcome.FAILED, TurnOutcome.INTERRUPTED)
    if unavailable or cmd.outcome is TurnOutcome.PAUSED:
        # Not an attempt (the model was out, or the operator stopped the turn): nothing counts,
        # and the triggers and inbox it showed are shown again.
        side = SideWrites(usage=usage)
    elif failed:
        error = cmd.error or f"turn {cmd.outcome.value}"
        state, blocked = _count_failure(state, cmd.work_item_id, error, ctx)
        # The inbox it was shown stays for the next turn (set aside only after three attempts).
        state, aside, side = failed_attempt(state, cmd.work_item_id, error, ctx)
        brief, brief_event = _failure_brief(state, cmd, ctx)
        side = replace(side, briefs=(brief, *side.briefs), usage=usage)
        events += [*blocked, brief_event, *aside]
    else:
        state, side, replied = _reached_end(state, cmd, ctx, usage)
        events += replied
    kept = failed or unavailable or cmd.outcome is TurnOutcome.PAUSED
    inbox_left = kept and bool(state.require_agent().turn_inbox)
    # A turn that met a model outage leaves the agent idle: it runs again at `retry_at`.
    posture = Posture.IDLE if unavailable else None
    state, parked = rest_after_turn(state, ctx.now, inbox_left=inbox_left, posture=posture)
    events += parked
    return Decision(state, tuple(events), {"turn_id": cmd.turn_id, "finished": True}, side=side)


def _reached_end(
    state: LedgerState, cmd: FinishTurn, ctx: Context, usage: UsageRecord | None
) -> tuple[LedgerState, SideWrites, list[Event]]:
    """The turn reached its end: the triggers it showed are reviewed (once each), its inbox is
    consumed, its item's failed attempts are forgotten and its final text is a reply brief."""
    state = _mark_reviewed(state, state.require_agent().turn_reviewed)
    state, consumed = consumed_by_success(state, cmd.inbox_consumed)
    side = SideWrites(inbox_pop=consumed, usage=usage)
    events: list[Event] = []
    if cmd.reply_text and cmd.reply_text.strip():
        brief, brief_event = _reply_brief(state, cmd, ctx)
        side = replace(side, briefs=(brief,))
        events.append(brief_event)
    if cmd.work_item_id is not None:
        agent = state.require_agent()
        attempts = {k: n for k, n in agent.failed_attempts.items() if k != cmd.work_item_id}
        state = state.with_agent(agent.model_copy(update={"failed_attempts": attempts}))
    return state, side, events


def _failure_brief(state: LedgerState, cmd: FinishTurn, ctx: Context) -> tuple[BriefRecord, Event]:
    brief = BriefRecord(
        id=ctx.new_id("brief_"),
        agent_id=state.agent_id,
        work_item_id=cmd.work_item_id,
        kind=BriefKind.FAILURE,
        text=(cmd.error or f"turn {cmd.outcome.value}")[:4000],
        turn_id=cmd.turn_id,
        created_at=ctx.now,
    )
    return brief, BriefRecorded(agent_id=state.agent_id, work_item_id=cmd.work_item_id, brief=brief)


REPLY_CHARS = 16_000
"""A reply brief keeps this much of the turn's final text (the transcript keeps all of it)."""


def _reply_brief(state: LedgerState, cmd: FinishTurn, ctx: Context) -> tuple[BriefRecord, Event]:
    """The turn's final text for the operator, naming the inbox messages it answers."""
    brief = BriefRecord(
        id=ctx.new_id("brief_"),
        agent_id=state.agent_id,
        work_item_id=cmd.work_item_id,
        kind=BriefKind.REPLY,
        text=(cmd.reply_text or "").strip()[:REPLY_CHARS],
        turn_id=cmd.turn_id,
        created_at=ctx.now,
        in_reply_to=cmd.answered,
    )
    return brief, BriefRecorded(agent_id=state.agent_id, work_item_id=cmd.work_item_id, brief=brief)


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
