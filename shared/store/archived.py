"""Finished WorkItems as readers see them: the ones still in Redis (the finished hash and its
index by finish time), then the archived ones (files under LONGRUN_ARCHIVE_DIR, listed by the
committed batches the agent's `item_batches` names), as one list, newest first. Read-only."""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, cast

import orjson

from shared.archive.files import ArchiveUnavailable
from shared.archive.items import ArchivedItem, ItemFiles
from shared.domain.archive import ItemBatchEntry
from shared.domain.readouts import work_item_view_json
from shared.domain.records import (
    WORK_ITEM_ID_PATTERN,
    BriefRecord,
    DeliverySummaryRecord,
    WorkItem,
)
from shared.store.client import AnyRedis
from shared.wire.names import Names

FINISHED_PAGE_MAX = 1000
"""`limit` of a finished page: 1..1000 (default 100), as every list route (contract §23)."""
FINISHED_PAGE_DEFAULT = 100
_ID = re.compile(WORK_ITEM_ID_PATTERN)


class CursorError(ValueError):
    """A cursor that is not one this agent's list handed out."""


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """Where a finished page ended: the last WorkItem shown (finish time in epoch ms, id);
    the next page starts after it, newest first."""

    finished_ms: int
    work_item_id: str


def encode_cursor(agent_id: str, at: Position) -> str:
    doc = {"agent": agent_id, "ms": at.finished_ms, "id": at.work_item_id}
    return base64.urlsafe_b64encode(orjson.dumps(doc)).decode().rstrip("=")


def decode_cursor(agent_id: str, cursor: str) -> Position:
    """The position a cursor names; CursorError if it is not a finished-list cursor or was
    handed out for another agent."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        doc = orjson.loads(raw)
    except (binascii.Error, ValueError):
        raise CursorError("cursor is not one this list handed out") from None
    if not isinstance(doc, dict) or set(doc) != {"agent", "ms", "id"}:
        raise CursorError("cursor is not one this list handed out")
    ms, item_id = doc["ms"], doc["id"]
    if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0 or ms >= 2**53:
        raise CursorError("cursor is not one this list handed out")
    if not isinstance(item_id, str) or not _ID.match(item_id):
        raise CursorError("cursor is not one this list handed out")
    if doc["agent"] != agent_id:
        raise CursorError("cursor was handed out for another agent")
    return Position(ms, item_id)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class FinishedItems:
    def __init__(self, redis: AnyRedis, names: Names, files: ItemFiles | None) -> None:
        """`files`: the archive's WorkItem files (None: no archive configured; archived
        WorkItems then cannot be read, and a read that needs one fails saying so)."""
        self.redis = redis
        self.n = names
        self.files = files

    async def archived(self, agent_id: str, work_item_id: str) -> ArchivedItem | None:
        """An archived WorkItem of the agent, read from its file (None: the archive has none).
        Only asked for an id Redis does not hold: a file of a WorkItem still in Redis is a
        copy a crash left before its commit."""
        if self.files is None:
            return None
        return await asyncio.to_thread(self.files.read_item, agent_id, work_item_id)

    async def page(
        self,
        agent_id: str,
        *,
        limit: int,
        after: Position | None,
        current: str | None,
        include_todo_list: bool = False,
    ) -> dict[str, Any]:
        """One page of the agent's finished WorkItems, newest first: those still in Redis, then
        the archived ones, each view with `archived`; `next_cursor` null at the end."""
        hot, hot_total = await self._hot(agent_id, limit, after)
        entries = await self._batches(agent_id)
        archived_total = sum(e.items for e in entries)
        views: list[tuple[Position, dict[str, Any]]] = [
            (
                at,
                {
                    **work_item_view_json(item, [], current, include_todo_list=include_todo_list),
                    "archived": False,
                },
            )
            for at, item in hot
        ]
        if len(views) < limit and entries:
            # After the cursor, not after the last one shown: a WorkItem archived between the
            # index read and the hash read is in neither part's place otherwise.
            shown = {at.work_item_id for at, _ in views}
            wanted = limit - len(views)
            for at, archived in await self._archived_page(agent_id, entries, wanted, after, shown):
                view = work_item_view_json(
                    archived.work_item, [], current, include_todo_list=include_todo_list
                )
                views.append((at, {**view, "archived": True}))
            views = sorted(views, key=lambda found: found[0], reverse=True)[:limit]
        next_cursor = encode_cursor(agent_id, views[-1][0]) if len(views) == limit else None
        return {
            "state": "finished",
            "returned": len(views),
            "total_matching": hot_total + archived_total,
            "work_items": [view for _, view in views],
            "next_cursor": next_cursor,
        }

    async def _hot(
        self, agent_id: str, limit: int, after: Position | None
    ) -> tuple[list[tuple[Position, WorkItem]], int]:
        """The page's WorkItems still in Redis, from the finished index by finish time."""
        index = self.n.finished_index(agent_id)
        top: str | int = "+inf" if after is None else after.finished_ms
        found: list[tuple[Position, str]] = []
        offset = 0
        while len(found) < limit:
            chunk = cast(
                "list[tuple[bytes | str, float]]",
                await self.redis.zrevrangebyscore(
                    index, top, "-inf", start=offset, num=limit + 1, withscores=True
                ),
            )
            for member, score in chunk:
                at = Position(int(score), _text(member))
                if after is None or at < after:
                    found.append((at, at.work_item_id))
            if len(chunk) < limit + 1:
                break
            offset += len(chunk)
        found = found[:limit]
        total = await self.redis.zcard(index)
        if not found:
            return [], total
        docs = await self.redis.hmget(self.n.items_finished(agent_id), [i for _, i in found])
        # A WorkItem archived since the index was read is missing here: the archive shows it.
        items = [
            (at, WorkItem.model_validate_json(doc))
            for (at, _), doc in zip(found, docs, strict=True)
            if doc
        ]
        return items, total

    async def batches(self, agent_id: str) -> list[ItemBatchEntry]:
        """The agent's committed batches, in commit order (a batch keeps its index)."""
        return await self._batches(agent_id)

    async def batch_records(
        self, agent_id: str, entry: ItemBatchEntry
    ) -> tuple[list[BriefRecord], list[DeliverySummaryRecord]]:
        """The briefs and delivery summaries of one committed batch's WorkItems, read from
        their files."""
        if self.files is None:
            raise ArchiveUnavailable(
                f"{agent_id!r} has archived WorkItems but LONGRUN_ARCHIVE_DIR is not readable here"
            )
        files = self.files
        manifest = await asyncio.to_thread(files.read_manifest, agent_id, entry.batch)
        read = await asyncio.gather(
            *(asyncio.to_thread(files.read_item, agent_id, ref.id) for ref in manifest.items)
        )
        briefs: list[BriefRecord] = []
        summaries: list[DeliverySummaryRecord] = []
        for ref, item in zip(manifest.items, read, strict=True):
            if item is None:
                raise ArchiveUnavailable(
                    f"archived WorkItem {ref.id!r} of {agent_id!r} is listed by a committed "
                    "batch but its file is missing"
                )
            briefs += item.briefs
            summaries += item.delivery_summaries
        return briefs, summaries

    async def _batches(self, agent_id: str) -> list[ItemBatchEntry]:
        docs = await self.redis.lrange(self.n.item_batches(agent_id), 0, -1)
        return [ItemBatchEntry.model_validate_json(d) for d in docs]

    async def _archived_page(
        self,
        agent_id: str,
        entries: list[ItemBatchEntry],
        limit: int,
        after: Position | None,
        shown: set[str],
    ) -> list[tuple[Position, ArchivedItem]]:
        """The newest `limit` archived WorkItems before `after`: the committed manifests read
        newest first, only as far as the page reaches, then each WorkItem's file."""
        if self.files is None:
            raise ArchiveUnavailable(
                f"{agent_id!r} has archived WorkItems but LONGRUN_ARCHIVE_DIR is not readable here"
            )
        files = self.files
        candidates: list[Position] = []
        for entry in sorted(entries, key=lambda e: e.last_ms, reverse=True):
            if after is not None and entry.first_ms > after.finished_ms:
                continue  # every WorkItem of it was shown before the cursor
            if len(candidates) >= limit and entry.last_ms < candidates[limit - 1].finished_ms:
                break  # the page is full with newer ones than any of this batch
            manifest = await asyncio.to_thread(files.read_manifest, agent_id, entry.batch)
            candidates.extend(
                at
                for at in (Position(r.finished_ms, r.id) for r in manifest.items)
                if (after is None or at < after) and at.work_item_id not in shown
            )
            candidates.sort(reverse=True)
        page = candidates[:limit]
        read = await asyncio.gather(
            *(asyncio.to_thread(files.read_item, agent_id, at.work_item_id) for at in page)
        )
        found = []
        for at, item in zip(page, read, strict=True):
            if item is None:
                raise ArchiveUnavailable(
                    f"archived WorkItem {at.work_item_id!r} of {agent_id!r} is listed by a "
                    "committed batch but its file is missing"
                )
            found.append((at, item))
        return found
