"""The turn use case: take the agent's lease, open the turn (`opening`), run its rounds
(`round_loop`), close it (`closing`), and give the lease and the tick marker back
(docs/streams.md, "One turn per agent")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import structlog

from services.turn_executor import tokens
from services.turn_executor.closing import TurnCloser
from services.turn_executor.compaction import BetweenRounds
from services.turn_executor.lease import LeaseKeeper, LeaseLost, Leases, Settlement
from services.turn_executor.memory import Memory, MemorySettings
from services.turn_executor.model_calls import ModelCaller
from services.turn_executor.models import Models
from services.turn_executor.opening import Opening, TurnOpener, TurnRefused, queue_reads
from services.turn_executor.round_loop import RoundLoop
from services.turn_executor.rounds import ToolRunner
from services.turn_executor.turn import TurnSuperseded
from shared.domain.model_failures import OutageBackoff
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.executor")

SHUTDOWN_FINISH_S = 3.0
"""How long a cancelled turn may spend telling the ledger it was interrupted."""


@dataclass(frozen=True, slots=True)
class Served:
    """What became of a tick: the turn's outcome (None when no turn ran) and whether the tick
    is settled. An unsettled tick stays pending: a newer turn on it, or a reclaimer, finishes
    the job, so a superseded turn never acknowledges a tick another executor now serves."""

    outcome: c.TurnOutcome | None
    settled: bool


DEFAULT_OUTAGE_BACKOFF = OutageBackoff()


DEFAULT_MEMORY = MemorySettings()


@dataclass(frozen=True, slots=True)
class TurnConfig:
    owner: str
    """This process's consumer name; a lease owner is `<owner>:<turn_id>`."""
    max_rounds: int
    """The deployment's ceiling on an agent's `limits.max_rounds_per_turn`."""
    agent_home: Path
    outage_backoff: OutageBackoff = DEFAULT_OUTAGE_BACKOFF
    """How long an agent waits after its model stayed unavailable through a turn's retries."""
    secret_backoff: OutageBackoff = DEFAULT_OUTAGE_BACKOFF
    """How long an agent waits after this executor lacked a variable its spec names."""
    memory: MemorySettings = DEFAULT_MEMORY
    """Budgets of the process trace and notes, and the transcript's bound."""


class TurnService:
    def __init__(
        self,
        *,
        reads: ReadModel,
        client: LedgerClient,
        runner: ToolRunner,
        leases: Leases,
        models: Models,
        caller: ModelCaller,
        metrics: Metrics,
        config: TurnConfig,
        clock: Callable[[], datetime],
        new_id: Callable[[str], str],
    ) -> None:
        self.runner = runner
        self.models = models
        self.metrics = metrics
        self.leases = leases
        self.config = config
        self.new_id = new_id
        tokens.warm()
        memory = Memory(
            reads=reads,
            client=client,
            caller=caller,
            settings=config.memory,
            clock=clock,
            new_id=new_id,
        )
        self.opener = TurnOpener(
            reads=reads,
            client=client,
            runner=runner,
            models=models,
            clock=clock,
            secret_backoff=config.secret_backoff,
            memory=memory,
        )
        self.rounds = RoundLoop(
            reads=reads,
            runner=runner,
            caller=caller,
            max_rounds=config.max_rounds,
            outage_backoff=config.outage_backoff,
            clock=clock,
            between=BetweenRounds(memory),
        )
        self.closer = TurnCloser(client=client, runner=runner, metrics=metrics)

    async def run(
        self,
        tick: Tick,
        touch: Callable[[], Awaitable[object]] | None = None,
        settle: Settlement | None = None,
    ) -> Served:
        """Serve one tick: run its turn unless another turn holds the agent; a settled tick's
        `settle` step rides with the release of its marker."""
        turn_id = self.new_id("turn_")
        # The tick id in the owner tells a duplicate delivery of this very tick apart.
        owner = f"{self.config.owner}:{turn_id}:{tick.tick_id}"
        agent_id = tick.agent_id
        reads = queue_reads(self.leases.names, agent_id)
        token, answers = await self.leases.acquire_then(agent_id, owner, reads)
        if token is None:
            return await self._held(tick, settle)
        started = time.perf_counter()
        try:
            async with LeaseKeeper(self.leases, agent_id, owner, touch, turn_id=turn_id) as keeper:
                opening = Opening.decode(answers)
                served = await self._serve(tick, turn_id, token, keeper, started, opening=opening)
        except BaseException:
            await self.leases.release(agent_id, owner)
            raise
        settled = tick.tick_id if served.settled else None
        await self.leases.release(agent_id, owner, tick_id=settled, then=settle)
        return served

    async def _held(self, tick: Tick, settle: Settlement | None) -> Served:
        """Another turn holds the agent. If it serves this same tick (a duplicate delivery),
        the tick stays pending for it; else the tick is settled and the running turn's
        `turn_finished` makes the scheduler decide again."""
        holder = await self.leases.holder(tick.agent_id)
        if holder is not None and holder.endswith(f":{tick.tick_id}"):
            log.info("tick_served_elsewhere", agent_id=tick.agent_id, tick_id=tick.tick_id)
            return Served(outcome=None, settled=False)
        log.info("lease_held", agent_id=tick.agent_id, tick_id=tick.tick_id)
        await self.leases.release_tick(tick.agent_id, tick.tick_id, then=settle)
        return Served(outcome=None, settled=True)

    async def _serve(
        self,
        tick: Tick,
        turn_id: str,
        token: int,
        keeper: LeaseKeeper,
        started: float,
        *,
        opening: Opening,
    ) -> Served:
        try:
            turn = await self.opener.open(tick, turn_id, token, keeper, opening)
        except TurnSuperseded:
            return Served(outcome=None, settled=False)
        except TurnRefused:  # confirmed early to mark an earlier turn's calls `unknown`
            return Served(outcome=None, settled=True)
        if turn is None:
            return Served(outcome=None, settled=True)
        try:
            try:
                outcome, error = await self.rounds.run(turn)
            except LeaseLost as lost:
                outcome, error = c.TurnOutcome.INTERRUPTED, str(lost)
            except asyncio.CancelledError:
                end = self.closer.finish(
                    turn, c.TurnOutcome.INTERRUPTED, "the executor shut down", started
                )
                with contextlib.suppress(TurnRefused, TurnSuperseded):
                    await asyncio.wait_for(end, SHUTDOWN_FINISH_S)
                raise
            settled = await self.closer.finish(turn, outcome, error, started)
        except TurnRefused:
            return Served(outcome=None, settled=True)
        except TurnSuperseded:
            self.closer.account(turn, c.TurnOutcome.INTERRUPTED, started, note="superseded")
            return Served(outcome=c.TurnOutcome.INTERRUPTED, settled=False)
        return Served(outcome=outcome, settled=settled)
