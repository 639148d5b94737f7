"""The archive's pure rules for finished WorkItems (contract §23, §29): which leave Redis, what
an item file and a batch manifest hold, the ledger's CommitItemArchive rule, an archived id on
every mutating tool, the finished list's cursors, and the files written and read back."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from services.ledger.rules import Context, LedgerState, decide
from shared.archive.items import ItemFiles
from shared.domain.archive import (
    COMMIT_WITHIN_S,
    ITEM_BATCH_MAX,
    ItemBatch,
    item_archive_command_id,
    item_batch,
    item_path,
    items_due,
)
from shared.domain.delegation import DelegatedFrom
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.readouts import work_item_json
from shared.domain.records import BriefKind, BriefRecord, DeliverySummaryRecord, WorkItemState
from shared.domain.tools import (
    CancelWorkItemInput,
    CompleteWorkItemInput,
    PickWorkItemInput,
    UpdateWorkItemInput,
    WaitForInput,
)
from shared.store.archived import CursorError, Position, decode_cursor, encode_cursor
from shared.wire import commands as c
from shared.wire.events import WorkItemsArchived
from tests.builders import (
    AGENT_ID,
    make_agent,
    make_agent_record,
    make_plan_artifact,
    make_wait,
    make_work_item,
    ulid_body,
    work_item_id,
)

T0 = datetime(2026, 11, 29, tzinfo=UTC)
DELEGATION = "dlg_" + ulid_body(5)
DAY_MS = 86_400_000


def _doc(n: int, *, state: str = "completed") -> bytes:
    item = make_work_item(
        id=work_item_id(n),
        state=WorkItemState(state),
        outcome="done" if state == "completed" else None,
    )
    return orjson.dumps(work_item_json(item), option=orjson.OPT_SORT_KEYS)


def _brief(n: int, item: int | None, kind: BriefKind = BriefKind.RESULT) -> bytes:
    record = BriefRecord(
        id=f"brief_{n}",
        agent_id=AGENT_ID,
        work_item_id=work_item_id(item) if item else None,
        kind=kind,
        text=f"brief {n}",
        turn_id=None,
        created_at=T0 + timedelta(seconds=n),
    )
    return record.model_dump_json().encode()


def _summary(n: int, item: int) -> bytes:
    record = DeliverySummaryRecord(
        id=f"sum_{n}",
        agent_id=AGENT_ID,
        work_item_id=work_item_id(item),
        text=f"summary {n}",
        turn_id=None,
        created_at=T0,
    )
    return record.model_dump_json().encode()


BRIEFS = [_brief(1, 1), _brief(2, 3), _brief(3, None), _brief(4, 2)]
REPLIES = [_brief(5, 1, BriefKind.REPLY), _brief(6, 3, BriefKind.REPLY)]
SUMMARIES = [_summary(1, 2), _summary(2, 1)]


def _batch(*ns: int, state: str = "completed") -> ItemBatch:
    return item_batch(
        AGENT_ID,
        [(work_item_id(n), _doc(n, state=state), 1000 + n) for n in ns],
        briefs=BRIEFS,
        reply_briefs=REPLIES,
        summaries=SUMMARIES,
    )


@pytest.mark.parametrize(
    ("hot", "oldest_ms", "due"),
    [
        (200, [0] * 100, 0),  # at the limit, all young: nothing
        (201, [0] * 100, 41),  # past it: down to four fifths (160)
        (1000, [0] * 100, ITEM_BATCH_MAX),  # a backlog leaves in batches
        (5, [-8 * DAY_MS, -8 * DAY_MS, -6 * DAY_MS, 0, 0], 2),  # past LONGRUN_HOT_DAYS
        (0, [], 0),
    ],
)
def test_finished_items_leave_past_the_count_or_the_age(
    hot: int, oldest_ms: list[int], due: int
) -> None:
    now = 100 * DAY_MS
    oldest = [(work_item_id(i + 1), now + ms) for i, ms in enumerate(oldest_ms)]
    found = items_due(oldest, hot=hot, now_ms=now, hot_finished=200, hot_days=7)
    assert found == [i for i, _ in oldest[:due]]


def test_an_item_file_holds_the_item_its_briefs_and_summaries_as_stored() -> None:
    batch = _batch(1, 3)
    assert batch.ids == (work_item_id(1), work_item_id(3))
    first = orjson.loads(dict(batch.files)[work_item_id(1)])
    assert first["work_item"] == orjson.loads(_doc(1))
    assert first["finished_ms"] == 1001
    assert [b["id"] for b in first["briefs"]] == ["brief_1", "brief_5"]
    assert [s["id"] for s in first["delivery_summaries"]] == ["sum_2"]
    # What leaves Redis with them: their briefs, replies and summaries, nobody else's.
    assert batch.briefs == (BRIEFS[0], BRIEFS[1])
    assert batch.reply_briefs == tuple(REPLIES)
    assert batch.summaries == (SUMMARIES[1],)
    refs = batch.manifest.items
    assert [r.sha256 for r in refs] == [hashlib.sha256(d).hexdigest() for _, d in batch.files]
    # The same hot copies make the same bytes; another brief makes another batch.
    assert _batch(1, 3).manifest.sha256 == batch.manifest.sha256
    other = item_batch(
        AGENT_ID,
        [(work_item_id(n), _doc(n), 1000 + n) for n in (1, 3)],
        briefs=[*BRIEFS, _brief(9, 1)],
        reply_briefs=REPLIES,
        summaries=SUMMARIES,
    )
    assert other.manifest.sha256 != batch.manifest.sha256
    assert batch.manifest.name.startswith("items/batches/0000000001003-")
    entry = batch.entry()
    assert (entry.batch, entry.items, entry.first_ms, entry.last_ms) == (
        batch.manifest.name,
        2,
        1001,
        1003,
    )


def _ctx(now: datetime = T0) -> Context:
    return Context(now=now, new_id=lambda prefix: prefix + "1")


def _state(batch: ItemBatch | None, **agent: object) -> LedgerState:
    record = make_agent_record(state=make_agent(**agent))
    return LedgerState(agent_id=AGENT_ID, agent=record, item_batch=batch)


def _commit(batch: ItemBatch, *, sha: str | None = None, written: datetime = T0) -> c.Command:
    return c.CommitItemArchive(
        command_id=item_archive_command_id(AGENT_ID, batch.manifest.sha256),
        agent_id=AGENT_ID,
        work_item_ids=batch.ids,
        batch_sha256=sha or batch.manifest.sha256,
        written_at=written,
    )


def test_commit_item_archive_drops_what_the_batch_holds_and_says_so() -> None:
    batch = _batch(1, 3)
    decision = decide(_state(batch), _commit(batch), _ctx(T0 + timedelta(seconds=30)))
    assert decision.side.item_archive == batch
    (event,) = decision.events
    assert isinstance(event, WorkItemsArchived)
    assert (event.batch, event.work_item_ids) == (batch.manifest.name, batch.ids)
    assert decision.result == {"batch": batch.manifest.name, "work_items": 2}


@pytest.mark.parametrize(
    ("state", "command", "why"),
    [
        (_state(None), _commit(_batch(1)), "not every WorkItem"),  # one is not hot finished
        (_state(_batch(1)), _commit(_batch(1), sha="e" * 64), "do not make the batch"),
        (_state(_batch(1, 3)), _commit(_batch(1)), "not every WorkItem"),
        (_state(_batch(1, state="open")), _commit(_batch(1, state="open")), "open, current"),
        (
            _state(_batch(1), current_work_item_id=work_item_id(1)),
            _commit(_batch(1)),
            "open, current",
        ),
        (
            _state(_batch(1)),
            _commit(_batch(1), written=T0 - timedelta(seconds=COMMIT_WITHIN_S + 1)),
            "write it again",
        ),
        (
            LedgerState(
                agent_id=AGENT_ID,
                agent=make_agent_record(),
                waits={"w": make_wait(work_item_id=work_item_id(1))},
                item_batch=_batch(1),
            ),
            _commit(_batch(1)),
            "active wait",
        ),
    ],
)
def test_commit_item_archive_refuses_what_redis_does_not_hold_alike(
    state: LedgerState, command: c.Command, why: str
) -> None:
    with pytest.raises(DomainError, match=why) as refused:
        decide(state, command, _ctx())
    assert refused.value.kind is ErrorKind.ARCHIVE_MISMATCH


WID = work_item_id(7)
MUTATING = [
    c.UpdateWorkItem(command_id="u", agent_id=AGENT_ID, args=UpdateWorkItemInput(work_item_id=WID)),
    c.PickWorkItem(command_id="p", agent_id=AGENT_ID, args=PickWorkItemInput(work_item_id=WID)),
    c.CompleteWorkItem(
        command_id="d", agent_id=AGENT_ID, args=CompleteWorkItemInput(work_item_id=WID)
    ),
    c.CancelWorkItem(
        command_id="x",
        agent_id=AGENT_ID,
        args=CancelWorkItemInput(work_item_id=WID, reason="Not needed"),
    ),
    c.WaitFor(
        command_id="w",
        agent_id=AGENT_ID,
        args=WaitForInput(reason="Later", wake="operator_input", work_item_id=WID),
    ),
]


@pytest.mark.parametrize("command", MUTATING, ids=lambda cmd: cmd.message_type)
def test_an_archived_id_on_a_mutating_tool_is_not_open(command: c.Command) -> None:
    state = LedgerState(
        agent_id=AGENT_ID, agent=make_agent_record(), archived_items=frozenset({WID})
    )
    with pytest.raises(DomainError, match="archived") as refused:
        decide(state, command, _ctx())
    assert refused.value.kind is ErrorKind.WORK_ITEM_NOT_OPEN
    # Without the archive's word it is an id nobody has.
    with pytest.raises(DomainError) as missing:
        decide(LedgerState(agent_id=AGENT_ID, agent=make_agent_record()), command, _ctx())
    assert missing.value.kind is ErrorKind.WORK_ITEM_NOT_FOUND


def test_a_finished_cursor_names_its_agent_and_position() -> None:
    at = Position(1234, work_item_id(2))
    assert decode_cursor(AGENT_ID, encode_cursor(AGENT_ID, at)) == at
    with pytest.raises(CursorError, match="another agent"):
        decode_cursor("someone-else", encode_cursor(AGENT_ID, at))
    forged = [
        "not base64 at all!",
        "e30",  # {}
        encode_cursor(AGENT_ID, at)[:-3],
        "eyJhZ2VudCI6ImFnZW50LTEiLCJtcyI6LTEsImlkIjoid2lfMSJ9",  # ms -1, id not a WorkItem's
    ]
    for cursor in forged:
        with pytest.raises(CursorError, match="not one this list handed out"):
            decode_cursor(AGENT_ID, cursor)


def test_item_files_are_written_whole_and_read_back(tmp_path: Path) -> None:
    files = ItemFiles(tmp_path)
    batch = _batch(1, 3)
    files.write(AGENT_ID, batch)
    read = files.read_item(AGENT_ID, work_item_id(1))
    assert read is not None
    assert read.work_item.id == work_item_id(1)
    assert read.finished_ms == 1001
    assert [b.id for b in read.briefs] == ["brief_1", "brief_5"]
    assert [s.id for s in read.delivery_summaries] == ["sum_2"]
    assert files.read_item(AGENT_ID, work_item_id(2)) is None
    assert files.read_manifest(AGENT_ID, batch.manifest.name) == batch.manifest
    raw = (tmp_path / AGENT_ID / item_path(work_item_id(3))).read_bytes()
    assert raw == dict(batch.files)[work_item_id(3)]
    assert [name for name, _ in files.batch_names(AGENT_ID)] == [batch.manifest.name]
    assert not list(tmp_path.rglob("*.tmp"))
    files.remove(AGENT_ID, [batch.manifest.name, item_path(work_item_id(1))])
    assert files.batch_names(AGENT_ID) == []
    assert files.read_item(AGENT_ID, work_item_id(1)) is None


def test_a_delegation_reaching_an_archived_item_changes_nothing() -> None:
    """A late creation (an outbox resend) or cancel of a delegated WorkItem that finished and
    was archived since: nothing created again, no early-cancel mark left."""
    state = LedgerState(
        agent_id=AGENT_ID, agent=make_agent_record(), archived_items=frozenset({WID})
    )
    origin = DelegatedFrom(
        delegation_id=DELEGATION, agent_id="parent", work_item_id=work_item_id(2)
    )
    create = c.CreateDelegatedWorkItem(
        command_id="create",
        agent_id=AGENT_ID,
        work_item_id=WID,
        plan_artifact=make_plan_artifact(item_id=WID),
        objective="Delegated",
        delegated_from=origin,
    )
    created = decide(state, create, _ctx())
    assert (created.result, created.events, created.state.items) == (
        {"work_item_id": WID, "created": False},
        (),
        {},
    )
    cancel = c.CancelDelegatedWorkItem(
        command_id="cancel",
        agent_id=AGENT_ID,
        delegation_id=DELEGATION,
        work_item_id=WID,
        reason="Not needed",
    )
    cancelled = decide(state, cancel, _ctx())
    assert cancelled.result == {"cancelled": False}
    assert cancelled.state.agent == state.agent  # no early-cancel mark
