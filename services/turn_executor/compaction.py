"""Compaction between the rounds of a turn: when a long turn's own rounds no longer fit the room
the rest of its request leaves in the model's context window, the trace and the turn's oldest
rounds become a process note, as at a turn's start, and leave the request, so every request of
a long turn stays within the window too (docs/architecture.md, "How a turn's prompt is
assembled")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from services.turn_executor.memory import Memory, Recall, Superseded, counter_of
from services.turn_executor.resume import among_rounds, remember
from services.turn_executor.turn import Turn, TurnSuperseded
from shared.domain import memory as m
from shared.domain.records import ProcessNote

log = structlog.get_logger("longrun.executor")

COMPACTED = "[Rounds {first}..{last} of this turn are now in the process notes above.]"
CUT = "[Rounds {first}..{last} of this turn are not shown: {reason}.]"
TRACE_COMPACTED = "[Its rounds are now in the process notes above.]"


@dataclass(frozen=True, slots=True)
class RoundSpan:
    """One round of this turn in the request: its assistant message and the tool answers that
    follow it (`start` included, `end` excluded)."""

    round: int
    start: int
    end: int


def round_spans(
    messages: Sequence[dict[str, Any]], start: int, first_round: int
) -> list[RoundSpan]:
    """The turn's rounds in the request from `start`: each begins with an assistant message;
    a user message between two rounds (an operator's interjection) belongs to neither."""
    spans: list[RoundSpan] = []
    open_at: int | None = None
    for index in range(start, len(messages) + 1):
        role = messages[index]["role"] if index < len(messages) else None
        if role == "tool" and open_at is not None:
            continue
        if open_at is not None:
            spans.append(RoundSpan(first_round + len(spans), open_at, index))
            open_at = None
        if role == "assistant":
            open_at = index
    return spans


def to_compact(sizes: Sequence[int], cap: int, bound: Sequence[bool]) -> int:
    """How many of the oldest rounds leave the request: none while the rounds fit `cap`; else
    the oldest, never the newest nor past the first one bound to another WorkItem, until what
    stays fits half of it (so the next rounds do not compact again at once)."""
    left = sum(sizes)
    if left <= cap:
        return 0
    taken = 0
    for size, mine in zip(sizes[:-1], bound[:-1], strict=True):
        if left <= cap // 2 or not mine:
            break
        taken += 1
        left -= size
    return taken


def _nothing_to_compact(
    turn: Turn, spans: Sequence[RoundSpan], tools: Sequence[Mapping[str, Any]], budget: int
) -> bool:
    """Upper bounds that tokenize nothing (`TokenCounter.bound`) already show that the rounds and
    the trace fit the trace budget and the request fits the window, so `to_compact` would take
    nothing: most rounds are spared counting their tokens."""
    model, parts = turn.model, turn.parts
    assert model is not None
    counter = counter_of(model)
    rounds = sum(counter.bound(turn.messages[s.start : s.end]) for s in spans)
    trace = counter.bound([turn.messages[parts.trace]]) if parts.trace is not None else 0
    if rounds + trace > budget:
        return False
    return turn.guard is None or counter.bound(turn.messages, tools) <= turn.guard.limit


class BetweenRounds:
    """Keeps one turn's rounds within the trace budget; called before each model request."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    async def keep(self, turn: Turn, tools: Sequence[Mapping[str, Any]]) -> None:
        """Before a request: compact the turn's oldest rounds when they do not fit the room the
        rest of the request (system prompt, tools, opening messages) leaves in the window. A
        turn that fits keeps every round as it was: nothing is spent on a compaction call.
        First, the memory of an item that became current since the last request is shown."""
        await remember(turn, self.memory)
        parts, recall, model, guard = turn.parts, turn.parts.recall, turn.model, turn.guard
        if recall.work_item_id is None or model is None or guard is None or among_rounds(turn):
            return
        counter = counter_of(model)
        spans = round_spans(turn.messages, parts.rounds_start, parts.first_round)
        if _nothing_to_compact(turn, spans, tools, self.memory.settings.trace_tokens):
            return
        sizes = [counter.request(turn.messages[s.start : s.end]) for s in spans]
        cap = guard.limit - (counter.request(turn.messages, tools) - sum(sizes))
        taken = to_compact(sizes, cap, _bound_to(turn, recall.work_item_id, spans))
        if taken:
            await self._compact(turn, spans[:taken])

    async def _compact(self, turn: Turn, chosen: Sequence[RoundSpan]) -> None:
        """The trace and the chosen rounds into a note, shown in their place; a failure only
        takes the rounds out, with a line saying why."""
        recall, model = turn.parts.recall, turn.model
        assert model is not None
        first, last = chosen[0].round, chosen[-1].round
        rounds = _trace_rounds(turn, chosen, self.memory.settings.trace_tokens)
        try:
            if recall.left_out:
                raise RuntimeError("older rounds of this item were already left out uncompacted")
            notes = await self.memory.compact(
                recall,
                [*recall.rounds, *rounds],
                model,
                turn.keeper,
                agent_id=turn.agent_id,
                turn_id=turn.turn_id,
                token=turn.token,
                to_round=last,
            )
        except Superseded as exc:
            raise TurnSuperseded(str(exc)) from exc
        except Exception as exc:  # a compaction never fails the turn: the rounds are cut
            log.warning(
                "compaction_failed",
                agent_id=turn.agent_id,
                work_item_id=recall.work_item_id,
                error=str(exc),
            )
            reason = f"they outgrew the trace budget and compaction failed: {exc}"[:300]
            leave(turn, chosen, CUT.format(first=first, last=last, reason=reason))
            return
        _show_notes(turn, recall, notes)
        leave(turn, chosen, COMPACTED.format(first=first, last=last))
        log.info("compacted_between_rounds", agent_id=turn.agent_id, rounds=len(chosen))


def _bound_to(turn: Turn, work_item_id: str, spans: Sequence[RoundSpan]) -> list[bool]:
    """For each round: whether everything it recorded is bound to this WorkItem."""
    others = {entry.round for bound, entry in turn.own if bound != work_item_id}
    return [span.round not in others for span in spans]


def _trace_rounds(turn: Turn, chosen: Sequence[RoundSpan], budget: int) -> list[m.TraceRound]:
    wanted = {span.round for span in chosen}
    entries = [
        {**entry.model_dump(), "turn_id": turn.turn_id}
        for _, entry in turn.own
        if entry.round in wanted
    ]
    return m.trace_rounds(entries, max_entry_chars=budget * 2)


def _show_notes(turn: Turn, recall: Recall, notes: tuple[ProcessNote, ...]) -> None:
    """The request's notes message shows the new notes (inserted after the summary when there
    was none); the trace it compacted shows only that it did."""
    parts = turn.parts
    recall.notes, recall.rounds, recall.left_out = notes, [], 0
    text = recall.notes_text() or ""
    if parts.notes is None:
        at = (parts.summary if parts.summary is not None else 0) + 1
        turn.messages.insert(at, {"role": "user", "content": text})
        parts.inserted(at)
        parts.notes = at
    else:
        turn.messages[parts.notes]["content"] = text
    if parts.trace is not None:
        heading = m.TRACE_HEADING.format(work_item_id=recall.work_item_id)
        turn.messages[parts.trace]["content"] = f"{heading}\n{TRACE_COMPACTED}"
        parts.trace_kept = None


def leave(turn: Turn, chosen: Sequence[RoundSpan], marker: str) -> None:
    """The chosen rounds' messages leave the request, a line saying so in their place;
    operator messages between them stay."""
    gone = {index for span in chosen for index in range(span.start, span.end)}
    at = chosen[0].start
    kept = [msg for index, msg in enumerate(turn.messages) if index not in gone]
    kept.insert(at, {"role": "user", "content": marker})
    turn.messages[:] = kept
    turn.parts.first_round = chosen[-1].round + 1
    last = chosen[-1].round
    turn.own = [(bound, entry) for bound, entry in turn.own if entry.round > last]
