"""What the ledger reads for the archive's commits besides the agent: the hot events a segment
would cover (CommitArchive), and the finished WorkItems, briefs and summaries a batch would
hold (CommitItemArchive), each hashed as the files hold them (the ledger never reads a file)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from shared.domain.archive import SegmentError, item_batch, manifest_of
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


async def with_item_batch(redis: AnyRedis, names: Names, cmd: c.Command, loaded: Loaded) -> Loaded:
    """For CommitItemArchive: the batch the named WorkItems make as Redis holds them (their
    stored docs in the finished hash, their finish times in the finished index, the briefs and
    summaries that name them), read after the agent; None when one is not a hot finished
    WorkItem. A commit in between moves the agent's version, so lr_commit refuses what was
    decided on this read."""
    if not isinstance(cmd, c.CommitItemArchive) or loaded.state.agent is None:
        return loaded
    agent, ids = cmd.agent_id, list(cmd.work_item_ids)
    pipe = redis.pipeline(transaction=False)
    pipe.hmget(names.items_finished(agent), ids)
    pipe.zmscore(names.finished_index(agent), ids)
    pipe.lrange(names.briefs(agent), 0, -1)
    pipe.lrange(names.reply_briefs(agent), 0, -1)
    pipe.lrange(names.summaries(agent), 0, -1)
    docs, scores, briefs, replies, summaries = await pipe.execute()
    if any(d is None for d in docs) or any(s is None for s in scores):
        return loaded
    items = [
        (item_id, stored([doc])[0], int(score))
        for item_id, doc, score in zip(ids, docs, scores, strict=True)
    ]
    try:
        batch = item_batch(
            agent,
            items,
            briefs=stored(briefs),
            reply_briefs=stored(replies),
            summaries=stored(summaries),
        )
    except (SegmentError, ValueError):
        return loaded
    return replace(loaded, state=replace(loaded.state, item_batch=batch))
