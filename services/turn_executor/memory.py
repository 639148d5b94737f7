"""A turn's memory of its WorkItem: the recorded rounds no note covers yet (the process trace),
compacted into a process note by the agent's own model when they outgrow
LONGRUN_TRACE_TOKENS, and the notes kept within LONGRUN_NOTES_TOKENS by merging older ones
(docs/architecture.md, "How a turn's prompt is assembled"; the transcript's trim is in
`trimming.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from services.turn_executor.lease import LeaseKeeper
from services.turn_executor.model_calls import ModelCaller, TurnModel
from services.turn_executor.tokens import TokenCounter
from shared.domain import memory as m
from shared.domain.errors import ErrorKind
from shared.domain.records import NoteCovers, ProcessNote, WorkItem
from shared.ledger_client import LedgerClient
from shared.store.readmodel import ReadModel
from shared.wire import commands as c

log = structlog.get_logger("longrun.executor")

READ_FACTOR = 16
"""How far back (in characters, per trace token) the trace read goes before it stops."""


class Superseded(Exception):
    """The ledger answered stale_turn to a memory command."""


@dataclass(frozen=True, slots=True)
class MemorySettings:
    trace_tokens: int = 8000
    notes_tokens: int = 2000
    transcript_max_rounds: int = 2000


@dataclass(slots=True)
class Recall:
    """What the prompt shows of the current WorkItem's past: its notes, then its trace."""

    work_item_id: str | None = None
    objective: str = ""
    notes: tuple[ProcessNote, ...] = ()
    rounds: list[m.TraceRound] = field(default_factory=list)
    left_out: int = 0
    reason: str = ""

    def notes_text(self) -> str | None:
        if self.work_item_id is None or not self.notes:
            return None
        return m.notes_message(self.work_item_id, self.notes)

    def mark(self) -> str:
        """What the transcript keeps of the memory shown: a line, not a copy (the notes and
        trace are built from the transcript)."""
        return (
            f"[process notes and trace of {self.work_item_id} shown: {len(self.notes)} notes, "
            f"{len(self.rounds)} recorded rounds]"
        )

    def trace_text(self, rounds: Sequence[m.TraceRound] | None = None) -> str | None:
        shown = self.rounds if rounds is None else rounds
        cut = self.left_out + len(self.rounds) - len(shown)
        if self.work_item_id is None or not (shown or cut):
            return None
        reason = self.reason or "the request had to fit the model's context window"
        return m.trace_message(self.work_item_id, shown, left_out=cut, reason=reason)


class Memory:
    def __init__(
        self,
        *,
        reads: ReadModel,
        client: LedgerClient,
        caller: ModelCaller,
        settings: MemorySettings,
        clock: Callable[[], datetime],
        new_id: Callable[[str], str],
    ) -> None:
        self.reads = reads
        self.client = client
        self.caller = caller
        self.settings = settings
        self.clock = clock
        self.new_id = new_id

    async def recall(
        self,
        item: WorkItem | None,
        *,
        agent_id: str,
        turn_id: str,
        token: int,
        model: TurnModel,
        keeper: LeaseKeeper,
        confirm: Callable[[], Awaitable[None]],
    ) -> Recall:
        """The current item's notes and trace; compacts the oldest rounds first when the trace
        does not fit. A failed compaction cuts the trace and says so; it never fails the turn."""
        if item is None or not item.is_open:
            return Recall()
        counter = counter_of(model)
        budget = self.settings.trace_tokens
        notes = item.process_notes
        covered = notes[-1].covers if notes else None
        entries, _ = await self.reads.work_item_rounds(
            agent_id, item.id, covered=covered, max_chars=budget * READ_FACTOR
        )
        rounds = m.trace_rounds(entries, max_entry_chars=budget * 2)
        fit = m.fit_trace(rounds, budget, counter.count, bound=counter.count_bound)
        recall = Recall(item.id, item.objective, notes, list(fit.shown))
        if not fit.to_compact:
            return recall
        # BeginTurn's answer first, outside the try: a refused turn must not pass for a failed
        # compaction (and spends no compaction call).
        await confirm()
        try:
            new_notes = await self.compact(
                recall,
                fit.to_compact,
                model,
                keeper,
                agent_id=agent_id,
                turn_id=turn_id,
                token=token,
            )
        except Superseded:
            raise
        except Exception as exc:  # a compaction never fails the turn (see the module doc)
            log.warning(
                "compaction_failed", agent_id=agent_id, work_item_id=item.id, error=str(exc)
            )
            shown = m.newest_within(rounds, budget, counter.count)
            return Recall(
                item.id,
                item.objective,
                notes,
                shown,
                left_out=len(rounds) - len(shown),
                reason=f"they outgrew the trace budget and compaction failed: {exc}"[:300],
            )
        return Recall(item.id, item.objective, new_notes, list(fit.shown))

    async def compact(
        self,
        recall: Recall,
        rounds: Sequence[m.TraceRound],
        model: TurnModel,
        keeper: LeaseKeeper,
        *,
        agent_id: str,
        turn_id: str,
        token: int,
        to_round: int | None = None,
        label: str = "",
    ) -> tuple[ProcessNote, ...]:
        """Compact `rounds` (the oldest the item's notes do not cover) into a note and store
        the item's new notes (`work_item_compacted`); `to_round`: the note ends inside the turn
        `rounds` ends in, after that round; `label` tells apart the command ids of several
        compactions of one item in a turn. Raises Superseded on stale_turn."""
        assert recall.work_item_id is not None
        notes, merged = await self._compact(recall, rounds, model, keeper, to_round)
        suffix = f":r{to_round}" if to_round is not None else ""
        await self._store(
            command_id=f"{turn_id}:compact:{recall.work_item_id}{label}{suffix}",
            agent_id=agent_id,
            turn_id=turn_id,
            token=token,
            work_item_id=recall.work_item_id,
            notes=notes,
            merged=merged,
        )
        return notes

    async def _compact(
        self,
        recall: Recall,
        rounds: Sequence[m.TraceRound],
        model: TurnModel,
        keeper: LeaseKeeper,
        to_round: int | None,
    ) -> tuple[tuple[ProcessNote, ...], tuple[str, ...]]:
        """A new note over `rounds` after the item's notes; older notes merged into one when
        the notes outgrow their budget."""
        item_id, objective = recall.work_item_id or "", recall.objective
        counter = counter_of(model)
        budget = self.settings.notes_tokens
        text = await self._ask(
            model, keeper, m.COMPACTION_PROMPT, m.compaction_input(item_id, objective, rounds)
        )
        covers = NoteCovers(
            from_turn=rounds[0].turn_id, to_turn=rounds[-1].turn_id, to_round=to_round
        )
        note = self._note(item_id, m.fit_text(text, budget // 2, counter.count), covers)
        notes = (*recall.notes, note)
        if m.notes_tokens(notes, counter.count) <= budget or len(notes) < 2:
            return notes, ()
        older = notes[:-1]
        room = max(budget - counter.count(note.text), budget // 4)
        merged_text = await self._ask(
            model, keeper, m.MERGE_PROMPT, m.merge_input(item_id, objective, older)
        )
        covers = older[-1].covers.model_copy(update={"from_turn": older[0].covers.from_turn})
        merged = self._note(item_id, m.fit_text(merged_text, room, counter.count), covers)
        return (merged, note), tuple(n.id for n in older)

    def _note(self, work_item_id: str, text: str, covers: NoteCovers) -> ProcessNote:
        return ProcessNote(
            id=self.new_id("note_"),
            work_item_id=work_item_id,
            text=text,
            covers=covers,
            created_at=self.clock(),
        )

    async def _ask(self, model: TurnModel, keeper: LeaseKeeper, prompt: str, content: str) -> str:
        """One compaction call to the agent's own model; the scripted provider extracts."""
        config = model.target.config
        if config.kind == "scripted":
            return m.extract(content, self.settings.notes_tokens // 2, counter_of(model).count)
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": content}]
        answer = await self.caller.call(model.target, messages, [], keeper)
        model.took(answer)
        if not answer.text.strip():
            raise RuntimeError("the model answered the compaction call with no text")
        return answer.text.strip()

    async def _store(
        self,
        *,
        command_id: str,
        agent_id: str,
        turn_id: str,
        token: int,
        work_item_id: str,
        notes: tuple[ProcessNote, ...],
        merged: tuple[str, ...],
    ) -> None:
        reply = await self.client.send(
            c.CompactWorkItem(
                command_id=command_id,
                agent_id=agent_id,
                turn_id=turn_id,
                fencing_token=token,
                work_item_id=work_item_id,
                notes=notes,
                merged=merged,
            )
        )
        if reply.error is not None and reply.error.kind is ErrorKind.STALE_TURN:
            raise Superseded(reply.error.message)
        if reply.error is not None:
            raise RuntimeError(f"the ledger refused the note: {reply.error.message}")


def counter_of(model: TurnModel) -> TokenCounter:
    config = model.target.config
    return TokenCounter(provider=config.kind, model=config.model)
