"""What the ledger reads for CommitArchive besides the agent: the hot events a segment would
cover, hashed as the segment file holds them (the ledger never reads the file itself)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from shared.domain.archive import SegmentError, manifest_of
from shared.store.client import AnyRedis, stored
from shared.wire import commands as c
from shared.wire.names import Names

if TYPE_CHECKING:
    from services.ledger.store import Loaded


async def with_segment(redis: AnyRedis, names: Names, cmd: c.Command, loaded: Loaded) -> Loaded:
    """For CommitArchive: the segment the hot events up to `upto_seq` make, read after the agent
    (its archived seq says where the hot history starts). A commit in between moves the agent's
    version, so lr_commit refuses what was decided on this read."""
    agent = loaded.state.agent
    if not isinstance(cmd, c.CommitArchive) or agent is None:
        return loaded
    count = cmd.upto_seq - agent.history_archived_seq
    if count < 1 or cmd.upto_seq > agent.history_seq:
        return loaded
    docs = await redis.lrange(names.history(cmd.agent_id), 0, count - 1)
    try:
        segment = manifest_of(cmd.agent_id, stored(docs))
    except SegmentError:
        return loaded
    return replace(loaded, state=replace(loaded.state, archive_segment=segment))
