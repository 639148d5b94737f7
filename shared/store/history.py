"""An agent's whole history as readers see it: archived segments, then the hot events in Redis,
one seq range and one chain across the boundary. Read-only, like the read model."""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import orjson

from shared.archive.files import ArchiveUnavailable
from shared.archive.segments import SegmentFiles
from shared.domain.archive import SegmentManifest, segment_lines
from shared.domain.history import ChainCheck, VerifyResult
from shared.store.client import AnyRedis, stored
from shared.wire.names import Names

HOT_CHUNK = 1000
"""Hot events read per LRANGE when the whole history is walked."""
CACHED_SEGMENTS = 4
"""Segments kept parsed in memory: a reader paging through one reads it once."""
VERIFIED_KEPT = 100_000
"""Segments remembered as verified (about 200 bytes each)."""
RACES = 5
"""Reads retried when a segment is committed under them (the hot list shifts)."""


class HistoryMoved(Exception):
    """The hot history moved into the archive while it was read: read again."""


class HistoryReads:
    def __init__(self, redis: AnyRedis, names: Names, files: SegmentFiles | None) -> None:
        self.redis = redis
        self.names = names
        self.files = files
        self._cache: OrderedDict[tuple[str, str], list[bytes]] = OrderedDict()
        self._verified: OrderedDict[
            tuple[str, str], tuple[tuple[str, str, int], tuple[int, str]]
        ] = OrderedDict()
        """(agent, segment) -> ((file SHA-256, chain hash and count before it), (its events,
        chain hash after it)) for files that verified."""

    async def segments(self, agent_id: str) -> list[SegmentManifest]:
        """The agent's committed segments, oldest first."""
        docs = await self.redis.lrange(self.names.segments(agent_id), 0, -1)
        return [SegmentManifest.model_validate_json(d) for d in docs]

    async def page(self, agent_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Events with seq > after, ascending, at most `limit`: from the archive while `after`
        is in it, then hot."""
        for _ in range(RACES):
            try:
                return await self._page(agent_id, after, limit)
            except HistoryMoved:
                continue
        raise HistoryMoved(f"the history of {agent_id!r} kept moving while it was read")

    async def _page(self, agent_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        manifests = await self.segments(agent_id)
        archived = manifests[-1].last_seq if manifests else 0
        events: list[dict[str, Any]] = []
        for manifest in manifests:
            if len(events) >= limit or manifest.last_seq <= after:
                continue
            docs = await self._segment(agent_id, manifest)
            start = max(after - manifest.first_seq + 1, 0)
            events += _parsed(docs[start : start + limit - len(events)])
        if len(events) < limit:
            start = max(after, archived)
            events += await self._hot(agent_id, start - archived, limit - len(events), start)
        return events

    async def _hot(self, agent_id: str, index: int, count: int, after: int) -> list[dict[str, Any]]:
        """`count` hot events from list index `index`, which must hold seq `after + 1`."""
        docs = await self.redis.lrange(self.names.history(agent_id), index, index + count - 1)
        events = _parsed(stored(docs))
        if events and events[0].get("seq") != after + 1:
            raise HistoryMoved(agent_id)
        return events

    async def _segment(
        self, agent_id: str, manifest: SegmentManifest, *, cached: bool = True
    ) -> list[bytes]:
        """A committed segment's events; `cached`: from memory if read lately (pages; a walk
        that verifies reads the file as it is now)."""
        key = (agent_id, manifest.segment)
        found = self._cache.get(key) if cached else None
        if found is not None:
            self._cache.move_to_end(key)
            return found
        if self.files is None:
            raise ArchiveUnavailable(
                f"the history of {agent_id!r} up to {manifest.last_seq} is archived, and this "
                "process has no archive directory (set LONGRUN_ARCHIVE_DIR)"
            )
        docs = await asyncio.to_thread(self.files.read, agent_id, manifest)
        self._cache[key] = docs
        while len(self._cache) > CACHED_SEGMENTS:
            self._cache.popitem(last=False)
        return docs

    async def walk(self, agent_id: str) -> AsyncIterator[tuple[bool, list[bytes]]]:
        """The whole history in pieces, in seq order: (archived?, stored events). A segment
        committed during the walk leaves a hole or a repeat, which the chain check names; the
        caller reads again if the segments changed (`verify` does)."""
        for manifest in await self.segments(agent_id):
            yield True, await self._segment(agent_id, manifest, cached=False)
        key, start = self.names.history(agent_id), 0
        while True:
            docs = await self.redis.lrange(key, start, start + HOT_CHUNK - 1)
            if docs:
                yield False, stored(docs)
            if len(docs) < HOT_CHUNK:
                return
            start += HOT_CHUNK

    async def verify(self, agent_id: str) -> VerifyResult:
        """Recompute the chain over the archive, then the hot events."""
        for _ in range(RACES):
            manifests = await self.segments(agent_id)
            check = ChainCheck()
            for manifest in manifests:
                await self._verify_segment(agent_id, manifest, check)
            archived = check.count
            key, start = self.names.history(agent_id), 0
            while True:
                docs = await self.redis.lrange(key, start, start + HOT_CHUNK - 1)
                check.feed(_parsed(stored(docs)))
                if len(docs) < HOT_CHUNK:
                    break
                start += HOT_CHUNK
            if await self.redis.llen(self.names.segments(agent_id)) == len(manifests):
                return check.result(archived=archived)
        raise HistoryMoved(f"the history of {agent_id!r} kept moving while it was verified")

    async def _verify_segment(
        self, agent_id: str, manifest: SegmentManifest, check: ChainCheck
    ) -> None:
        """Feed one segment file to the check. A file whose bytes (SHA-256) this process has
        already seen verify from the same point of the chain verifies the same again: the
        check moves past it without hashing each event (reading and hashing the file is I/O
        speed; each event's canonical form and hash is the costly part)."""
        if self.files is None:
            raise ArchiveUnavailable(
                f"the history of {agent_id!r} up to {manifest.last_seq} is archived, and this "
                "process has no archive directory (set LONGRUN_ARCHIVE_DIR)"
            )
        raw = await asyncio.to_thread(self.files.read_raw, agent_id, manifest)
        start = (hashlib.sha256(raw).hexdigest(), check.prev, check.count)
        key = (agent_id, manifest.segment)
        seen = self._verified.get(key)
        if check.bad is None and seen is not None and seen[0] == start:
            check.skip(*seen[1])
            return
        check.feed(_parsed(segment_lines(raw)))
        if check.bad is None:
            self._verified[key] = (start, (check.count - start[2], check.prev))
            while len(self._verified) > VERIFIED_KEPT:
                self._verified.popitem(last=False)

    async def all(self, agent_id: str) -> list[dict[str, Any]]:
        """Every event, archived and hot, in seq order."""
        events: list[dict[str, Any]] = []
        async for _, docs in self.walk(agent_id):
            events += _parsed(docs)
        return events


def _parsed(docs: list[bytes]) -> list[dict[str, Any]]:
    """Events as stored; a line that is not a JSON object becomes an empty event, which the
    chain check names as bad (an edited file must fail verify, not the reader)."""
    events: list[dict[str, Any]] = []
    for doc in docs:
        try:
            event = orjson.loads(doc)
        except orjson.JSONDecodeError:
            event = {}
        events.append(event if isinstance(event, dict) else {})
    return events
