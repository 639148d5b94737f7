"""Opening a turn: the reads it opens with, BeginTurn (sent beside the first model round when
nothing the prompt shows hangs on its answer), and the turn's first messages: the system prompt,
the projection of the agent's work, trigger evidence and the MCP tools on offer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from services.turn_executor.external_calls import unfinished_calls, unknown_notice
from services.turn_executor.guard import ContextGuard, PromptParts, evidence_positions, window_of
from services.turn_executor.lease import LeaseKeeper
from services.turn_executor.memory import Memory, Recall, Superseded, counter_of
from services.turn_executor.model_calls import TurnModel
from services.turn_executor.models import Models
from services.turn_executor.projection import project_turn
from services.turn_executor.prompt import system_prompt
from services.turn_executor.review import evidence_messages, reviewed_triggers
from services.turn_executor.rounds import ToolRunner
from services.turn_executor.summary import summary_text
from services.turn_executor.trimming import trim_for
from services.turn_executor.turn import Turn, TurnSuperseded
from shared.domain.errors import ErrorKind
from shared.domain.missing_secrets import first_missing, next_missing
from shared.domain.model_failures import OutageBackoff
from shared.domain.records import AgentLoop, AgentState, InboxMessage, WaitingIntent, WorkItem
from shared.domain.specs import DEFAULT_CONTEXT_WINDOW, AgentSpec, StoredSpec
from shared.domain.stored import AgentRecord
from shared.domain.usage import budget_left
from shared.domain.views import PROMPT_LIMITS, CandidateClass
from shared.ledger_client import LedgerClient
from shared.store.protocol import Fn
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.executor")


class TurnRefused(Exception):
    """The ledger refused BeginTurn for a reason other than a newer turn (see `accepted`)."""


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


def accepted(agent_id: str, turn_id: str, reply: CommandReply) -> bool:
    """BeginTurn's answer: True when accepted; a stale token means a newer turn took the agent
    over meanwhile (TurnSuperseded)."""
    if reply.error is None:
        return True
    log.warning("begin_refused", agent_id=agent_id, turn_id=turn_id, error=reply.error.kind)
    if reply.error.kind is ErrorKind.STALE_TURN:
        raise TurnSuperseded(reply.error.message)
    return False


async def confirm(turn: Turn) -> None:
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
    if not accepted(turn.agent_id, turn.turn_id, reply):
        raise TurnRefused(reply.error.message if reply.error else "begin refused")


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a task's exception as seen: a turn that ends before awaiting its BeginTurn has
    already reported why it ended."""
    if not task.cancelled():
        task.exception()


RECENT_SHOWN = PROMPT_LIMITS[CandidateClass.COMPLETED_RECENT]
"""Recently completed WorkItems a turn reads: the ones its summary shows, no more."""


@dataclass(frozen=True, slots=True)
class TurnItems:
    """The WorkItems a turn works from: every open one, and the head of the recently completed
    (the ones the summary shows, read through their class index); `completed_total` counts all
    the recently completed. Finished WorkItems past that head are never read: a turn of an agent
    with thousands behind it reads what a new agent's turn reads."""

    items: list[WorkItem]
    completed_total: int

    @staticmethod
    def queue(pipe: Any, names: Names, agent_id: str) -> None:
        """Two answers: the open hash, and `lr_items_head` of the recently completed."""
        pipe.hvals(names.items(agent_id))
        recent = names.class_index(agent_id, CandidateClass.COMPLETED_RECENT.value)
        finished = names.items_finished(agent_id)
        pipe.fcall_ro(Fn.ITEMS_HEAD, 3, recent, names.items(agent_id), finished, RECENT_SHOWN)

    @classmethod
    def decode(cls, open_docs: list[Any], head: list[Any]) -> TurnItems:
        total, recent_docs = head
        items = {i.id: i for i in (WorkItem.model_validate_json(d) for d in open_docs)}
        for doc in recent_docs:
            item = WorkItem.model_validate_json(doc)
            items.setdefault(item.id, item)
        return cls(items=list(items.values()), completed_total=int(total))

    @classmethod
    async def read(cls, reads: ReadModel, agent_id: str) -> TurnItems:
        pipe = reads.redis.pipeline(transaction=False)
        cls.queue(pipe, reads.n, agent_id)
        open_docs, head = await pipe.execute()
        return cls.decode(open_docs, head)


@dataclass(frozen=True, slots=True)
class Opening:
    """What a turn opens with: the agent's record, WorkItems (`TurnItems`), active waits and
    inbox, as the read model decodes them, its spec, and the rounds its recorded transcript
    holds (for the trim check); read in the lease's round trip, see `queue_reads`."""

    record: AgentRecord | None
    items: list[WorkItem]
    waits: list[WaitingIntent]
    inbox: list[InboxMessage]
    spec: StoredSpec
    transcript_rounds: int = 0
    completed_total: int = 0
    """Recently completed WorkItems in all (`items` holds the few the summary shows)."""

    @classmethod
    def decode(cls, answers: list[Any]) -> Opening:
        doc, open_docs, head, wait_docs, inbox_docs, spec_doc, rounds = answers
        work = TurnItems.decode(open_docs, head)
        return cls(
            record=AgentRecord.model_validate_json(doc) if doc else None,
            items=work.items,
            waits=[WaitingIntent.model_validate_json(d) for d in wait_docs],
            inbox=[InboxMessage.model_validate_json(d) for d in inbox_docs],
            spec=StoredSpec.model_validate_json(spec_doc) if spec_doc else StoredSpec(),
            transcript_rounds=int(rounds or 0),
            completed_total=work.completed_total,
        )


def queue_reads(names: Names, agent_id: str) -> Callable[[Any], object]:
    """The reads a turn opens with (`Opening`), queued behind the lease's acquire."""

    def queue(pipe: Any) -> None:
        pipe.hget(names.agent(agent_id), "doc")
        TurnItems.queue(pipe, names, agent_id)
        pipe.hvals(names.waits(agent_id))
        pipe.lrange(names.inbox(agent_id), 0, -1)
        pipe.get(names.agent_spec(agent_id))
        pipe.hget(names.transcript_meta(agent_id), "rounds")

    return queue


class TurnOpener:
    """Begins a turn and builds its first messages."""

    def __init__(
        self,
        *,
        reads: ReadModel,
        client: LedgerClient,
        runner: ToolRunner,
        models: Models,
        clock: Callable[[], datetime],
        secret_backoff: OutageBackoff,
        memory: Memory | None = None,
    ) -> None:
        self.secret_backoff = secret_backoff
        """The wait after a tick this executor could not serve for a missing variable."""
        self.reads = reads
        self.client = client
        self.runner = runner
        self.models = models
        self.clock = clock
        self.memory = memory

    async def open(
        self, tick: Tick, turn_id: str, token: int, keeper: LeaseKeeper, opening: Opening
    ) -> Turn | None:
        """BeginTurn with what the prompt will show; None when the ledger refuses it."""
        agent_id = tick.agent_id
        record, items, waits, inbox = opening.record, opening.items, opening.waits, opening.inbox
        completed_total = opening.completed_total
        if record is None or record.state.loop is AgentLoop.EXTERNAL:
            log.warning("tick_for_no_builtin_agent", agent_id=agent_id, tick_id=tick.tick_id)
            return None
        if await self._missing_secret(record, opening.spec, turn_id, token):
            return None
        interrupted = record.current_turn_id
        reviewed = reviewed_triggers(record.state, items, waits)
        begin = begin_turn(tick, turn_id, token, interrupted, reviewed, inbox=inbox)
        state, begun, waited = record.state, None, 0.0
        if interrupted is None:
            # Nothing the prompt shows hangs on BeginTurn's answer: it travels while the model
            # works on the first round and is awaited before anything else of the turn is sent
            # (`confirm`). Queued now, so all the turn's later commands follow it on the stream.
            begun = self.client.queue_all([begin])
            begun.add_done_callback(_retrieved)
        else:
            sent = time.perf_counter()
            (reply,) = await self.client.send_all([begin])
            waited = time.perf_counter() - sent
            if not accepted(agent_id, turn_id, reply):
                return None
            # Beginning counted the interrupted attempt, which may have blocked its item and set
            # aside inbox messages shown to too many failed attempts.
            again, work, inbox = await asyncio.gather(
                self.reads.agent_record(agent_id),
                TurnItems.read(self.reads, agent_id),
                self.reads.inbox(agent_id),
            )
            items, completed_total = work.items, work.completed_total
            state = again.state if again is not None else state  # records are never deleted
        spec = opening.spec.spec
        reviews = any(item.is_open_review for item in items)
        turn = Turn(
            tick=tick,
            turn_id=turn_id,
            token=token,
            keeper=keeper,
            messages=[
                {
                    "role": "system",
                    "content": system_prompt(
                        agent_id, spec.instructions, files=spec.tools.files, reviews=reviews
                    ),
                }
            ],
            spec=spec,
            reviews=reviews,
            focused=state.current_work_item_id,
            inbox=len(inbox),
            answered=[message.id for message in inbox],
            plans={item.id: item.plan_artifact.sha256 for item in items},
            interrupted=interrupted,
            ledger_seconds=waited,
            begun=begun,
            model=await self._model(record, spec),
        )
        await self._prompt(
            turn,
            state,
            items=items,
            waits=waits,
            inbox=inbox,
            reviewed=reviewed,
            completed_total=completed_total,
        )
        if self.memory is not None:
            turn.trim = await trim_for(
                turn,
                self.memory,
                items,
                rounds=opening.transcript_rounds,
                confirm=lambda: confirm(turn),
            )
        await self._offer_mcp(turn, opening.spec.spec_version)
        return turn

    async def _missing_secret(
        self, record: AgentRecord, stored: StoredSpec, turn_id: str, token: int
    ) -> bool:
        """True when this executor lacks a variable the spec names: no turn begins, and the
        ledger parks the agent until the hold's `retry_at` or a spec change."""
        name = first_missing(stored.spec, self.runner.mcp.environ)
        if name is None:
            return False
        agent_id = record.state.agent_id
        hold = next_missing(
            record.missing_secret,
            name=name,
            spec_version=stored.spec_version,
            now=self.clock(),
            backoff=self.secret_backoff,
        )
        log.warning("missing_secret", agent_id=agent_id, name=name, retry_at=hold.retry_at)
        command = c.RecordMissingSecret(
            command_id=f"{turn_id}:missing_secret",
            agent_id=agent_id,
            fencing_token=token,
            hold=hold,
        )
        (reply,) = await self.client.send_all([command])
        if reply.error is not None and reply.error.kind is ErrorKind.STALE_TURN:
            raise TurnSuperseded(reply.error.message)
        return True

    async def _offer_mcp(self, turn: Turn, spec_version: int) -> None:
        """List the spec's MCP servers' tools for this turn; name the ones that failed, and
        the external calls (MCP or RunCommand) an interrupted turn left unfinished."""
        servers = turn.spec.tools.mcp_servers
        if not servers and not turn.spec.tools.commands and turn.interrupted is None:
            return
        unknown = await unfinished_calls(self.reads.redis, self.reads.n, turn.agent_id)
        if unknown:
            await confirm(turn)
            await self.runner.record_unknown(turn, [call["call_id"] for call in unknown])
            notices = "\n".join(unknown_notice(call) for call in unknown)
            turn.messages.append({"role": "user", "content": notices})
            turn.note("system", notices)  # in the transcript: later turns' traces show it
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

    async def _prompt(
        self,
        turn: Turn,
        agent: AgentState,
        *,
        items: list[WorkItem],
        waits: list[WaitingIntent],
        inbox: list[InboxMessage],
        reviewed: dict[str, int],
        completed_total: int,
    ) -> None:
        """The turn's opening messages: summary, the current WorkItem's process notes and
        trace, interruption note, inbox, evidence, nudge; and the context guard over them."""
        evidence = await self.reads.evidence(turn.agent_id) if reviewed else []
        recall = await self._recall(turn, agent, items)
        memory = [text for text in (recall.notes_text(), recall.trace_text()) if text]
        now = self.clock()
        prompt = [
            dict(message)
            for message in project_turn(
                agent,
                items,
                waits,
                inbox,
                now,
                interrupted_turn_id=turn.interrupted,
                memory=memory,
                completed_total=completed_total,
            )
        ]
        prompt += [dict(m) for m in evidence_messages(evidence, waits, reviewed)]
        start = len(turn.messages)
        turn.messages += prompt
        turn.parts = PromptParts(
            summary=start,
            summary_without_candidates=summary_text(
                agent, items, waits, now, candidates=False, completed_total=completed_total
            ),
            notes=start + 1 if recall.notes_text() else None,
            trace=start + len(memory) if recall.trace_text() else None,
            recall=recall,
            evidence=evidence_positions(turn.messages, start),
        )
        turn.guard = self._guard(turn)
        remembered = range(1, 1 + len(memory))
        for index, message in enumerate(prompt):
            # The notes and trace are built from the transcript: it keeps a mark, not a copy.
            content = recall.mark() if index in remembered else str(message["content"])
            if index not in remembered or index == 1:
                turn.note("user", content)

    async def _recall(self, turn: Turn, agent: AgentState, items: list[WorkItem]) -> Recall:
        """The current item's notes and trace (compacting first when due)."""
        if self.memory is None or turn.model is None:
            return Recall()
        current = next((i for i in items if i.id == agent.current_work_item_id), None)
        try:
            recall = await self.memory.recall(
                current,
                agent_id=turn.agent_id,
                turn_id=turn.turn_id,
                token=turn.token,
                model=turn.model,
                keeper=turn.keeper,
                confirm=lambda: confirm(turn),
            )
        except Superseded as exc:
            raise TurnSuperseded(str(exc)) from exc
        return recall

    @staticmethod
    def _guard(turn: Turn) -> ContextGuard | None:
        if turn.model is None:
            return None
        spec = turn.spec.model
        window = spec.context_window if spec is not None else DEFAULT_CONTEXT_WINDOW
        limit = window_of(window, turn.model.target.config.max_output_tokens)
        return ContextGuard(counter_of(turn.model), limit)
