"""The agent's recorded transcript kept within LONGRUN_TRANSCRIPT_MAX_ROUNDS: once it holds more
rounds, a turn trims its oldest down to nine tenths of the bound, as far as no prompt will show
them again. Rounds of open WorkItems that are not current (parked for days, waiting) would hold
it past its bound: they are compacted into those items' process notes first, so no open item
pins the transcript (docs/architecture.md, "How a turn's prompt is assembled": Retention)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog

from services.turn_executor.memory import Memory, Recall, Superseded, counter_of
from services.turn_executor.turn import Turn, TurnSuperseded
from shared.domain import memory as m
from shared.domain.records import ProcessNote, WorkItem
from shared.domain.trimming import parked_entries, trimmable_prefix
from shared.wire import commands as c

log = structlog.get_logger("longrun.executor")

HEAD_ENTRIES_PER_ROUND = 8
"""Entries read from the transcript's head per round to trim (a round is a few entries)."""


async def trim_for(
    turn: Turn,
    memory: Memory,
    items: Sequence[WorkItem],
    *,
    rounds: int,
    confirm: Callable[[], Awaitable[None]],
) -> c.TrimTranscript | None:
    """When the transcript holds more rounds than its bound (`rounds`, read with the turn's
    opening reads): compact what parked items hold of its head, then the command that trims its
    oldest rounds down to nine tenths of the bound (sent with the turn's closing commands)."""
    bound = memory.settings.transcript_max_rounds
    if rounds <= bound:
        return None
    excess = rounds - bound * 9 // 10
    head = await memory.reads.transcript_head(turn.agent_id, excess * HEAD_ENTRIES_PER_ROUND)
    by_id = {item.id: item for item in items}
    parked = parked_entries(head, by_id, excess, turn.focused)
    if parked:
        await confirm()  # BeginTurn's answer before any other command of the turn
    for item_id, entries in parked.items():
        notes = await _compact_parked(turn, memory, by_id[item_id], entries)
        if notes is not None:
            by_id[item_id] = by_id[item_id].model_copy(update={"process_notes": notes})
    trimmed, trimmed_rounds = trimmable_prefix(head, by_id, excess)
    if not trimmed:
        return None
    return c.TrimTranscript(
        command_id=f"{turn.turn_id}:trim",
        agent_id=turn.agent_id,
        turn_id=turn.turn_id,
        fencing_token=turn.token,
        entries=trimmed,
        rounds=trimmed_rounds,
    )


async def _compact_parked(
    turn: Turn, memory: Memory, item: WorkItem, entries: Sequence[Mapping[str, Any]]
) -> tuple[ProcessNote, ...] | None:
    """A parked item's entries at the transcript's head into its process notes, in calls of at
    most a trace budget each; the notes as stored (None when none was). A failed call keeps
    what the earlier ones stored and leaves the rest: the trim stops there, the turn goes on."""
    model = turn.model
    budget = memory.settings.trace_tokens
    rounds = m.trace_rounds(entries, max_entry_chars=budget * 2)
    if model is None or not rounds:
        return None
    recall = Recall(item.id, item.objective, item.process_notes)
    stored: tuple[ProcessNote, ...] | None = None
    for n, chunk in enumerate(m.chunks(rounds, budget, counter_of(model).count)):
        try:
            stored = await memory.compact(
                recall,
                chunk,
                model,
                turn.keeper,
                agent_id=turn.agent_id,
                turn_id=turn.turn_id,
                token=turn.token,
                to_round=chunk[-1].round,
                label=f":parked{n}",
            )
        except Superseded as exc:
            raise TurnSuperseded(str(exc)) from exc
        except Exception as exc:  # a compaction never fails the turn: the trim stops here
            log.warning(
                "compaction_failed", agent_id=turn.agent_id, work_item_id=item.id, error=str(exc)
            )
            break
        recall.notes = stored
    if stored is not None:
        log.info("parked_item_compacted", agent_id=turn.agent_id, work_item_id=item.id)
    return stored
