"""Memory on resume: when a WorkItem becomes current inside a turn (PickWorkItem, which is how an
item comes back after a wait or a delegation), the next request shows its process notes and its
recent uncovered trace, as a turn's start does for the item current then; once per turn per
item (docs/architecture.md, "How a turn's prompt is assembled")."""

from __future__ import annotations

import structlog

from services.turn_executor.memory import Memory, Recall, Superseded
from services.turn_executor.turn import Turn, TurnSuperseded

log = structlog.get_logger("longrun.executor")

LEFT = "[The process {what} of {work_item_id} were shown here; it is no longer current.]"


async def _nothing() -> None:
    """BeginTurn's answer: a turn's rounds only run once it was accepted."""


async def remember(turn: Turn, memory: Memory) -> None:
    """Before a request: if the current WorkItem became current since the turn began and its
    memory was not shown in this turn yet, show its notes and trace after the rounds so far;
    the memory shown for the item current before gives way to a line saying so."""
    parts, model = turn.parts, turn.model
    if not turn.remembered and parts.recall.work_item_id is not None:
        turn.remembered.add(parts.recall.work_item_id)  # shown by the turn's opening
    current = turn.focused
    if current is None or current in turn.remembered or model is None:
        return
    turn.remembered.add(current)
    items = await memory.reads.items(turn.agent_id, [current])
    try:
        recall = await memory.recall(
            items[0] if items else None,
            agent_id=turn.agent_id,
            turn_id=turn.turn_id,
            token=turn.token,
            model=model,
            keeper=turn.keeper,
            confirm=_nothing,
        )
    except Superseded as exc:
        raise TurnSuperseded(str(exc)) from exc
    notes, trace = recall.notes_text(), recall.trace_text()
    if notes is None and trace is None:
        return
    _set_aside(turn)
    if notes is not None:
        parts.notes = len(turn.messages)
        turn.messages.append({"role": "user", "content": notes})
    if trace is not None:
        parts.trace = len(turn.messages)
        turn.messages.append({"role": "user", "content": trace})
    parts.recall, parts.trace_kept = recall, None
    turn.note("user", recall.mark())
    log.info("memory_on_resume", agent_id=turn.agent_id, work_item_id=current)


def _set_aside(turn: Turn) -> None:
    """The notes and trace shown for the item current before give way to one line each."""
    parts = turn.parts
    before = parts.recall.work_item_id
    for what, at in (("notes", parts.notes), ("trace", parts.trace)):
        if at is not None and before is not None:
            line = LEFT.format(what=what, work_item_id=before)
            turn.messages[at]["content"] = line
    parts.notes = parts.trace = None
    parts.recall = Recall()


def among_rounds(turn: Turn) -> bool:
    """Whether the memory shown sits among the turn's rounds (shown on resume): compaction
    between rounds leaves such a turn as it is."""
    parts = turn.parts
    shown = [at for at in (parts.notes, parts.trace) if at is not None]
    return any(at >= parts.rounds_start for at in shown)
