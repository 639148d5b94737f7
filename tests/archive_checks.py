"""Checks of the archive shared by the integration and chaos tests: every history event exactly
once across the segment files on disk and the hot history in Redis."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson

from shared.domain.archive import segment_lines
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
