"""The per-agent hash-chained history (docs/contract.md §8): canonical form, chain, verify.

hash_0 = sha256(b"longrun-ledger-v1"); hash_i = sha256(bytes.fromhex(hash_{i-1}) +
canonical_json(event_i)), where canonical_json is the event without `hash` as UTF-8 JSON with
sorted keys and no spaces.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson
from pydantic import Field

from shared.domain.base import NonEmptyStr, Record, UtcDatetime

GENESIS_HASH = hashlib.sha256(b"longrun-ledger-v1").hexdigest()


class HistoryEvent(Record):
    seq: int = Field(ge=1)
    type: NonEmptyStr
    at: UtcDatetime
    agent_id: NonEmptyStr
    work_item_id: str | None
    data: dict[str, Any]
    prev_hash: str
    hash: str


def canonical_json(event: Mapping[str, Any]) -> bytes:
    """The event without `hash`, sorted keys, no spaces, UTF-8 (not ASCII-escaped)."""
    body = {k: v for k, v in event.items() if k != "hash"}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def chain_hash(prev_hash: str, event: Mapping[str, Any]) -> str:
    return hashlib.sha256(bytes.fromhex(prev_hash) + canonical_json(event)).hexdigest()


@lru_cache(maxsize=64)
def format_at(at: datetime) -> str:
    """History timestamps are RFC 3339 UTC strings with a `Z`, as they are hashed. Remembered:
    the ledger stamps every event of a wave with the same time."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def seal_encoded(
    *,
    seq: int,
    event_type: str,
    at: datetime,
    agent_id: str,
    work_item_id: str | None,
    data: dict[str, Any],
    prev_hash: str,
) -> tuple[str, bytes]:
    """The next history event, serialised once: its hash and its stored JSON, which is the
    canonical form with `hash` appended (key order does not matter to readers; verify sorts
    again). `data` may hold `orjson.Fragment`s only of canonical JSON (sorted keys, compact)."""
    doc = {
        "seq": seq,
        "type": event_type,
        "at": format_at(at),
        "agent_id": agent_id,
        "work_item_id": work_item_id,
        "data": data,
        "prev_hash": prev_hash,
    }
    canonical = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(bytes.fromhex(prev_hash) + canonical).hexdigest()
    return digest, b'%s,"hash":"%s"}' % (canonical[:-1], digest.encode())


class VerifyResult(Record):
    ok: bool
    count: int
    head: str
    first_bad_index: int | None
    first_bad_seq: int | None = None
    """The seq the first bad event should have had (its index + 1): across the archive and the
    hot history, the one number that names it."""
    archived: int = 0
    """How many of the events were read from archived segments."""


class ChainCheck:
    """Recomputes a chain fed in order, in as many pieces as it comes in (archived segments,
    then the hot history), without holding it: the first event whose seq, link or hash is wrong
    is named, the rest only counted."""

    def __init__(self) -> None:
        self.prev = GENESIS_HASH
        self.count = 0
        self.bad: int | None = None

    def feed(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            self.one(event)

    def one(self, event: Mapping[str, Any]) -> None:
        index, self.count = self.count, self.count + 1
        if self.bad is not None:
            return
        prev = self.prev
        linked = event.get("seq") == index + 1 and event.get("prev_hash") == prev
        if linked and _recomputes(prev, event):
            self.prev = str(event["hash"])
            return
        self.bad = index

    def skip(self, count: int, head: str) -> None:
        """Move past `count` events known to verify from here and to end at `head`."""
        if self.bad is None:
            self.count += count
            self.prev = head

    def result(self, *, archived: int = 0) -> VerifyResult:
        bad = self.bad
        return VerifyResult(
            ok=bad is None,
            count=self.count,
            head=self.prev,
            first_bad_index=bad,
            first_bad_seq=None if bad is None else bad + 1,
            archived=archived,
        )


def verify(events: Sequence[Mapping[str, Any]]) -> VerifyResult:
    """Recompute the chain; the first event whose seq, link or hash is wrong is named (0-based)."""
    check = ChainCheck()
    check.feed(events)
    return check.result()


def _recomputes(prev: str, event: Mapping[str, Any]) -> bool:
    try:
        return chain_hash(prev, event) == event.get("hash")
    except (TypeError, orjson.JSONEncodeError, ValueError):
        return False
