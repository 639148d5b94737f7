"""Ending a turn: the plan refreshes, the transcript and FinishTurn in one round trip, then the
turn's metrics and its log line."""

from __future__ import annotations

import time

from services.turn_executor.opening import confirm
from services.turn_executor.rounds import ToolRunner
from services.turn_executor.turn import Turn, TurnSuperseded, log_turn
from services.turn_executor.turn_writes import refreshed, transcript
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.wire import commands as c

_UNFINISHED = frozenset(
    {
        c.TurnOutcome.FAILED,
        c.TurnOutcome.INTERRUPTED,
        c.TurnOutcome.MODEL_UNAVAILABLE,
        c.TurnOutcome.PAUSED,
    }
)


class TurnCloser:
    def __init__(self, *, client: LedgerClient, runner: ToolRunner, metrics: Metrics) -> None:
        self.client = client
        self.runner = runner
        self.metrics = metrics

    async def finish(
        self, turn: Turn, outcome: c.TurnOutcome, error: str | None, started: float
    ) -> bool:
        """Refresh plans, flush the transcript, FinishTurn; True when the ledger accepted it.

        All in one round trip, in this order on the agent's partition stream: the refreshes and
        FinishTurn carry the same fencing token, so a stale refresh means FinishTurn is refused
        too, as if it had never been sent."""
        await confirm(turn)
        refreshes = self.runner.plan_refreshes(turn)
        published: list[c.Command] = [*transcript(turn)]
        if turn.trim is not None:  # after the appends; it drops only the oldest entries
            published.append(turn.trim)
        finish = finish_turn(turn, outcome, error)
        sent = time.perf_counter()
        *answers, reply = await self.client.send_all([*refreshes, finish], published=published)
        turn.ledger_seconds += time.perf_counter() - sent
        try:
            refreshed(turn, refreshes, answers)
        except TurnSuperseded:
            self.account(turn, c.TurnOutcome.INTERRUPTED, started, note="superseded")
            return False
        note = reply.error.kind.value if reply.error is not None else None
        self.account(turn, outcome, started, note=note, error=error)
        return reply.error is None

    def account(
        self,
        turn: Turn,
        outcome: c.TurnOutcome,
        started: float,
        *,
        note: str | None = None,
        error: str | None = None,
    ) -> None:
        seconds = time.perf_counter() - started
        self.metrics.turns.labels(outcome=outcome.value).inc()
        self.metrics.turn_seconds.observe(seconds)
        log_turn(turn, outcome, seconds, note=note, error=error)


def finish_turn(turn: Turn, outcome: c.TurnOutcome, error: str | None) -> c.FinishTurn:
    model = turn.model
    return c.FinishTurn(
        command_id=f"{turn.turn_id}:finish",
        agent_id=turn.agent_id,
        turn_id=turn.turn_id,
        fencing_token=turn.token,
        outcome=outcome,
        work_item_id=turn.subject,
        error=error,
        # A failed or interrupted turn may not have acted on its inbox, nor one the model never
        # answered to the end: the next one shows it again (the ledger decides when to give up
        # on it).
        inbox_consumed=0 if outcome in _UNFINISHED else turn.inbox,
        usage=model.usage if model is not None else None,
        model_outage=model.outage if model is not None else None,
        reply_text=turn.reply,
        answered=tuple(turn.answered),
        rounds=turn.rounds,
        tool_calls=turn.tool_calls,
        tool_errors=tuple(turn.tool_errors[: c.MAX_TOOL_ERRORS]),
    )
