"""The ledger read model: one read-only module over the ledger's keys (CQRS). Never writes.

ListWorkItems reads the per-agent class indexes (shared.domain.index), so a filtered, limited
list costs a few short ZRANGEs and one HMGET, not a scan of every WorkItem.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from shared.archive.items import ItemFiles
from shared.archive.segments import SegmentFiles
from shared.domain.call_outcomes import CallOutcomes
from shared.domain.delegation import DelegationRecord
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.history import VerifyResult
from shared.domain.index import FILTER_INDEXES, INDEX_NAMES, READINESS_INDEXES
from shared.domain.memory import within
from shared.domain.readouts import get_result, work_item_view_json
from shared.domain.records import (
    AgentState,
    BriefRecord,
    DeliverySummaryRecord,
    InboxMessage,
    NoteCovers,
    ReadinessCounts,
    WaitingIntent,
    WorkItem,
)
from shared.domain.signing import PublicKeyInfo
from shared.domain.specs import StoredSpec
from shared.domain.stored import AgentRecord, Evidence
from shared.domain.telemetry import RunFold, RunTelemetry
from shared.domain.tools import GetWorkItemInput, ListWorkItemsInput
from shared.domain.usage import (
    PartialDay,
    UsageDay,
    UsageSummary,
    in_range,
    sum_summaries,
    turn_summary,
    usage_days,
    usage_plan,
)
from shared.domain.views import (
    CandidateClass,
    ListFilter,
    Ranked,
    Readiness,
    classify,
    rank_key,
)
from shared.store.archived import FinishedItems, Position
from shared.store.client import AnyRedis
from shared.store.history import HistoryReads
from shared.store.signing_keys import public_keys
from shared.wire.names import Names

HISTORY_PAGE_MAX = 1000
TRANSCRIPT_CHUNK = 200


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class ReadModel:
    def __init__(self, redis: AnyRedis, names: Names, archive: Path | None = None) -> None:
        """`archive`: LONGRUN_ARCHIVE_DIR, where reads find what left Redis (None: nothing
        archived can be read, and a read that needs it fails saying so)."""
        self.redis = redis
        self.n = names
        self.archive = archive
        self.chain = HistoryReads(redis, names, SegmentFiles(archive) if archive else None)
        self.finished = FinishedItems(redis, names, ItemFiles(archive) if archive else None)

    # ---- agents
    async def agent_record(self, agent_id: str) -> AgentRecord | None:
        doc = await self.redis.hget(self.n.agent(agent_id), "doc")
        return AgentRecord.model_validate_json(doc) if doc else None

    async def agent_spec(self, agent_id: str) -> StoredSpec:
        """The agent's spec and its version (the default spec, version 0, if none is stored)."""
        doc = await self.redis.get(self.n.agent_spec(agent_id))
        return StoredSpec.model_validate_json(doc) if doc else StoredSpec()

    async def sandbox_reports(self) -> dict[str, dict[str, Any]]:
        """Each turn executor's report on its command sandbox (`Names.sandbox_status`)."""
        raw = await self.redis.hgetall(self.n.sandbox_status)
        return {_text(name): orjson.loads(doc) for name, doc in raw.items()}

    async def agent_specs(self, agent_ids: Sequence[str]) -> list[StoredSpec]:
        # One GET per agent in a pipeline, not MGET: the keys live in different cluster slots.
        pipe = self.redis.pipeline(transaction=False)
        for agent_id in agent_ids:
            pipe.get(self.n.agent_spec(agent_id))
        docs = await pipe.execute() if agent_ids else []
        return [StoredSpec.model_validate_json(d) if d else StoredSpec() for d in docs]

    async def index_counts(self, agent_id: str) -> dict[str, int]:
        pipe = self.redis.pipeline(transaction=False)
        for name in INDEX_NAMES:
            pipe.zcard(self.n.class_index(agent_id, name))
        return dict(zip(INDEX_NAMES, await pipe.execute(), strict=True))

    async def agent_state(self, agent_id: str) -> AgentState | None:
        """AgentState with `counts` derived from the indexes (never stored)."""
        record = await self.agent_record(agent_id)
        if record is None:
            return None
        counts = await self.index_counts(agent_id)
        by_readiness = {
            r.value: sum(counts[name] for name in READINESS_INDEXES[r]) for r in Readiness
        }
        inbox = await self.redis.llen(self.n.inbox(agent_id))
        return record.state.model_copy(
            update={"counts": ReadinessCounts(**by_readiness), "inbox_pending": inbox}
        )

    async def agent_ids(self) -> list[str]:
        pipe = self.redis.pipeline(transaction=False)
        for p in range(self.n.partitions):
            pipe.zrange(self.n.agents_index(p), 0, -1)
        found = await pipe.execute()
        return sorted(_text(m) for members in found for m in members)

    # ---- work items
    async def active_waits(self, agent_id: str) -> list[WaitingIntent]:
        docs = await self.redis.hvals(self.n.waits(agent_id))
        return [WaitingIntent.model_validate_json(d) for d in docs]

    async def current_id(self, agent_id: str) -> str | None:
        raw = await self.redis.hget(self.n.agent(agent_id), "current")
        return _text(raw) if raw else None

    async def items(self, agent_id: str, ids: Sequence[str]) -> list[WorkItem]:
        """The named WorkItems that exist, open or finished, in the order named."""
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.n.items(agent_id), list(ids))
        pipe.hmget(self.n.items_finished(agent_id), list(ids))
        open_docs, finished_docs = await pipe.execute()
        return [
            WorkItem.model_validate_json(doc)
            for doc in (o or f for o, f in zip(open_docs, finished_docs, strict=True))
            if doc
        ]

    async def all_items(self, agent_id: str) -> list[WorkItem]:
        """Every WorkItem, open then finished: reads both hashes whole, so never on a hot path
        (a turn reads `TurnItems`, a decision its snapshot)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hvals(self.n.items(agent_id))
        pipe.hvals(self.n.items_finished(agent_id))
        open_docs, finished_docs = await pipe.execute()
        found: dict[str, WorkItem] = {}
        for doc in [*finished_docs, *open_docs]:
            item = WorkItem.model_validate_json(doc)
            found[item.id] = item
        return list(found.values())

    async def _missing(self, agent_id: str, work_item_id: str) -> DomainError:
        owner = await self.redis.hget(self.n.work_item_owners, work_item_id)
        if owner and _text(owner) != agent_id:
            return DomainError(
                ErrorKind.WORK_ITEM_ACCESS_DENIED,
                f"WorkItem {work_item_id!r} belongs to another agent",
            )
        return DomainError(ErrorKind.WORK_ITEM_NOT_FOUND, f"no WorkItem {work_item_id!r}")

    async def get_work_item(self, agent_id: str, args: GetWorkItemInput) -> dict[str, Any]:
        # One round trip for the item, the active waits and the current id (each read was a
        # sequential hop of a tool call's latency).
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self.n.items(agent_id), args.work_item_id)
        pipe.hget(self.n.items_finished(agent_id), args.work_item_id)
        pipe.hvals(self.n.waits(agent_id))
        pipe.hget(self.n.agent(agent_id), "current")
        open_doc, finished_doc, wait_docs, current = await pipe.execute()
        doc = open_doc or finished_doc
        if not doc:
            return await self._archived_item(agent_id, args, _text(current) if current else None)
        item = WorkItem.model_validate_json(doc)
        waits = [WaitingIntent.model_validate_json(d) for d in wait_docs]
        current_id = _text(current) if current else None
        return get_result(
            item,
            waits,
            current_id,
            include_todo_list=args.include_todo_list,
            include_process_notes=args.include_process_notes,
        )

    async def open_item_ids(self, agent_id: str) -> list[str]:
        """Every open WorkItem's id, from the class indexes (bounded by the agent's open work)."""
        pipe = self.redis.pipeline(transaction=False)
        for name in FILTER_INDEXES[ListFilter.OPEN]:
            pipe.zrange(self.n.class_index(agent_id, name), 0, -1)
        return [_text(member) for members in await pipe.execute() for member in members]

    async def _archived_item(
        self, agent_id: str, args: GetWorkItemInput, current_id: str | None
    ) -> dict[str, Any]:
        """GetWorkItem of an id Redis does not hold: from the archive, with `archived: true`
        (it is finished: no waits, never current), else not found or another agent's."""
        archived = await self.finished.archived(agent_id, args.work_item_id)
        if archived is None:
            raise await self._missing(agent_id, args.work_item_id)
        result = get_result(
            archived.work_item,
            [],
            current_id,
            include_todo_list=args.include_todo_list,
            include_process_notes=args.include_process_notes,
        )
        result["work_item"]["archived"] = True
        return {**result, "archived": True}

    async def finished_page(
        self,
        agent_id: str,
        *,
        limit: int,
        after: Position | None,
        include_todo_list: bool = False,
    ) -> dict[str, Any]:
        """`GET .../work-items?state=finished`: finished WorkItems newest first, those still in
        Redis then the archived ones (shared.store.archived)."""
        current = await self.current_id(agent_id)
        return await self.finished.page(
            agent_id,
            limit=limit,
            after=after,
            current=current,
            include_todo_list=include_todo_list,
        )

    async def _page_ids(
        self, agent_id: str, wanted: ListFilter, limit: int, current: str | None
    ) -> tuple[list[str], int]:
        if wanted is ListFilter.CURRENT:
            return ([current], 1) if current else ([], 0)
        names = FILTER_INDEXES[wanted]
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.zrange(self.n.class_index(agent_id, name), 0, limit, withscores=True)
            pipe.zcard(self.n.class_index(agent_id, name))
        answers = await pipe.execute()
        exclude = current if wanted is ListFilter.BLOCKED else None
        ids: list[str] = []
        total = 0
        for pos in range(len(names)):
            members, card = answers[2 * pos], answers[2 * pos + 1]
            total += card
            ids.extend(_text(m) for m, _ in members)
        if exclude is not None:
            blocked_index = self.n.class_index(agent_id, CandidateClass.BLOCKED.value)
            if await self.redis.zscore(blocked_index, exclude) is not None:
                total -= 1
            if exclude in ids:
                ids.remove(exclude)
        return ids, total

    async def ranked_work_items(
        self, agent_id: str, wanted: ListFilter
    ) -> tuple[list[Ranked], list[WaitingIntent], str | None]:
        """Every WorkItem a filter matches, in ranking order, with the active waits and the
        current id (to render views): what the HTTP list pages over. The class indexes hold
        open items and the finished ones still in Redis, so this is bounded by open work plus
        the hot finished set."""
        current = await self.current_id(agent_id)
        ids, _ = await self._page_ids(agent_id, wanted, -1, current)
        items = await self.items(agent_id, ids)
        waits = await self.active_waits(agent_id)
        return sorted(classify(items, waits, current), key=rank_key), waits, current

    async def list_work_items(self, agent_id: str, args: ListWorkItemsInput) -> dict[str, Any]:
        current = await self.current_id(agent_id)
        ids, total = await self._page_ids(agent_id, args.filter, args.limit, current)
        items = await self.items(agent_id, ids)
        waits = await self.active_waits(agent_id)
        # Within the page, order exactly by the ranking rule (scores carry only the primary key).
        page = sorted(classify(items, waits, current), key=rank_key)[: args.limit]
        views = [
            work_item_view_json(e.item, waits, current, include_todo_list=args.include_todo_list)
            for e in page
        ]
        return {
            "filter": args.filter.value,
            "returned": len(views),
            "total_matching": total,
            "work_items": views,
        }

    # ---- delegations
    async def delegations(self, agent_id: str) -> list[DelegationRecord]:
        """This agent's side of every delegation it made or received, oldest first."""
        docs = await self.redis.hvals(self.n.delegations(agent_id))
        found = [DelegationRecord.model_validate_json(d) for d in docs]
        return sorted(found, key=lambda d: (d.created_at, d.id))

    # ---- inbox, evidence, briefs
    async def inbox(self, agent_id: str, *, start: int = 0) -> list[InboxMessage]:
        """The agent's inbox from its `start`-th message (0: the head), oldest first."""
        docs = await self.redis.lrange(self.n.inbox(agent_id), start, -1)
        return [InboxMessage.model_validate_json(d) for d in docs]

    async def inbox_and_control(
        self, agent_id: str, *, start: int = 0
    ) -> tuple[list[InboxMessage], str]:
        """`inbox` and the operator's control signal for the running turn (the agent hash's
        `control` field, shared.domain.control), in one round trip: what a turn reads between
        its rounds."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(self.n.inbox(agent_id), start, -1)
        pipe.hget(self.n.agent(agent_id), "control")
        docs, signal = await pipe.execute()
        messages = [InboxMessage.model_validate_json(d) for d in docs]
        return messages, signal.decode() if isinstance(signal, bytes) else (signal or "")

    async def evidence(self, agent_id: str) -> list[Evidence]:
        docs = await self.redis.lrange(self.n.evidence(agent_id), 0, -1)
        return [Evidence.model_validate_json(d) for d in docs]

    async def usage_days(self, agent_id: str) -> list[UsageDay]:
        """The agent's usage summed per UTC day, oldest day first (one row per day it made
        model calls)."""
        raw = await self.redis.hgetall(self.n.usage_days(agent_id))
        return usage_days({_text(k): int(v) for k, v in raw.items()})

    async def usage_between(
        self, agent_id: str, since: datetime, until: datetime | None = None
    ) -> UsageSummary:
        """Model usage of the turns that finished in [since, until) (`until` None: no end),
        exact over any range: the rows of the whole days inside it, and for a day a bound cuts
        (one that is not a UTC midnight), that day's turn_finished events from the history,
        archive included (only the seqs of that day are read)."""
        whole, partial = usage_plan(await self.usage_days(agent_id), since, until)
        parts = [row.summary() for row in whole]
        for cut in partial:
            parts += await self._usage_events(agent_id, cut)
        return sum_summaries(parts)

    async def usage_by_day(
        self, agent_id: str, since: datetime, until: datetime | None, after: str | None, limit: int
    ) -> tuple[list[UsageDay], bool]:
        """Per-day rows within [since, until), ascending by day, after the day `after`: at most
        `limit`, and whether more follow. A row whole inside the range is as kept; a day a bound
        cuts is summed from its turn_finished events."""
        whole, partial = usage_plan(await self.usage_days(agent_id), since, until)
        days = sorted([*(r.day for r in whole), *(p.day for p in partial)])
        wanted = [d for d in days if after is None or d > after]
        page = set(wanted[:limit])
        rows = {row.day: row for row in whole if row.day in page}
        for cut in partial:
            if cut.day in page:
                summed = sum_summaries(await self._usage_events(agent_id, cut))
                rows[cut.day] = UsageDay(day=cut.day, last_seq=cut.upto_seq, **summed.model_dump())
        return [rows[day] for day in sorted(rows)], len(wanted) > limit

    async def _usage_events(self, agent_id: str, cut: PartialDay) -> list[UsageSummary]:
        found: list[UsageSummary] = []
        after = cut.after_seq
        while after < cut.upto_seq:
            limit = min(cut.upto_seq - after, HISTORY_PAGE_MAX)
            events = await self.chain.page(agent_id, after, limit)
            if not events:
                break
            for event in events:
                turn = turn_summary(event)
                if turn is not None and in_range(turn[0], cut.since, cut.until):
                    found.append(turn[1])
            after = int(events[-1]["seq"])
        return found

    async def briefs(
        self, agent_id: str, work_item_id: str | None = None
    ) -> tuple[list[BriefRecord], list[DeliverySummaryRecord]]:
        """The agent's briefs (replies kept apart in storage, merged here) oldest first, and its
        delivery summaries."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(self.n.briefs(agent_id), 0, -1)
        pipe.lrange(self.n.reply_briefs(agent_id), 0, -1)
        pipe.lrange(self.n.summaries(agent_id), 0, -1)
        brief_docs, reply_docs, summary_docs = await pipe.execute()
        # Each list is in write order; merged by time, each keeps its own order.
        briefs = list(
            heapq.merge(
                [BriefRecord.model_validate_json(d) for d in brief_docs],
                [BriefRecord.model_validate_json(d) for d in reply_docs],
                key=lambda b: b.created_at,
            )
        )
        summaries = [DeliverySummaryRecord.model_validate_json(d) for d in summary_docs]
        if work_item_id is not None:
            briefs = [b for b in briefs if b.work_item_id == work_item_id]
            summaries = [s for s in summaries if s.work_item_id == work_item_id]
            if not briefs and not summaries:
                # An archived WorkItem's briefs and summaries left Redis with it.
                archived = await self.finished.archived(agent_id, work_item_id)
                if archived is not None and not await self._hot_item(agent_id, work_item_id):
                    return list(archived.briefs), list(archived.delivery_summaries)
        return briefs, summaries

    async def _hot_item(self, agent_id: str, work_item_id: str) -> bool:
        return bool(await self.items(agent_id, [work_item_id]))

    async def transcript(
        self, agent_id: str, *, work_item_id: str | None = None, turn_id: str | None = None
    ) -> list[dict[str, Any]]:
        docs = [
            orjson.loads(d) for d in await self.redis.lrange(self.n.transcript(agent_id), 0, -1)
        ]
        if work_item_id is not None:
            docs = [d for d in docs if d["work_item_id"] == work_item_id]
        if turn_id is not None:
            docs = [d for d in docs if d["turn_id"] == turn_id]
        return docs

    async def transcript_page(
        self, agent_id: str, *, after: int, limit: int, work_item_id: str | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Recorded entries past `after` (1-based `seq`: an entry's position counted from the
        first ever recorded, so trimming the oldest keeps every seq), at most `limit`,
        optionally only one WorkItem's; and the `after` to pass next. Read in chunks, so a
        filter that matches rarely still fills a page."""
        key = self.n.transcript(agent_id)
        trimmed = int(await self.redis.hget(self.n.transcript_meta(agent_id), "trimmed") or 0)
        position = max(after - trimmed, 0)
        found: list[dict[str, Any]] = []
        while len(found) < limit:
            chunk = await self.redis.lrange(key, position, position + TRANSCRIPT_CHUNK - 1)
            for doc in chunk:
                position += 1
                entry = orjson.loads(doc)
                if work_item_id is None or entry["work_item_id"] == work_item_id:
                    found.append({"seq": trimmed + position, **entry})
                    if len(found) == limit:
                        break
            if len(chunk) < TRANSCRIPT_CHUNK:
                break
        return found, max(trimmed + position, after)

    async def work_item_rounds(
        self, agent_id: str, work_item_id: str, *, covered: NoteCovers | None, max_chars: int
    ) -> tuple[list[dict[str, Any]], bool]:
        """The agent's own entries (assistant and tool) bound to one WorkItem that no process
        note covers yet, oldest first, read backwards from the newest in chunks; and whether
        the read went back to the first uncovered one (False: it stopped at `max_chars`, older
        ones exist). `covered` is what the newest note covers."""
        key = self.n.transcript(agent_id)
        found: list[dict[str, Any]] = []
        chars, end = 0, -1
        # An entry bound to the item holds its id verbatim: the other items' entries (most of a
        # long transcript) are passed over without being decoded.
        mark = work_item_id.encode()
        while True:
            chunk = await self.redis.lrange(key, end - TRANSCRIPT_CHUNK + 1, end)
            for doc in reversed(chunk):
                if mark not in doc:
                    continue
                entry = orjson.loads(doc)
                if entry["work_item_id"] != work_item_id or entry["role"] == "user":
                    continue
                if within(covered, entry["turn_id"], int(entry.get("round", 0))):
                    return found[::-1], True
                chars += len(entry["content"])
                if chars > max_chars:
                    return found[::-1], False
                found.append(entry)
            if len(chunk) < TRANSCRIPT_CHUNK:
                return found[::-1], True
            end -= TRANSCRIPT_CHUNK

    async def transcript_head(self, agent_id: str, count: int) -> list[dict[str, Any]]:
        """The oldest `count` recorded entries."""
        docs = await self.redis.lrange(self.n.transcript(agent_id), 0, max(count, 1) - 1)
        return [orjson.loads(d) for d in docs]

    async def transcript_rounds(self, agent_id: str) -> int:
        """How many rounds the agent's recorded transcript holds."""
        return int(await self.redis.hget(self.n.transcript_meta(agent_id), "rounds") or 0)

    # ---- history
    async def signing_keys(self) -> list[PublicKeyInfo]:
        return await public_keys(self.redis, self.n)

    async def history(
        self, agent_id: str, after: int = 0, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Events with seq > after, ascending, read into the archive where they left Redis
        (at most one more than a page: a route asks that to know whether more follow)."""
        limit = max(1, min(limit, HISTORY_PAGE_MAX + 1))
        return await self.chain.page(agent_id, after, limit)

    async def call_outcomes(self, agent_id: str, events: list[dict[str, Any]]) -> dict[str, str]:
        """The outcome of each external call started in `events` (a page of the history): read
        on past the page only until every one of them is settled."""
        calls = CallOutcomes()
        calls.see(events)
        position = int(events[-1]["seq"]) if events else 0
        while not calls.settled:
            later = await self.history(agent_id, after=position, limit=HISTORY_PAGE_MAX)
            if not later:
                return calls.settle(await self._running_turn(agent_id))
            calls.see(later, track=False)
            position = int(later[-1]["seq"])
        return calls.outcomes

    async def _running_turn(self, agent_id: str) -> str | None:
        """The agent's current turn while its lease is held for it (a dead executor's turn
        loses its lease when the lease expires)."""
        record, lease = await asyncio.gather(
            self.agent_record(agent_id), self.redis.get(self.n.lease(agent_id))
        )
        turn = record.current_turn_id if record is not None else None
        owner = lease.decode() if isinstance(lease, bytes) else lease
        if turn is None or owner is None or f":{turn}:" not in owner:
            return None
        return turn

    async def runs(self, agent_id: str) -> list[RunTelemetry]:
        """Every WorkItem's run telemetry, newest first, folded from the whole history (archived
        segments, then hot), read a page at a time."""
        fold, after = RunFold(), 0
        while True:
            events = await self.chain.page(agent_id, after, HISTORY_PAGE_MAX)
            if not events:
                break
            fold.see(events)
            after = int(events[-1]["seq"])
        return fold.runs(await self._running_turn(agent_id))

    async def verify_history(self, agent_id: str) -> VerifyResult:
        """The chain recomputed over the archived segments, then the hot events."""
        return await self.chain.verify(agent_id)
