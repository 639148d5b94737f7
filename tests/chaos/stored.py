"""Where the chaos run's checks read WorkItems, history and briefs from: the open hash and the
finished hash, with the check that each item is stored where its state says (the hot reads rely
on it), and the archive (segments, archived WorkItems with their briefs), with the check that
every event and every WorkItem is held exactly once across the archive and Redis."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from shared.domain.archive import (
    ItemBatchEntry,
    ItemBatchManifest,
    SegmentManifest,
    item_path,
    segment_lines,
)
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.archive_checks import committed_item_ids, events_once, hot_item_ids, items_once

if TYPE_CHECKING:
    from tests.chaos.invariants import Findings


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def stored_items(
    redis: AnyRedis, names: Names, agent: str, found: Findings | None = None
) -> dict[str, dict[str, Any]]:
    """The agent's WorkItems by id, open and finished. With `found`, checks where they are
    stored: an open item in the open hash only, a completed one in the finished hash only and
    in the finished index (a hot read of the open hash never meets a finished item)."""
    open_raw = await redis.hgetall(names.items(agent))
    finished_raw = await redis.hgetall(names.items_finished(agent))
    indexed = {_text(m) for m in await redis.zrange(names.finished_index(agent), 0, -1)}
    opened = {_text(k): orjson.loads(v) for k, v in open_raw.items()}
    finished = {_text(k): orjson.loads(v) for k, v in finished_raw.items()}
    if found is not None:
        found.figures["finished work items"] += len(finished)
        for wid, item in opened.items():
            if item.get("state") != "open" or wid in finished:
                found.fail(f"{agent}: WorkItem {wid} ({item.get('state')}) in the open hash")
        for wid, item in finished.items():
            if item.get("state") != "completed":
                found.fail(f"{agent}: open WorkItem {wid} in the finished hash")
        if indexed != set(finished):
            found.fail(f"{agent}: finished index {sorted(indexed ^ set(finished))} out of step")
    archived = {
        wid: doc["work_item"] for wid, doc in (await archived_items(redis, names, agent)).items()
    }
    return archived | opened | finished


ARCHIVES: dict[str, Path] = {}
"""The archive directory of each run's stack, by key prefix (`use_archive`): where the checks
read what the archiver moved out of Redis."""


def use_archive(names: Names, archive: Path) -> None:
    ARCHIVES[names.prefix] = archive


def _archive(names: Names) -> Path | None:
    return ARCHIVES.get(names.prefix)


async def stored_history(redis: AnyRedis, names: Names, agent: str) -> list[dict[str, Any]]:
    """The agent's whole history: its committed segments' events from their files, then the
    hot events (one seq range)."""
    archive = _archive(names)
    pipe = redis.pipeline(transaction=False)
    pipe.lrange(names.segments(agent), 0, -1)
    pipe.lrange(names.history(agent), 0, -1)
    segments, hot = await pipe.execute()
    docs: list[dict[str, Any]] = []
    for raw in segments:
        manifest = SegmentManifest.model_validate_json(raw)
        if archive is None:
            raise AssertionError(f"{agent} has archived history and no archive is known")
        path = archive / agent / manifest.segment
        docs += [orjson.loads(line) for line in segment_lines(path.read_bytes())]
    return docs + [orjson.loads(d) for d in hot]


async def archived_items(redis: AnyRedis, names: Names, agent: str) -> dict[str, dict[str, Any]]:
    """The agent's archived WorkItems (those its committed batches list) as their files hold
    them, by id: `{work_item, finished_ms, briefs, delivery_summaries}`."""
    archive = _archive(names)
    found: dict[str, dict[str, Any]] = {}
    for raw in await redis.lrange(names.item_batches(agent), 0, -1):
        entry = ItemBatchEntry.model_validate_json(raw)
        if archive is None:
            raise AssertionError(f"{agent} has archived WorkItems and no archive is known")
        manifest = ItemBatchManifest.model_validate_json(
            (archive / agent / entry.batch).read_bytes()
        )
        for ref in manifest.items:
            found[ref.id] = orjson.loads((archive / agent / item_path(ref.id)).read_bytes())
    return found


async def stored_briefs(redis: AnyRedis, names: Names, agent: str) -> list[dict[str, Any]]:
    """The agent's briefs (not replies): those in Redis and those archived with their items."""
    hot = [orjson.loads(b) for b in await redis.lrange(names.briefs(agent), 0, -1)]
    archived = await archived_items(redis, names, agent)
    return hot + [b for doc in archived.values() for b in doc["briefs"] if b.get("kind") != "reply"]


async def archive_settled(
    redis: AnyRedis, names: Names, agents: list[str], env: dict[str, str]
) -> bool:
    """Whether the archiver has nothing left to move for any of `agents` under the run's hot
    limits (after quiescence nothing else writes, so the checks then read a still picture)."""
    hot_events = int(env.get("LONGRUN_HOT_EVENTS", "5000"))
    hot_finished = int(env.get("LONGRUN_HOT_FINISHED", "200"))
    for agent in agents:
        pipe = redis.pipeline(transaction=False)
        pipe.llen(names.history(agent))
        pipe.zcard(names.finished_index(agent))
        events, finished = await pipe.execute()
        if events > hot_events or finished > hot_finished:
            return False
    return True


async def check_archive(redis: AnyRedis, names: Names, agent: str, found: Findings) -> None:
    """Every event and every WorkItem exactly once across the archive and Redis: segment files
    on disk (committed or not) against the hot history, and committed batches against both
    WorkItem hashes; each committed file present."""
    archive = _archive(names)
    if archive is None:
        return
    for problem in await events_once(redis, names, archive, agent):
        found.fail(problem)
    held = await hot_item_ids(redis, names, agent)
    committed = await committed_item_ids(redis, names, archive, agent)
    found.figures["archived work items"] += len(committed)
    found.figures["archived segments"] += await redis.llen(names.segments(agent))
    for problem in await items_once(redis, names, archive, agent, held | set(committed)):
        found.fail(problem)
