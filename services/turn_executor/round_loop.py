"""The rounds of a turn: ask the model, run the tool calls it answers with, take in operator
messages that arrived meanwhile, and stop when a round rule, the model, the provider, the
daily token budget or the operator (pause, interrupt, retire) ends the turn."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from itertools import takewhile
from typing import Any, TypeVar

import structlog

from services.turn_executor.compaction import BetweenRounds
from services.turn_executor.model_calls import ModelCaller, ModelUnavailable, TurnModel
from services.turn_executor.opening import confirm
from services.turn_executor.projection import inbox_message
from services.turn_executor.promotion import account_round, turn_outcome
from services.turn_executor.prompt import tool_specs
from services.turn_executor.providers import ProviderRound
from services.turn_executor.rounds import ToolRunner
from services.turn_executor.turn import Turn
from shared.domain.control import ends_turn_after_round
from shared.domain.model_failures import OutageBackoff
from shared.domain.records import MessageOrigin
from shared.store.readmodel import ReadModel
from shared.wire import commands as c

log = structlog.get_logger("longrun.executor")

T = TypeVar("T")

PAUSED_AFTER_ROUND = "paused by the operator after a round"
INTERRUPTED_BY_OPERATOR = "interrupted by the operator"


class OperatorInterrupt(Exception):
    """The operator's interrupt reached the turn: its model call or tool calls were dropped."""


TRANSCRIPT_FLUSH_ENTRIES = 64
"""A turn sends its transcript once, at its end, unless it grows past this many entries: one
command per turn instead of one per round keeps the ledger's load per turn low."""


class RoundLoop:
    def __init__(
        self,
        *,
        reads: ReadModel,
        runner: ToolRunner,
        caller: ModelCaller,
        max_rounds: int,
        outage_backoff: OutageBackoff,
        clock: Callable[[], datetime],
        between: BetweenRounds | None = None,
    ) -> None:
        self.reads = reads
        self.between = between
        """Compacts a long turn's oldest rounds (None: no memory across turns)."""
        self.runner = runner
        self.caller = caller
        self.tools = {
            (files, reviews): tool_specs(files, reviews)
            for files in (True, False)
            for reviews in (True, False)
        }
        """The built-in tool list with and without the file tools and SubmitVerdict."""
        self.max_rounds = max_rounds
        """The deployment's ceiling on an agent's `limits.max_rounds_per_turn`."""
        self.outage_backoff = outage_backoff
        self.clock = clock

    async def run(self, turn: Turn) -> tuple[c.TurnOutcome, str | None]:
        """Model rounds until a turn-ending tool succeeds, the model stops calling tools, the
        round cap, or the daily token budget runs out (yielded); a provider error fails the turn
        with its message, a model still unavailable after the retries ends it apart; the
        operator's pause ends it after a round, an interrupt at once (outcome paused)."""
        try:
            return await self._rounds(turn)
        except OperatorInterrupt as stopped:
            log.info("turn_paused", agent_id=turn.agent_id, turn_id=turn.turn_id, why=str(stopped))
            return c.TurnOutcome.PAUSED, str(stopped)

    async def _rounds(self, turn: Turn) -> tuple[c.TurnOutcome, str | None]:
        model = turn.model
        assert model is not None  # set when the turn opened
        turn.parts.rounds_start = len(turn.messages)
        while not model.budget_spent:
            turn.keeper.check()
            turn.rounds += 1
            if turn.rounds > 1:
                if await self._interject(turn):
                    raise OperatorInterrupt(PAUSED_AFTER_ROUND)
                if self.between is not None:
                    await self.between.keep(turn, self._tools(turn))
            try:
                answer = await self._unless_interrupted(turn, self._ask(turn, model))
            except OperatorInterrupt:
                raise
            except ModelUnavailable as exc:
                log.warning("model_unavailable", agent_id=turn.agent_id, error=str(exc))
                reason = model.unavailable(exc, self.clock(), self.outage_backoff)
                return c.TurnOutcome.MODEL_UNAVAILABLE, reason
            except Exception as exc:  # any provider failure fails the turn, never the process
                log.warning("provider_failed", agent_id=turn.agent_id, error=str(exc))
                return c.TurnOutcome.FAILED, f"provider error: {exc}"[:2000]
            await confirm(turn)
            # Interrupted here, calls in flight keep no outcome: the next turn records them
            # unknown, as after a crash.
            envelopes = await self._unless_interrupted(turn, self.runner.execute(turn, answer))
            if len(turn.entries) >= TRANSCRIPT_FLUSH_ENTRIES:
                await self.runner.record(turn)
            max_rounds = min(turn.spec.limits.max_rounds_per_turn, self.max_rounds)
            account = account_round(envelopes, turn.rounds, max_rounds=max_rounds)
            if account.ends_turn:
                return turn_outcome(account), None
        log.info("token_budget_spent", agent_id=turn.agent_id, turn_id=turn.turn_id)
        return c.TurnOutcome.YIELDED, None

    async def _unless_interrupted(self, turn: Turn, step: Awaitable[T]) -> T:
        """`step`, dropped (cancelled) if the operator interrupts the turn meanwhile."""
        stop = turn.keeper.stop_now
        task = asyncio.ensure_future(step)
        if stop.is_set():
            task.cancel()
        else:
            watcher = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watcher.cancel()
            if task.done():
                return task.result()
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise OperatorInterrupt(INTERRUPTED_BY_OPERATOR)

    async def _interject(self, turn: Turn) -> bool:
        """Operator messages that reached the inbox since the turn read it join this round's
        request, and the turn consumes them. Only the run of operator messages first in line:
        the ledger consumes an inbox from its head, so a callback's evidence, which waits for
        the next turn, keeps the messages behind it for that turn too. True when the operator
        paused (or retired) the agent: the turn ends here, after its round."""
        unread, signal = await self.reads.inbox_and_control(turn.agent_id, start=turn.inbox)
        if ends_turn_after_round(signal):
            return True
        taken = list(takewhile(lambda m: m.origin is MessageOrigin.OPERATOR, unread))
        for message in taken:
            content = str(inbox_message(message)["content"])
            turn.messages.append({"role": "user", "content": content})
            turn.note("user", content)
        if taken:
            log.info("operator_interjection", agent_id=turn.agent_id, messages=len(taken))
        turn.inbox += len(taken)
        turn.answered += [message.id for message in taken]
        return False

    def _tools(self, turn: Turn) -> list[dict[str, Any]]:
        builtin = self.tools[turn.spec.tools.files, turn.reviews]
        return [*builtin, *self.runner.commands.specs(turn), *turn.mcp.specs()]

    async def _ask(self, turn: Turn, model: TurnModel) -> ProviderRound:
        started = time.perf_counter()
        try:
            tools = self._tools(turn)
            if turn.guard is not None:
                turn.guard.fit(turn.messages, tools, turn.parts)
            answer = await self.caller.call(model.target, turn.messages, tools, turn.keeper)
        finally:
            turn.model_seconds += time.perf_counter() - started
        model.took(answer)
        return answer
