"""The ledger's rule for the archive's second phase: CommitArchive drops the hot copies of
history events a segment file already holds, and only those."""

from __future__ import annotations

from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.errors import DomainError, ErrorKind
from shared.wire.commands import CommitArchive
from shared.wire.events import HistoryArchived


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
