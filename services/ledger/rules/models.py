"""Ledger rules for what model calls leave behind: a finished turn's usage (the agent's tokens of
the day, one usage record), a model outage (why-not-running `model_unavailable` until
`retry_at`) and its end. The token budget's exhaustion is a posture rule (rules/posture.py)."""

from __future__ import annotations

from typing import Any

from services.ledger.rules.state import Context, LedgerState
from shared.domain.records import Posture
from shared.domain.usage import DayTokens, UsageRecord, utc_day
from shared.wire.commands import FinishTurn, ParkReason, TurnOutcome
from shared.wire.events import AgentParked, Event, ModelRetriesExhausted


def account_model_calls(
    state: LedgerState, cmd: FinishTurn, ctx: Context
) -> tuple[LedgerState, list[Event], UsageRecord | None]:
    """Add the turn's tokens to the agent's day, clear an outage a successful call ended, and
    record a new one when the turn ran out of retries."""
    agent = state.require_agent()
    updates: dict[str, Any] = {}
    events: list[Event] = []
    record = None
    usage = cmd.usage
    if usage is not None and usage.model_calls > 0:
        spent = agent.day_tokens or DayTokens(day=utc_day(ctx.now))
        updates["day_tokens"] = spent.plus(usage, ctx.now)
        updates["model_outage"] = None
        record = UsageRecord(turn_id=cmd.turn_id, at=ctx.now, usage=usage)
    outage = cmd.model_outage
    if cmd.outcome is TurnOutcome.MODEL_UNAVAILABLE and outage is not None:
        updates["model_outage"] = outage
        events.append(
            ModelRetriesExhausted(
                agent_id=state.agent_id,
                work_item_id=cmd.work_item_id,
                provider=outage.provider,
                status=outage.status,
                retry_at=outage.retry_at,
            )
        )
        events.append(
            AgentParked(
                agent_id=state.agent_id, posture=Posture.IDLE, reason=ParkReason.MODEL_UNAVAILABLE
            )
        )
    if updates:
        state = state.with_agent(agent.model_copy(update=updates))
    return state, events, record
