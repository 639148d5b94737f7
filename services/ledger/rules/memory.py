"""Ledger rules for an agent's memory across turns: storing a WorkItem's process notes after a
compaction, and trimming the oldest recorded transcript (docs/architecture.md, "How a turn's
prompt is assembled")."""

from __future__ import annotations

from services.ledger.rules.common import revise
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from services.ledger.rules.turns import check_fence
from shared.domain.errors import DomainError, ErrorKind
from shared.wire.commands import CompactWorkItem, TrimTranscript
from shared.wire.events import TranscriptTrimmed, WorkItemCompacted


def compact_work_item(state: LedgerState, cmd: CompactWorkItem, ctx: Context) -> Decision:
    """Replace the open item's process notes with the compacted list; the newest note is the
    one this compaction wrote. A note about another item is refused."""
    state.require_agent()
    check_fence(state, cmd.fencing_token)
    item = state.open_item(cmd.work_item_id)
    strays = [note.id for note in cmd.notes if note.work_item_id != item.id]
    if strays:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"process notes {strays} are not about {item.id}",
            recovery_hint="Send only the notes of the WorkItem named by work_item_id.",
        )
    item = revise(item, ctx.now, process_notes=cmd.notes)
    state = state.with_item(item)
    event = WorkItemCompacted(
        agent_id=state.agent_id,
        work_item_id=item.id,
        note=cmd.notes[-1],
        merged=cmd.merged,
        notes=len(cmd.notes),
        turn_id=cmd.turn_id,
    )
    return Decision(state, (event,), {"notes": len(cmd.notes)})


def trim_transcript(state: LedgerState, cmd: TrimTranscript, ctx: Context) -> Decision:
    state.require_agent()
    check_fence(state, cmd.fencing_token)
    event = TranscriptTrimmed(
        agent_id=state.agent_id, entries=cmd.entries, rounds=cmd.rounds, turn_id=cmd.turn_id
    )
    side = SideWrites(transcript_trim=(cmd.entries, cmd.rounds))
    return Decision(state, (event,), {"trimmed": cmd.entries}, side=side)
