"""The archive's pure rules for history (contract §23, §29): when a segment is cut, what it
holds, the ledger's CommitArchive rule, and the chain checked across the boundary."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import orjson
import pytest

from services.ledger.rules import Context, LedgerState, decide
from shared.domain.archive import (
    manifest_of,
    segment_bytes,
    segment_cut,
    segment_first_seq,
    segment_lines,
    segment_name,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.history import GENESIS_HASH, ChainCheck, seal_encoded, verify
from shared.wire.commands import CommitArchive
from shared.wire.events import HistoryArchived
from tests.builders import AGENT_ID, make_agent_record

T0 = datetime(2026, 11, 29, tzinfo=UTC)


def chain(count: int) -> list[bytes]:
    """`count` stored history events of AGENT_ID, as the ledger seals them."""
    docs, head = [], GENESIS_HASH
    for seq in range(1, count + 1):
        head, doc = seal_encoded(
            seq=seq,
            event_type="turn_started",
            at=T0,
            agent_id=AGENT_ID,
            work_item_id=None,
            data={"n": seq},
            prev_hash=head,
        )
        docs.append(doc)
    return docs


@pytest.mark.parametrize(
    ("hot", "limit", "cut"),
    [
        (0, 5000, 0),
        (5000, 5000, 0),  # at the limit: nothing yet
        (5001, 5000, 4000),  # past it: all but the newest fifth of the limit
        (5400, 5000, 4000),  # at most the other four fifths: a backlog is cut in pieces
        (12_000, 5000, 4000),
        (6, 5, 4),
        (3, 2, 1),
    ],
)
def test_a_segment_takes_all_but_the_newest_fifth(hot: int, limit: int, cut: int) -> None:
    assert segment_cut(hot, limit) == cut


def test_a_segment_is_the_stored_events_one_per_line_with_their_manifest() -> None:
    docs = chain(5)
    manifest = manifest_of(AGENT_ID, docs[1:4])
    raw = segment_bytes(docs[1:4])
    assert segment_lines(raw) == docs[1:4]
    assert manifest.sha256 == hashlib.sha256(raw).hexdigest()
    assert (manifest.first_seq, manifest.last_seq, manifest.events) == (2, 4, 3)
    assert manifest.first_prev_hash == orjson.loads(docs[0])["hash"]
    assert manifest.last_hash == orjson.loads(docs[3])["hash"]
    assert manifest.segment == segment_name(2, 4) == "history/000000000002-000000000004.jsonl"
    assert segment_first_seq(manifest.segment) == 2


def test_a_segment_needs_consecutive_events() -> None:
    docs = chain(4)
    with pytest.raises(ValueError, match="consecutive"):
        manifest_of(AGENT_ID, [docs[0], docs[2]])


def _ctx() -> Context:
    return Context(now=T0, new_id=lambda prefix: prefix + "1")


def _state(docs: list[bytes], archived: int, covered: int) -> LedgerState:
    """The agent with `len(docs)` events, `archived` of them archived, and the load's segment
    of the next `covered` hot ones."""
    head = orjson.loads(docs[-1])["hash"]
    agent = make_agent_record(
        history_seq=len(docs), history_head=head, history_archived_seq=archived
    )
    segment = manifest_of(AGENT_ID, docs[archived : archived + covered]) if covered else None
    return LedgerState(agent_id=AGENT_ID, agent=agent, archive_segment=segment)


def _commit(upto: int, sha: str) -> CommitArchive:
    return CommitArchive(command_id="c1", agent_id=AGENT_ID, upto_seq=upto, segment_sha256=sha)


def test_commit_archive_drops_what_the_segment_holds_and_says_so() -> None:
    docs = chain(10)
    state = _state(docs, archived=4, covered=4)
    assert state.archive_segment is not None
    decision = decide(state, _commit(8, state.archive_segment.sha256), _ctx())
    assert decision.side.history_archive == state.archive_segment
    assert decision.state.agent is not None
    assert decision.state.agent.history_archived_seq == 8
    (event,) = decision.events
    assert isinstance(event, HistoryArchived)
    assert (event.upto_seq, event.segment) == (8, segment_name(5, 8))


@pytest.mark.parametrize(
    ("archived", "covered", "upto", "why"),
    [
        (4, 4, 8, "hash to"),  # the file's bytes are not the hot events' bytes
        (8, 0, 8, "archived already"),
        (4, 0, 12, "ends at 10"),
        (4, 0, 8, "hash to"),  # the load found no such segment
    ],
)
def test_commit_archive_refuses_what_the_hot_events_do_not_match(
    archived: int, covered: int, upto: int, why: str
) -> None:
    state = _state(chain(10), archived, covered)
    with pytest.raises(DomainError, match=why) as refused:
        decide(state, _commit(upto, "e" * 64), _ctx())
    assert refused.value.kind is ErrorKind.ARCHIVE_MISMATCH


def test_the_chain_checked_in_pieces_is_the_chain_checked_whole() -> None:
    events = [orjson.loads(d) for d in chain(9)]
    check = ChainCheck()
    for piece in (events[:4], events[4:8], events[8:]):
        check.feed(piece)
    assert check.result(archived=8) == verify(events).model_copy(update={"archived": 8})
    assert check.result().ok


def test_an_edited_archived_event_is_named_by_its_seq() -> None:
    events = [orjson.loads(d) for d in chain(9)]
    events[5]["data"] = {"n": 600}
    check = ChainCheck()
    check.feed(events)
    result = check.result()
    assert (result.ok, result.first_bad_seq, result.first_bad_index, result.count) == (
        False,
        6,
        5,
        9,
    )


def test_a_segment_chained_again_whole_fails_at_the_first_event_after_it() -> None:
    """Contract §29: a segment re-chained whole passes its own links, so the first event after
    it (whose prev_hash still names the old last hash) is the one named."""
    docs = chain(9)
    events = [orjson.loads(d) for d in docs]
    forged, head = [], events[3]["prev_hash"]
    for event in events[3:6]:
        head, doc = seal_encoded(
            seq=event["seq"],
            event_type=event["type"],
            at=T0,
            agent_id=AGENT_ID,
            work_item_id=None,
            data={"n": -event["seq"]},
            prev_hash=head,
        )
        forged.append(orjson.loads(doc))
    result = verify([*events[:3], *forged, *events[6:]])
    assert result.first_bad_seq == 7
