"""Events that carry a whole WorkItem leave its process notes out, on a real Redis with the real
ledger: as the notes grow to their budget, every `work_item_*` event in the history and on the
partition's event stream stays the same size (notes are read with GetWorkItem
include_process_notes, and each note is in the history once, in its `work_item_compacted`)."""

from __future__ import annotations

from typing import Any

import orjson

from services.ledger.service import LedgerService
from services.turn_executor.lease import Leases
from shared.domain.records import NoteCovers, ProcessNote
from shared.domain.tools import GetWorkItemInput
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome
from tests.integration.ledger_driver import Driver

AGENT = "agent-1"
NOTE_CHARS = 1500


def note(work_item_id: str, n: int) -> ProcessNote:
    turn = new_id("turn_")
    return ProcessNote(
        id=new_id("note_"),
        work_item_id=work_item_id,
        text=f"note {n}: " + f"fact {n} " * (NOTE_CHARS // 8),
        covers=NoteCovers(from_turn=turn, to_turn=turn),
        created_at=utc_now(),
    )


async def stream_events(redis: AnyRedis, names: Names) -> list[dict[str, Any]]:
    entries: Any = await redis.xrange(names.events(names.partition(AGENT)))
    return [e for _, fields in entries for e in orjson.loads(fields[b"m"])["body"]["events"]]


async def test_work_item_events_stay_the_same_size_as_process_notes_grow(
    ledger: LedgerService, reads: ReadModel, redis: AnyRedis, names: Names
) -> None:
    d = Driver(ledger, reads, AGENT)
    assert (await d.ensure()).outcome is CommandOutcome.APPLIED
    item_id = await d.create("audit the vault")
    token = await Leases(redis, names, ttl_ms=60_000).acquire(AGENT, "test")
    assert token is not None
    notes: tuple[ProcessNote, ...] = ()
    for n in range(1, 7):
        notes = (*notes, note(item_id, n))
        compact = c.CompactWorkItem(
            command_id=d.cid(),
            agent_id=AGENT,
            turn_id=new_id("turn_"),
            fencing_token=token,
            work_item_id=item_id,
            notes=notes,
        )
        assert (await d.send(compact)).outcome is CommandOutcome.APPLIED
        updated = await d.tool("UpdateWorkItem", work_item_id=item_id, blocked_by=f"waiting {n}")
        assert updated.outcome is CommandOutcome.APPLIED, updated

    shown = await reads.get_work_item(
        AGENT, GetWorkItemInput(work_item_id=item_id, include_process_notes=True)
    )
    assert len(shown["work_item"]["process_notes"]) == 6
    history = await reads.history(AGENT, limit=1000)
    for events in (history, await stream_events(redis, names)):
        carrying = [e for e in events if "work_item" in e["data"]]
        assert {e["type"] for e in carrying} >= {"work_item_created", "work_item_updated"}
        assert all("process_notes" not in e["data"]["work_item"] for e in carrying)
        sizes = [len(orjson.dumps(e)) for e in events if e["type"] == "work_item_updated"]
        assert len(sizes) == 6
        assert max(sizes) - min(sizes) < 64, sizes  # a revision's digits, not 6 notes
        compacted = [e for e in events if e["type"] == "work_item_compacted"]
        assert [e["data"]["note"]["id"] for e in compacted] == [n.id for n in notes]
    assert (await reads.verify_history(AGENT)).ok
