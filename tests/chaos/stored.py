"""Where the chaos run's checks read WorkItems from: the open hash and the finished hash, with
the check that each item is stored where its state says (the hot reads rely on it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from shared.store.client import AnyRedis
from shared.wire.names import Names

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
    return opened | finished
