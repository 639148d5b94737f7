"""Checks of the archive shared by the integration and chaos tests: every history event exactly
once across the segment files on disk and the hot history in Redis, and every WorkItem exactly
once across Redis and the committed batches of archived WorkItems."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import orjson

from shared.domain.archive import (
    ArchivedItemRef,
    ItemBatchEntry,
    ItemBatchManifest,
    item_path,
    segment_lines,
)
from shared.domain.stored import AgentRecord
from shared.store.client import AnyRedis
from shared.wire.names import Names


def disk_seqs(archive: Path, agent_id: str) -> list[int]:
    """The seqs of every event in every segment file of the agent, committed or not."""
    seqs: list[int] = []
    for path in sorted((archive / agent_id / "history").glob("*.jsonl")):
        seqs += [int(orjson.loads(line)["seq"]) for line in segment_lines(path.read_bytes())]
    return seqs


async def hot_seqs(redis: AnyRedis, names: Names, agent_id: str) -> list[int]:
    docs = await redis.lrange(names.history(agent_id), 0, -1)
    return [int(orjson.loads(d)["seq"]) for d in docs]


async def events_once(redis: AnyRedis, names: Names, archive: Path, agent_id: str) -> list[str]:
    """What breaks "every event exactly once across archive and hot" for one agent (nothing
    when it holds): a seq missing from both, or held twice."""
    doc = await redis.hget(names.agent(agent_id), "doc")
    if not doc:
        return [f"{agent_id}: no agent"]
    last = AgentRecord.model_validate_json(doc).history_seq
    held = Counter(disk_seqs(archive, agent_id) + await hot_seqs(redis, names, agent_id))
    missing = [seq for seq in range(1, last + 1) if held[seq] == 0]
    twice = sorted(seq for seq, n in held.items() if n > 1)
    problems = []
    if missing:
        problems.append(f"{agent_id}: events {missing[:5]} ({len(missing)}) in neither copy")
    if twice:
        problems.append(f"{agent_id}: events {twice[:5]} ({len(twice)}) in both copies")
    return problems


async def hot_item_ids(redis: AnyRedis, names: Names, agent_id: str) -> set[str]:
    """Every WorkItem id Redis holds for the agent, open or finished."""
    found = [
        *await redis.hkeys(names.items(agent_id)),
        *await redis.hkeys(names.items_finished(agent_id)),
    ]
    return {i.decode() if isinstance(i, bytes) else i for i in found}


async def committed_refs(
    redis: AnyRedis, names: Names, archive: Path, agent_id: str
) -> list[ArchivedItemRef]:
    """Every committed batch's WorkItems (id, finish time, file hash), as their manifests on
    disk list them."""
    refs: list[ArchivedItemRef] = []
    for doc in await redis.lrange(names.item_batches(agent_id), 0, -1):
        entry = ItemBatchEntry.model_validate_json(doc)
        raw = (archive / agent_id / entry.batch).read_bytes()
        refs += ItemBatchManifest.model_validate_json(raw).items
    return refs


async def committed_item_ids(
    redis: AnyRedis, names: Names, archive: Path, agent_id: str
) -> list[str]:
    """The WorkItem ids of every committed batch, as their manifests on disk list them."""
    return [ref.id for ref in await committed_refs(redis, names, archive, agent_id)]


async def items_once(
    redis: AnyRedis, names: Names, archive: Path, agent_id: str, expected: set[str]
) -> list[str]:
    """What breaks "every WorkItem exactly once across archive and hot" (nothing when it
    holds): an expected id in neither Redis nor a committed batch, in both, in two batches,
    committed without its file, or with a file that is not the one its batch hashed."""
    hot = await hot_item_ids(redis, names, agent_id)
    committed = await committed_item_ids(redis, names, archive, agent_id)
    held = Counter([*hot, *committed])
    problems = []
    missing = sorted(expected - held.keys())
    twice = sorted(i for i, n in held.items() if n > 1)
    if missing:
        problems.append(f"{agent_id}: WorkItems {missing[:3]} ({len(missing)}) in neither copy")
    if twice:
        problems.append(f"{agent_id}: WorkItems {twice[:3]} ({len(twice)}) held twice")
    without = [i for i in committed if not (archive / agent_id / item_path(i)).is_file()]
    if without:
        problems.append(f"{agent_id}: committed WorkItems {without[:3]} have no file")
    changed = [
        ref.id
        for ref in await committed_refs(redis, names, archive, agent_id)
        if ref.id not in without
        and hashlib.sha256((archive / agent_id / item_path(ref.id)).read_bytes()).hexdigest()
        != ref.sha256
    ]
    if changed:
        problems.append(f"{agent_id}: committed WorkItems {changed[:3]} differ from their batch")
    return problems
