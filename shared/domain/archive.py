"""The archive's pure rules: when history is cut into a segment, a segment's bytes, name and
manifest, and the names of archived files (docs/operations.md, "The archive")."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
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
