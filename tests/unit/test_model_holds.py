"""The scheduler holds an agent whose model is out until `retry_at`, and one whose daily token
budget is spent until the UTC day turns or the limit is raised: messages still land, no turn
starts, and the budget's exhaustion is reported once per day."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from services.scheduler.policy import Hold, decide, park_reason
from shared.domain.model_failures import ModelOutage
from shared.domain.records import Posture
from shared.domain.usage import DayTokens, resets_at, utc_day
from shared.wire.commands import ParkReason
from tests.unit.test_scheduler_policy import NOW, agent, item, snapshot

RUNNABLE = snapshot((item(1),), state=agent(current=1), inbox=1)


def test_an_outage_holds_every_tick_until_retry_at() -> None:
    retry_at = NOW + timedelta(seconds=30)
    held = replace(RUNNABLE, model_outage=ModelOutage(provider="openai", retry_at=retry_at))
    decision = decide(held, NOW)
    assert (decision.tick, decision.hold, decision.posture) == (
        None,
        Hold.MODEL_UNAVAILABLE,
        Posture.IDLE,
    )
    assert decision.wake_at == retry_at
    woken = decide(held, retry_at)
    assert woken.tick is not None
    assert woken.tick.kind.value == "input"


def test_a_spent_budget_holds_until_midnight_and_is_reported_once_a_day() -> None:
    spent = DayTokens(day=utc_day(NOW), tokens=1000)
    held = replace(RUNNABLE, daily_token_budget=1000, day_tokens=spent)
    decision = decide(held, NOW)
    assert (decision.tick, decision.hold) == (None, Hold.TOKEN_BUDGET_EXHAUSTED)
    assert decision.wake_at == resets_at(NOW)
    assert decision.token_budget is not None
    assert (decision.token_budget.used, decision.token_budget.limit) == (1000, 1000)
    assert decision.report_token_budget
    assert park_reason(decision, held) is ParkReason.TOKEN_BUDGET_EXHAUSTED

    reported = replace(
        held, budget_reported_day=utc_day(NOW), agent=agent(current=1, posture=Posture.IDLE)
    )
    again = decide(reported, NOW)
    assert not again.report_token_budget
    assert park_reason(again, reported) is None

    assert decide(held, resets_at(NOW)).tick is not None
    raised = replace(held, daily_token_budget=1001)
    assert decide(raised, NOW).tick is not None
