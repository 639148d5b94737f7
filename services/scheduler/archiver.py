"""The archiver: moves what an agent's life leaves behind out of Redis into files, in two
phases. First the file (temp, fsync, rename), then a command through the ledger that drops the
hot copies the file holds; a crash between the two leaves both copies, never neither.

It runs every LONGRUN_ARCHIVE_INTERVAL_S over the agents whose events this process handled
since its last pass, and over every agent at start and every SWEEP_EVERY passes (an agent with
nothing happening still ages).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson
import structlog

from shared.archive.files import remove_stale_temps
from shared.archive.items import ItemFiles
from shared.archive.segments import SegmentFiles
from shared.domain.archive import (
    BATCHES_DIR,
    HISTORY_DIR,
    ITEM_BATCH_MAX,
    ITEMS_DIR,
    ORPHAN_AGE_S,
    ItemBatch,
    ItemBatchEntry,
    SegmentError,
    SegmentManifest,
    archive_command_id,
    item_archive_command_id,
    item_batch,
    item_path,
    items_due,
    segment_cut,
    segment_first_seq,
)
from shared.ledger_client import LedgerClient, LedgerTimeout
from shared.metrics import Metrics
from shared.store.client import AnyRedis, stored
from shared.wire.commands import CommitArchive, CommitItemArchive
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome

log = structlog.get_logger("longrun.archiver")

SWEEP_EVERY = 60
"""Passes between two sweeps over every agent (5 minutes at the default interval)."""
AGENTS_AT_ONCE = 8
"""Agents archived concurrently by one pass (file writes run in threads)."""
TEMP_AGE_S = 3600.0
"""Temp files older than this are a crash's leftovers, removed by a sweep."""


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    """What stays hot (LONGRUN_HOT_EVENTS, LONGRUN_HOT_FINISHED, LONGRUN_HOT_DAYS)."""

    hot_events: int = 5000
    hot_finished: int = 200
    hot_days: float = 7.0


class Archiver:
    def __init__(
        self,
        redis: AnyRedis,
        names: Names,
        ledger: LedgerClient,
        root: Path,
        metrics: Metrics,
        *,
        limits: ArchiveLimits,
        clock: Callable[[], datetime],
    ) -> None:
        self.redis = redis
        self.names = names
        self.ledger = ledger
        self.files = SegmentFiles(root)
        self.item_files = ItemFiles(root)
        self.root = root
        self.metrics = metrics
        self.limits = limits
        self.clock = clock
        self._dirty: set[str] = set()
        self._passes = 0

    def note(self, agent_ids: Iterable[str]) -> None:
        """Agents whose history grew (from the events the scheduler handles; no I/O)."""
        self._dirty.update(agent_ids)

    async def step(self) -> None:
        """One pass: the agents noted since the last one, or every agent when a sweep is due."""
        sweep = self._passes % SWEEP_EVERY == 0
        self._passes += 1
        agents, self._dirty = self._dirty, set()
        if sweep:
            agents |= set(await self._all_agents())
            before = self.clock().timestamp() - TEMP_AGE_S
            await asyncio.to_thread(_clean_temps, self.root, before)
        todo = sorted(agents)
        for start in range(0, len(todo), AGENTS_AT_ONCE):
            batch = todo[start : start + AGENTS_AT_ONCE]
            await asyncio.gather(*(self.archive(agent, sweep=sweep) for agent in batch))

    async def _all_agents(self) -> list[str]:
        pipe = self.redis.pipeline(transaction=False)
        for p in range(self.names.partitions):
            pipe.zrange(self.names.agents_index(p), 0, -1)
        found = await pipe.execute()
        return [m.decode() if isinstance(m, bytes) else m for members in found for m in members]

    async def archive(self, agent_id: str, *, sweep: bool = False) -> None:
        """Everything due for one agent; a failure is counted and logged, and the next pass
        tries again (the hot copies stay meanwhile). A sweep also removes what crashes left.

        Two replicas may archive one agent at once (each handles a share of its events): they
        cut the same segments (a segment's size is fixed by the limit), write the same bytes
        and send one command id, so the second finds its work done. No lock: a lock held by a
        killed process would stall the agent's archive until it expired."""
        try:
            await self.history(agent_id)
            await self.items(agent_id)
            if sweep:
                await self._drop_orphans(agent_id)
                await self._drop_item_orphans(agent_id)
        except (OSError, LedgerTimeout) as exc:
            step = "write" if isinstance(exc, OSError) else "commit"
            self.metrics.archive_failures.labels(step).inc()
            log.warning("archive_failed", agent_id=agent_id, step=step, error=str(exc))

    async def history(self, agent_id: str) -> None:
        """Cut segments while the hot history is past its limit: each written, then committed."""
        while True:
            hot = await self.redis.llen(self.names.history(agent_id))
            cut = segment_cut(hot, self.limits.hot_events)
            if cut == 0:
                return
            docs = await self.redis.lrange(self.names.history(agent_id), 0, cut - 1)
            manifest = await asyncio.to_thread(self.files.write, agent_id, stored(docs))
            if not await self._commit(agent_id, manifest):
                return
            self.metrics.archived.labels("segments").inc()
            self.metrics.archived.labels("events").inc(manifest.events)
            await self._drop_orphans(agent_id)

    async def _commit(self, agent_id: str, manifest: SegmentManifest) -> bool:
        command = CommitArchive(
            command_id=archive_command_id(agent_id, manifest.last_seq, manifest.sha256),
            agent_id=agent_id,
            upto_seq=manifest.last_seq,
            segment_sha256=manifest.sha256,
        )
        reply = await self.ledger.send(command)
        if reply.outcome is CommandOutcome.REJECTED:
            # Another archiver committed first, or the hot history moved under this read: the
            # file is an orphan now (removed once the committed history passes it).
            log.info("archive_refused", agent_id=agent_id, error=reply.error)
            return False
        return True

    async def items(self, agent_id: str) -> None:
        """Archive batches of finished WorkItems while some are due: each batch's files
        written, then committed."""
        while True:
            batch = await self._due_batch(agent_id)
            if batch is None:
                return
            await asyncio.to_thread(self.item_files.write, agent_id, batch)
            command = CommitItemArchive(
                command_id=item_archive_command_id(agent_id, batch.manifest.sha256),
                agent_id=agent_id,
                work_item_ids=batch.ids,
                batch_sha256=batch.manifest.sha256,
                written_at=self.clock(),
            )
            reply = await self.ledger.send(command)
            if reply.outcome is CommandOutcome.REJECTED:
                # The hot copies moved under this read (a brief came, another archiver won):
                # the next pass reads them again; the files are left for the sweep.
                log.info("item_archive_refused", agent_id=agent_id, error=reply.error)
                return
            self.metrics.archived.labels("work_items").inc(len(batch.ids))

    async def _due_batch(self, agent_id: str) -> ItemBatch | None:
        """The next batch of the agent's finished WorkItems due to leave Redis, read from the
        finished index and hash (never the open WorkItems), or None."""
        n = self.names
        now_ms = int(self.clock().timestamp() * 1000)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(n.finished_index(agent_id))
        pipe.zrange(n.finished_index(agent_id), 0, 0, withscores=True)
        hot, first = await pipe.execute()
        cutoff = now_ms - int(self.limits.hot_days * 86_400_000)
        if hot <= self.limits.hot_finished and not (first and first[0][1] < cutoff):
            return None  # the common case: two cheap reads, nothing due
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrange(n.finished_index(agent_id), 0, ITEM_BATCH_MAX - 1, withscores=True)
        pipe.hget(n.agent(agent_id), "current")
        pipe.hvals(n.waits(agent_id))
        oldest, current, waits = await pipe.execute()
        # What the ledger refuses to archive: the current WorkItem, one an active wait names.
        kept = {_text(current) if current else ""}
        kept |= {orjson.loads(w).get("work_item_id") or "" for w in waits}
        due = items_due(
            [(_text(m), int(score)) for m, score in oldest if _text(m) not in kept],
            hot=hot,
            now_ms=now_ms,
            hot_finished=self.limits.hot_finished,
            hot_days=self.limits.hot_days,
        )
        if not due:
            return None
        scores = {_text(m): int(score) for m, score in oldest}
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(n.items_finished(agent_id), due)
        pipe.lrange(n.briefs(agent_id), 0, -1)
        pipe.lrange(n.reply_briefs(agent_id), 0, -1)
        pipe.lrange(n.summaries(agent_id), 0, -1)
        docs, briefs, replies, summaries = await pipe.execute()
        items = [
            (item_id, stored([doc])[0], scores[item_id])
            for item_id, doc in zip(due, docs, strict=True)
            if doc is not None
        ]
        if not items:
            return None
        try:
            return item_batch(
                agent_id,
                items,
                briefs=stored(briefs),
                reply_briefs=stored(replies),
                summaries=stored(summaries),
            )
        except SegmentError as exc:
            log.warning("item_archive_unreadable", agent_id=agent_id, error=str(exc))
            return None

    async def _drop_item_orphans(self, agent_id: str) -> None:
        """Files of batches no commit named, older than ORPHAN_AGE_S (by then the ledger refuses
        their commit): manifests not in the agent's committed batches, and the files of
        WorkItems Redis still holds."""
        n = self.names
        before = self.clock().timestamp() - ORPHAN_AGE_S
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(n.item_batches(agent_id), 0, -1)
        pipe.zrange(n.finished_index(agent_id), 0, -1)
        committed_docs, hot_ids = await pipe.execute()
        committed = {ItemBatchEntry.model_validate_json(d).batch for d in committed_docs}
        stale = [
            name
            for name, mtime in await asyncio.to_thread(self.item_files.batch_names, agent_id)
            if name not in committed and mtime < before
        ]
        for item_id in (_text(i) for i in hot_ids):
            mtime = await asyncio.to_thread(self.item_files.item_mtime, agent_id, item_id)
            if mtime is not None and mtime < before:
                stale.append(item_path(item_id))
        if stale:
            await asyncio.to_thread(self.item_files.remove, agent_id, stale)

    async def _drop_orphans(self, agent_id: str) -> None:
        """Segment files no commit names and that start inside the archived range: a crash or a
        lost race left them; no commit can name them any more (the ledger only takes a segment
        that starts at its first hot event)."""
        committed = await self.redis.lrange(self.names.segments(agent_id), 0, -1)
        manifests = [SegmentManifest.model_validate_json(d) for d in committed]
        names = {m.segment for m in manifests}
        archived = manifests[-1].last_seq if manifests else 0
        for name in await asyncio.to_thread(self.files.names, agent_id):
            if name not in names and segment_first_seq(name) <= archived:
                await asyncio.to_thread(self.files.remove, agent_id, name)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _clean_temps(root: Path, before: float) -> None:
    if not root.is_dir():
        return
    for agent_dir in root.iterdir():
        if agent_dir.is_dir():
            for name in ("", HISTORY_DIR, ITEMS_DIR, BATCHES_DIR):
                remove_stale_temps(agent_dir / name, before=before)
