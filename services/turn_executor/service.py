"""The turn use case: take the agent's lease, begin the turn, run model rounds and their tool
calls with the fencing token, refresh changed plan files, record the transcript, finish the turn,
and give the lease and the tick marker back (docs/streams.md, "One turn per agent")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from services.turn_executor.external_calls import unfinished_calls, unknown_notice
from services.turn_executor.lease import LeaseKeeper, LeaseLost, Leases, Settlement
from services.turn_executor.model_calls import ModelCaller, ModelUnavailable, TurnModel
from services.turn_executor.models import Models
from services.turn_executor.projection import project_turn, system_prompt, tool_specs
from services.turn_executor.promotion import account_round, turn_outcome
from services.turn_executor.providers import ProviderRound
from services.turn_executor.review import evidence_messages, reviewed_triggers
from services.turn_executor.rounds import ToolRunner, Turn, TurnSuperseded, log_turn
from shared.domain.errors import ErrorKind
from shared.domain.model_failures import OutageBackoff
from shared.domain.records import AgentLoop, AgentState, InboxMessage, WaitingIntent, WorkItem
from shared.domain.specs import AgentSpec, StoredSpec
from shared.domain.stored import AgentRecord
from shared.domain.usage import budget_left
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.executor")

TRANSCRIPT_FLUSH_ENTRIES = 64
"""A turn sends its transcript once, at its end, unless it grows past this many entries: one
command per turn instead of one per round keeps the ledger's load per turn low."""
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


@dataclass(frozen=True, slots=True)
class TurnConfig:
    owner: str
    """This process's consumer name; a lease owner is `<owner>:<turn_id>`."""
    max_rounds: int
    """The deployment's ceiling on an agent's `limits.max_rounds_per_turn`."""
    agent_home: Path
    outage_backoff: OutageBackoff = DEFAULT_OUTAGE_BACKOFF
    """How long an agent waits after its model stayed unavailable through a turn's retries."""


def begin_turn(
    tick: Tick,
    turn_id: str,
    token: int,
    interrupted: str | None,
    reviewed: dict[str, int],
    *,
    inbox: Sequence[InboxMessage] = (),
) -> c.BeginTurn:
    return c.BeginTurn(
        command_id=f"{turn_id}:begin",
        agent_id=tick.agent_id,
        turn_id=turn_id,
        fencing_token=token,
        tick_id=tick.tick_id,
        tick_kind=tick.kind,
        interrupted_turn_id=interrupted,
        reviewed_triggers=reviewed,
        inbox_shown=tuple(message.id for message in inbox),
    )


_UNFINISHED = frozenset(
    {c.TurnOutcome.FAILED, c.TurnOutcome.INTERRUPTED, c.TurnOutcome.MODEL_UNAVAILABLE}
)


class TurnRefused(Exception):
    """The ledger refused BeginTurn for a reason other than a newer turn (see `_accepted`)."""


def _accepted(agent_id: str, turn_id: str, reply: CommandReply) -> bool:
    """BeginTurn's answer: True when accepted; a stale token means a newer turn took the agent
    over meanwhile (TurnSuperseded)."""
    if reply.error is None:
        return True
    log.warning("begin_refused", agent_id=agent_id, turn_id=turn_id, error=reply.error.kind)
    if reply.error.kind is ErrorKind.STALE_TURN:
        raise TurnSuperseded(reply.error.message)
    return False


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a task's exception as seen: a turn that ends before awaiting its BeginTurn has
    already reported why it ended."""
    if not task.cancelled():
        task.exception()


@dataclass(frozen=True, slots=True)
class Opening:
    """What a turn opens with: the agent's record, WorkItems, active waits and inbox, as the
    read model decodes them (read in the lease's round trip, see `TurnService._queue_reads`)."""

    record: AgentRecord | None
    items: list[WorkItem]
    waits: list[WaitingIntent]
    inbox: list[InboxMessage]
    spec: StoredSpec

    @classmethod
    def decode(cls, answers: list[Any]) -> Opening:
        doc, item_docs, wait_docs, inbox_docs, spec_doc = answers
        return cls(
            record=AgentRecord.model_validate_json(doc) if doc else None,
            items=[WorkItem.model_validate_json(d) for d in item_docs],
            waits=[WaitingIntent.model_validate_json(d) for d in wait_docs],
            inbox=[InboxMessage.model_validate_json(d) for d in inbox_docs],
            spec=StoredSpec.model_validate_json(spec_doc) if spec_doc else StoredSpec(),
        )


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
        self.reads = reads
        self.client = client
        self.runner = runner
        self.leases = leases
        self.models = models
        self.caller = caller
        self.metrics = metrics
        self.config = config
        self.clock = clock
        self.new_id = new_id
        self.tools = {files: tool_specs(files) for files in (True, False)}

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
        reads = self._queue_reads(agent_id)
        token, answers = await self.leases.acquire_then(agent_id, owner, reads)
        if token is None:
            return await self._held(tick, settle)
        started = time.perf_counter()
        try:
            async with LeaseKeeper(self.leases, agent_id, owner, touch) as keeper:
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
            turn = await self._begin(tick, turn_id, token, keeper, opening)
        except TurnSuperseded:
            return Served(outcome=None, settled=False)
        except TurnRefused:  # confirmed early to mark an earlier turn's calls `unknown`
            return Served(outcome=None, settled=True)
        if turn is None:
            return Served(outcome=None, settled=True)
        try:
            try:
                outcome, error = await self._rounds(turn)
            except LeaseLost as lost:
                outcome, error = c.TurnOutcome.INTERRUPTED, str(lost)
            except asyncio.CancelledError:
                end = self._end(turn, c.TurnOutcome.INTERRUPTED, "the executor shut down", started)
                with contextlib.suppress(TurnRefused, TurnSuperseded):
                    await asyncio.wait_for(end, SHUTDOWN_FINISH_S)
                raise
            settled = await self._end(turn, outcome, error, started)
        except TurnRefused:
            return Served(outcome=None, settled=True)
        except TurnSuperseded:
            self._account(turn, c.TurnOutcome.INTERRUPTED, started, note="superseded")
            return Served(outcome=c.TurnOutcome.INTERRUPTED, settled=False)
        return Served(outcome=outcome, settled=settled)

    def _queue_reads(self, agent_id: str) -> Callable[[Any], object]:
        """The reads a turn opens with (`Opening`), queued behind the lease's acquire."""
        names = self.leases.names

        def queue(pipe: Any) -> None:
            pipe.hget(names.agent(agent_id), "doc")
            pipe.hvals(names.items(agent_id))
            pipe.hvals(names.waits(agent_id))
            pipe.lrange(names.inbox(agent_id), 0, -1)
            pipe.get(names.agent_spec(agent_id))

        return queue

    async def _begin(
        self, tick: Tick, turn_id: str, token: int, keeper: LeaseKeeper, opening: Opening
    ) -> Turn | None:
        """BeginTurn with what the prompt will show; None when the ledger refuses it."""
        agent_id = tick.agent_id
        record, items, waits, inbox = opening.record, opening.items, opening.waits, opening.inbox
        if record is None or record.state.loop is AgentLoop.EXTERNAL:
            log.warning("tick_for_no_builtin_agent", agent_id=agent_id, tick_id=tick.tick_id)
            return None
        interrupted = record.current_turn_id
        reviewed = reviewed_triggers(record.state, items, waits)
        begin = begin_turn(tick, turn_id, token, interrupted, reviewed, inbox=inbox)
        state, begun, waited = record.state, None, 0.0
        if interrupted is None:
            # Nothing the prompt shows hangs on BeginTurn's answer: it travels while the model
            # works on the first round and is awaited before anything else of the turn is sent
            # (`_confirm`). Queued now, so all the turn's later commands follow it on the stream.
            begun = self.client.queue_all([begin])
            begun.add_done_callback(_retrieved)
        else:
            sent = time.perf_counter()
            (reply,) = await self.client.send_all([begin])
            waited = time.perf_counter() - sent
            if not _accepted(agent_id, turn_id, reply):
                return None
            # Beginning counted the interrupted attempt, which may have blocked its item and set
            # aside inbox messages shown to too many failed attempts.
            again, items, inbox = await asyncio.gather(
                self.reads.agent_record(agent_id),
                self.reads.all_items(agent_id),
                self.reads.inbox(agent_id),
            )
            state = again.state if again is not None else state  # records are never deleted
        spec = opening.spec.spec
        turn = Turn(
            tick=tick,
            turn_id=turn_id,
            token=token,
            keeper=keeper,
            messages=[
                {
                    "role": "system",
                    "content": system_prompt(agent_id, spec.instructions, files=spec.tools.files),
                }
            ],
            spec=spec,
            focused=state.current_work_item_id,
            inbox=len(inbox),
            plans={item.id: item.plan_artifact.sha256 for item in items},
            interrupted=interrupted,
            ledger_seconds=waited,
            begun=begun,
            model=await self._model(record, spec),
        )
        await self._prompt(turn, state, items=items, waits=waits, inbox=inbox, reviewed=reviewed)
        await self._offer_mcp(turn, opening.spec.spec_version)
        return turn

    async def _offer_mcp(self, turn: Turn, spec_version: int) -> None:
        """List the spec's MCP servers' tools for this turn; name the ones that failed."""
        servers = turn.spec.tools.mcp_servers
        if not servers and turn.interrupted is None:
            return
        unknown = await unfinished_calls(self.reads.redis, self.reads.n, turn.agent_id)
        if unknown:
            await self._confirm(turn)
            await self.runner.record_unknown(turn, [call["call_id"] for call in unknown])
            notices = "\n".join(unknown_notice(call) for call in unknown)
            turn.messages.append({"role": "user", "content": notices})
        if servers:
            turn.mcp = await self.runner.mcp.toolset(turn.agent_id, spec_version, servers)
        note = turn.mcp.note()
        if note is not None:
            turn.messages.append({"role": "user", "content": note})

    async def _model(self, record: AgentRecord, spec: AgentSpec) -> TurnModel:
        """The model this turn talks to (the spec's, else the executor's default), and what is
        left of the agent's budget for the day."""
        left = budget_left(record.day_tokens, record.daily_token_budget, self.clock())
        return TurnModel(
            target=await self.models.target(spec.model),
            budget_left=left,
            previous_outage=record.model_outage,
        )

    async def _confirm(self, turn: Turn) -> None:
        """Wait for BeginTurn's answer if it is still on its way. Raises TurnRefused (or
        TurnSuperseded) when the ledger refused it: nothing else of the turn may then be sent,
        and a first model round already asked for is dropped unused."""
        begun = turn.begun
        if begun is None:
            return
        sent = time.perf_counter()
        try:
            (reply,) = await begun
        finally:
            turn.begun = None
            turn.ledger_seconds += time.perf_counter() - sent
        if not _accepted(turn.agent_id, turn.turn_id, reply):
            raise TurnRefused(reply.error.message if reply.error else "begin refused")

    async def _prompt(
        self,
        turn: Turn,
        agent: AgentState,
        *,
        items: list[WorkItem],
        waits: list[WaitingIntent],
        inbox: list[InboxMessage],
        reviewed: dict[str, int],
    ) -> None:
        """The turn's opening messages: summary, interruption note, inbox, evidence, nudge."""
        evidence = await self.reads.evidence(turn.agent_id) if reviewed else []
        prompt = [
            dict(message)
            for message in project_turn(
                agent, items, waits, inbox, self.clock(), interrupted_turn_id=turn.interrupted
            )
        ]
        prompt += [dict(m) for m in evidence_messages(evidence, waits, reviewed)]
        turn.messages += prompt
        for message in prompt:
            turn.note("user", str(message["content"]))

    async def _rounds(self, turn: Turn) -> tuple[c.TurnOutcome, str | None]:
        """Model rounds until a turn-ending tool succeeds, the model stops calling tools, the
        round cap, or the daily token budget runs out (yielded); a provider error fails the turn
        with its message, a model still unavailable after the retries ends it apart."""
        model = turn.model
        assert model is not None  # set by _begin
        while not model.budget_spent:
            turn.keeper.check()
            turn.rounds += 1
            try:
                answer = await self._ask(turn, model)
            except ModelUnavailable as exc:
                log.warning("model_unavailable", agent_id=turn.agent_id, error=str(exc))
                reason = model.unavailable(exc, self.clock(), self.config.outage_backoff)
                return c.TurnOutcome.MODEL_UNAVAILABLE, reason
            except Exception as exc:  # any provider failure fails the turn, never the process
                log.warning("provider_failed", agent_id=turn.agent_id, error=str(exc))
                return c.TurnOutcome.FAILED, f"provider error: {exc}"[:2000]
            await self._confirm(turn)
            envelopes = await self.runner.execute(turn, answer)
            if len(turn.entries) >= TRANSCRIPT_FLUSH_ENTRIES:
                await self.runner.record(turn)
            max_rounds = min(turn.spec.limits.max_rounds_per_turn, self.config.max_rounds)
            account = account_round(envelopes, turn.rounds, max_rounds=max_rounds)
            if account.ends_turn:
                return turn_outcome(account), None
        log.info("token_budget_spent", agent_id=turn.agent_id, turn_id=turn.turn_id)
        return c.TurnOutcome.YIELDED, None

    async def _ask(self, turn: Turn, model: TurnModel) -> ProviderRound:
        started = time.perf_counter()
        try:
            tools = [*self.tools[turn.spec.tools.files], *turn.mcp.specs()]
            answer = await self.caller.call(model.target, turn.messages, tools, turn.keeper)
        finally:
            turn.model_seconds += time.perf_counter() - started
        model.took(answer)
        return answer

    async def _end(
        self, turn: Turn, outcome: c.TurnOutcome, error: str | None, started: float
    ) -> bool:
        """Refresh plans, flush the transcript, FinishTurn; True when the ledger accepted it.

        All in one round trip, in this order on the agent's partition stream: the refreshes and
        FinishTurn carry the same fencing token, so a stale refresh means FinishTurn is refused
        too, as if it had never been sent."""
        await self._confirm(turn)
        refreshes = self.runner.plan_refreshes(turn)
        transcript = self.runner.transcript(turn)
        model = turn.model
        finish = c.FinishTurn(
            command_id=f"{turn.turn_id}:finish",
            agent_id=turn.agent_id,
            turn_id=turn.turn_id,
            fencing_token=turn.token,
            outcome=outcome,
            work_item_id=turn.subject,
            error=error,
            # A failed or interrupted turn may not have acted on its inbox, nor one the model never
            # answered to the end: the next one shows it again (the ledger decides when to give
            # up on it).
            inbox_consumed=0 if outcome in _UNFINISHED else turn.inbox,
            usage=model.usage if model is not None else None,
            model_outage=model.outage if model is not None else None,
        )
        sent = time.perf_counter()
        *refreshed, reply = await self.client.send_all([*refreshes, finish], published=transcript)
        turn.ledger_seconds += time.perf_counter() - sent
        try:
            self.runner.refreshed(turn, refreshes, refreshed)
        except TurnSuperseded:
            self._account(turn, c.TurnOutcome.INTERRUPTED, started, note="superseded")
            return False
        note = reply.error.kind.value if reply.error is not None else None
        self._account(turn, outcome, started, note=note, error=error)
        return reply.error is None

    def _account(
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
