"""The archive's pure rules: when history is cut into a segment, a segment's bytes, name and
manifest, and the names of archived files (docs/operations.md, "The archive")."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from pydantic import Field

from shared.domain.base import Record

Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

HISTORY_DIR = "history"
"""An agent's history segments, under its archive directory."""
KEEP_FIFTH = 5
"""A segment takes all but the newest fifth of the hot limit (LONGRUN_HOT_EVENTS)."""


class SegmentManifest(Record):
    """What a history segment holds, written beside it and kept by the ledger once committed:
    the segment's events `first_seq..last_seq`, the chain's hash before the first
    (`first_prev_hash`) and after the last (`last_hash`), and the SHA-256 of the file."""

    agent_id: str
    segment: str
    """The segment file, relative to the agent's archive directory."""
    first_seq: int = Field(ge=1)
    last_seq: int = Field(ge=1)
    first_prev_hash: Sha256Hex
    last_hash: Sha256Hex
    sha256: Sha256Hex
    events: int = Field(ge=1)


class SegmentError(ValueError):
    """Events that cannot form a segment (out of order, not history events)."""


def segment_name(first_seq: int, last_seq: int) -> str:
    """Zero-padded, so names sort as the seqs they hold."""
    return f"{HISTORY_DIR}/{first_seq:012d}-{last_seq:012d}.jsonl"


def segment_first_seq(segment: str) -> int:
    """The first seq a segment's name says it holds (0 for a name that is not a segment's)."""
    stem = segment.rsplit("/", 1)[-1].removesuffix(".jsonl")
    first, _, _last = stem.partition("-")
    return int(first) if first.isdigit() else 0


def manifest_name(segment: str) -> str:
    return segment.removesuffix(".jsonl") + ".manifest.json"


def segment_bytes(docs: Sequence[bytes]) -> bytes:
    """A segment file: the events as the ledger stored them, one per line (JSON Lines)."""
    return b"".join(doc + b"\n" for doc in docs)


def segment_lines(raw: bytes) -> list[bytes]:
    """A segment file's events, as stored (the inverse of `segment_bytes`)."""
    return raw.split(b"\n")[:-1] if raw.endswith(b"\n") else raw.split(b"\n")


def manifest_of(agent_id: str, docs: Sequence[bytes]) -> SegmentManifest:
    """The manifest of a segment of `docs`, consecutive stored history events."""
    if not docs:
        raise SegmentError("a segment holds at least one event")
    first, last = _event(docs[0]), _event(docs[-1])
    first_seq, last_seq = int(first["seq"]), int(last["seq"])
    if last_seq - first_seq + 1 != len(docs):
        raise SegmentError(f"events {first_seq}..{last_seq} are not {len(docs)} consecutive ones")
    return SegmentManifest(
        agent_id=agent_id,
        segment=segment_name(first_seq, last_seq),
        first_seq=first_seq,
        last_seq=last_seq,
        first_prev_hash=str(first["prev_hash"]),
        last_hash=str(last["hash"]),
        sha256=hashlib.sha256(segment_bytes(docs)).hexdigest(),
        events=len(docs),
    )


def _event(doc: bytes) -> dict[str, Any]:
    try:
        event = orjson.loads(doc)
    except orjson.JSONDecodeError as exc:
        raise SegmentError(f"not a history event: {exc}") from None
    if not isinstance(event, dict) or not {"seq", "prev_hash", "hash"} <= event.keys():
        raise SegmentError("not a history event")
    return event


def segment_cut(hot_events: int, hot_limit: int) -> int:
    """How many of the oldest hot events the next segment takes: none until the hot history
    passes `hot_limit`, then all but the newest fifth of the limit, at most the limit's other
    four fifths at once (a backlog is cut into several segments of that size)."""
    keep = max(hot_limit // KEEP_FIFTH, 1)
    if hot_events <= hot_limit:
        return 0
    return min(hot_events - keep, max(hot_limit - keep, 1))


def archive_command_id(agent_id: str, upto_seq: int, sha256: str) -> str:
    """CommitArchive's id, from what it commits: two archivers cutting the same segment send
    one command."""
    return f"archive:{agent_id}:{upto_seq}:{sha256[:32]}"


# ---- finished WorkItems

ITEMS_DIR = "items"
"""An agent's archived WorkItems, one file each (`items/<id>.json`), under its directory."""
BATCHES_DIR = "items/batches"
"""The manifests of the batches they left Redis in, oldest first by name."""
ITEM_BATCH_MAX = 100
"""At most this many WorkItems leave Redis in one batch (one CommitItemArchive)."""
COMMIT_WITHIN_S = 600
"""A CommitItemArchive written longer ago than this is refused: a sweep may by then have taken
the files of an uncommitted batch for a crash's leftovers (docs/operations.md)."""
ORPHAN_AGE_S = 3600.0
"""Uncommitted batch files older than this are a crash's or a lost race's leftovers."""


class ArchivedItemRef(Record):
    """One WorkItem of a batch: when it finished (epoch ms, its score in the finished index)
    and the SHA-256 of its file."""

    id: str
    finished_ms: int = Field(ge=0)
    sha256: Sha256Hex


class ItemBatchManifest(Record):
    """A batch of finished WorkItems that left Redis together: written beside their files
    before the commit, and named by the ledger's record of the commit."""

    agent_id: str
    items: tuple[ArchivedItemRef, ...]
    """Oldest finished first."""

    def data(self) -> bytes:
        """The manifest file's bytes (canonical: sorted keys)."""
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS) + b"\n"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data()).hexdigest()

    @property
    def name(self) -> str:
        """`items/batches/<last finished ms>-<sha prefix>.json`: sorts by time, says what."""
        return f"{BATCHES_DIR}/{self.items[-1].finished_ms:013d}-{self.sha256[:16]}.json"


class ItemBatchEntry(Record):
    """What Redis keeps of a committed batch (the agent's `item_batches` list): where its
    manifest is and the span of finish times it covers, so a page reads only the manifests it
    shows."""

    batch: str
    items: int = Field(ge=1)
    first_ms: int = Field(ge=0)
    last_ms: int = Field(ge=0)


@dataclass(frozen=True, slots=True)
class ItemBatch:
    """A batch as the hot copies make it: each WorkItem's file, the manifest, and the brief
    and delivery-summary docs (as stored) its files hold, which leave Redis with them."""

    manifest: ItemBatchManifest
    files: tuple[tuple[str, bytes], ...]
    """(WorkItem id, its file's bytes), in the manifest's order."""
    briefs: tuple[bytes, ...]
    reply_briefs: tuple[bytes, ...]
    summaries: tuple[bytes, ...]
    open_ids: frozenset[str] = frozenset()
    """WorkItems of the batch whose stored state is not completed (none may leave Redis)."""

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(ref.id for ref in self.manifest.items)

    def entry(self) -> ItemBatchEntry:
        refs = self.manifest.items
        return ItemBatchEntry(
            batch=self.manifest.name,
            items=len(refs),
            first_ms=refs[0].finished_ms,
            last_ms=refs[-1].finished_ms,
        )


def item_path(work_item_id: str) -> str:
    return f"{ITEMS_DIR}/{work_item_id}.json"


def item_file(
    item_doc: bytes, finished_ms: int, briefs: Sequence[bytes], summaries: Sequence[bytes]
) -> bytes:
    """An archived WorkItem's file: the stored item, when it finished, and the briefs and
    delivery summaries that name it, each as Redis held it (one JSON object, canonical order
    of keys, so the same hot copies always make the same bytes)."""
    return b"".join(
        (
            b'{"briefs":[',
            b",".join(briefs),
            b'],"delivery_summaries":[',
            b",".join(summaries),
            b'],"finished_ms":',
            str(finished_ms).encode(),
            b',"work_item":',
            item_doc,
            b"}\n",
        )
    )


def _work_item_of(doc: bytes) -> str | None:
    found = orjson.loads(doc).get("work_item_id")
    return found if isinstance(found, str) else None


def item_batch(
    agent_id: str,
    items: Sequence[tuple[str, bytes, int]],
    *,
    briefs: Sequence[bytes],
    reply_briefs: Sequence[bytes],
    summaries: Sequence[bytes],
) -> ItemBatch:
    """The batch of `items` ((id, stored doc, finished ms), in finish order) with the briefs,
    replies and summaries among the agent's stored ones that name them. The archiver writes
    it; the ledger makes it again from what it holds and drops the hot copies only if both
    hash alike."""
    if not items:
        raise SegmentError("a batch holds at least one WorkItem")
    if len(items) > ITEM_BATCH_MAX:
        raise SegmentError(f"a batch holds at most {ITEM_BATCH_MAX} WorkItems")
    ids = {item_id for item_id, _, _ in items}
    if len(ids) != len(items):
        raise SegmentError("a batch names a WorkItem twice")
    of_brief = [(d, _work_item_of(d)) for d in briefs]
    of_reply = [(d, _work_item_of(d)) for d in reply_briefs]
    of_summary = [(d, _work_item_of(d)) for d in summaries]
    files, refs, open_ids = [], [], set()
    for item_id, doc, finished_ms in items:
        if orjson.loads(doc).get("state") != "completed":
            open_ids.add(item_id)
        mine = [d for d, wid in (*of_brief, *of_reply) if wid == item_id]
        data = item_file(doc, finished_ms, mine, [d for d, wid in of_summary if wid == item_id])
        files.append((item_id, data))
        refs.append(
            ArchivedItemRef(
                id=item_id, finished_ms=finished_ms, sha256=hashlib.sha256(data).hexdigest()
            )
        )
    return ItemBatch(
        manifest=ItemBatchManifest(agent_id=agent_id, items=tuple(refs)),
        files=tuple(files),
        briefs=tuple(d for d, wid in of_brief if wid in ids),
        reply_briefs=tuple(d for d, wid in of_reply if wid in ids),
        summaries=tuple(d for d, wid in of_summary if wid in ids),
        open_ids=frozenset(open_ids),
    )


def items_due(
    oldest: Sequence[tuple[str, int]],
    *,
    hot: int,
    now_ms: int,
    hot_finished: int,
    hot_days: float,
) -> list[str]:
    """Which finished WorkItems leave Redis next, of the `oldest` ((id, finished ms), oldest
    first) of the `hot` finished ones: those past LONGRUN_HOT_DAYS, and, once more than
    LONGRUN_HOT_FINISHED are hot, the oldest down to four fifths of it (so that a batch is not
    one WorkItem each time one finishes); at most ITEM_BATCH_MAX at once."""
    cutoff = now_ms - int(hot_days * 86_400_000)
    aged = sum(1 for _, ms in oldest if ms < cutoff)
    over = 0
    if hot > hot_finished:
        over = hot - (hot_finished - hot_finished // KEEP_FIFTH)
    return [item_id for item_id, _ in oldest[: min(max(aged, over), ITEM_BATCH_MAX)]]


def item_archive_command_id(agent_id: str, sha256: str) -> str:
    """CommitItemArchive's id, from the batch it commits (a resend is a duplicate)."""
    return f"archive-items:{agent_id}:{sha256[:32]}"
