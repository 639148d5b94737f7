"""Ledger rules for the inbox a turn is shown: consumed once when the turn reaches its end, kept
for the next turn when it fails or is interrupted, and set aside (visibly, never silently) once
the same messages have been shown to three failed attempts."""

from __future__ import annotations

from services.ledger.rules.state import Context, LedgerState, SideWrites
from shared.domain.records import BriefKind, BriefRecord
from shared.domain.stored import MAX_TURN_ATTEMPTS
from shared.wire.events import BriefRecorded, Event, InboxUndeliverable


def consumed_by_success(state: LedgerState, reported: int) -> tuple[LedgerState, int]:
    """How many messages from the inbox's head the finished turn consumed: the ones it opened
    with, or more when the executor counts messages the turn took in while it ran."""
    agent = state.require_agent()
    shown = agent.turn_inbox
    if agent.inbox_failed:
        failed = {m: n for m, n in agent.inbox_failed.items() if m not in shown}
        state = state.with_agent(agent.model_copy(update={"inbox_failed": failed}))
    return state, max(len(shown), reported)


def failed_attempt(
    state: LedgerState, work_item_id: str | None, error: str, ctx: Context
) -> tuple[LedgerState, list[Event], SideWrites]:
    """Count one failed attempt against every message the turn was shown; set aside the head
    of the inbox that has now failed `MAX_TURN_ATTEMPTS` times, with a failure brief naming
    each message and the last error, so the operator learns what was not delivered."""
    agent = state.require_agent()
    shown = agent.turn_inbox
    # The shown messages are the inbox's head, so only messages shown to every attempt since
    # they arrived can reach the limit, and they are the head's first ones.
    counts = {m: agent.inbox_failed.get(m, 0) + 1 for m in shown}
    aside: list[str] = []
    for message_id in shown:
        if counts[message_id] < MAX_TURN_ATTEMPTS:
            break
        aside.append(message_id)
        del counts[message_id]
    kept = shown[len(aside) :]
    agent = agent.model_copy(update={"inbox_failed": counts, "turn_inbox": kept})
    state = state.with_agent(agent)
    if not aside:
        return state, [], SideWrites()
    brief = BriefRecord(
        id=ctx.new_id("brief_"),
        agent_id=state.agent_id,
        work_item_id=work_item_id,
        kind=BriefKind.FAILURE,
        text=(
            f"{len(aside)} inbox message(s) set aside after {MAX_TURN_ATTEMPTS} failed turns "
            f"were shown them: {', '.join(aside)}. Last error: {error}"
        )[:4000],
        turn_id=agent.current_turn_id,
        created_at=ctx.now,
        in_reply_to=tuple(aside),
    )
    events: list[Event] = [
        InboxUndeliverable(
            agent_id=state.agent_id,
            work_item_id=work_item_id,
            message_ids=tuple(aside),
            attempts=MAX_TURN_ATTEMPTS,
            error=error[:2000],
        ),
        BriefRecorded(agent_id=state.agent_id, work_item_id=work_item_id, brief=brief),
    ]
    return state, events, SideWrites(inbox_pop=len(aside), briefs=(brief,))
