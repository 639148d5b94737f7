"""The ledger's rules for the archive's second phase: CommitArchive drops the hot copies of
history events a segment file already holds, CommitItemArchive those of finished WorkItems (with
their briefs and delivery summaries) a batch's files hold, and only those."""

from __future__ import annotations

from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.archive import COMMIT_WITHIN_S
from shared.domain.errors import DomainError, ErrorKind
from shared.wire.commands import CommitArchive, CommitItemArchive
from shared.wire.events import HistoryArchived, WorkItemsArchived


def commit_archive(state: LedgerState, cmd: CommitArchive, ctx: Context) -> Decision:
    """The segment must start at the first hot event, end within the history, and hash to the
    same bytes as the hot events it covers: then they leave Redis, the manifest stays, and the
    chain goes on from the segment's last hash (the next hot event's `prev_hash`)."""
    agent = state.require_agent()
    archived = agent.history_archived_seq
    if cmd.upto_seq <= archived:
        raise DomainError(
            ErrorKind.ARCHIVE_MISMATCH,
            f"the history up to {archived} is archived already (asked up to {cmd.upto_seq})",
        )
    if cmd.upto_seq > agent.history_seq:
        raise DomainError(
            ErrorKind.ARCHIVE_MISMATCH,
            f"the history ends at {agent.history_seq} (asked up to {cmd.upto_seq})",
        )
    segment = state.archive_segment
    if (
        segment is None
        or (segment.first_seq, segment.last_seq) != (archived + 1, cmd.upto_seq)
        or segment.sha256 != cmd.segment_sha256
    ):
        raise DomainError(
            ErrorKind.ARCHIVE_MISMATCH,
            f"events {archived + 1}..{cmd.upto_seq} as the ledger holds them do not hash to "
            f"{cmd.segment_sha256}",
            details={"first_seq": archived + 1, "upto_seq": cmd.upto_seq},
        )
    after = agent.model_copy(update={"history_archived_seq": cmd.upto_seq})
    event = HistoryArchived(agent_id=state.agent_id, upto_seq=cmd.upto_seq, segment=segment.segment)
    return Decision(
        state=state._copy(agent=after, archive_segment=None),
        events=(event,),
        result={"upto_seq": cmd.upto_seq, "segment": segment.segment, "events": segment.events},
        side=SideWrites(history_archive=segment),
    )


def commit_item_archive(state: LedgerState, cmd: CommitItemArchive, ctx: Context) -> Decision:
    """The batch the named WorkItems make, as the ledger holds them, must hash to the manifest
    the archiver wrote; each must be completed and not the current one; and the files must be
    recent (a sweep takes older uncommitted ones for a crash's leftovers). Then the WorkItems,
    their briefs and delivery summaries leave Redis, and the batch is recorded."""
    agent = state.require_agent()
    batch = state.item_batch
    if batch is None or batch.ids != cmd.work_item_ids:
        raise DomainError(
            ErrorKind.ARCHIVE_MISMATCH,
            "not every WorkItem named is a finished one still in Redis",
            details={"work_item_ids": list(cmd.work_item_ids)},
        )
    if batch.manifest.sha256 != cmd.batch_sha256:
        raise DomainError(
            ErrorKind.ARCHIVE_MISMATCH,
            f"the WorkItems as the ledger holds them do not make the batch {cmd.batch_sha256}",
        )
    age = (ctx.now - cmd.written_at).total_seconds()
    if age > COMMIT_WITHIN_S:
        raise DomainError(
            ErrorKind.ARCHIVE_MISMATCH,
            f"the batch was written {age:.0f} s ago (at most {COMMIT_WITHIN_S} s): write it again",
        )
    current = agent.state.current_work_item_id
    waited = {w.work_item_id for w in state.active_waits()}
    for item_id in batch.ids:
        if item_id == current or item_id in batch.open_ids or item_id in waited:
            raise DomainError(
                ErrorKind.ARCHIVE_MISMATCH,
                f"WorkItem {item_id!r} is open, current or named by an active wait",
            )
    items = {i: item for i, item in state.items.items() if i not in set(batch.ids)}
    event = WorkItemsArchived(
        agent_id=state.agent_id, batch=batch.manifest.name, work_item_ids=batch.ids
    )
    return Decision(
        state=state._copy(items=items, item_batch=None),
        events=(event,),
        result={"batch": batch.manifest.name, "work_items": len(batch.ids)},
        side=SideWrites(item_archive=batch),
    )
