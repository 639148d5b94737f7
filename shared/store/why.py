"""Why a WorkItem is not running, answered from Redis for any reader (the HTTP side included):
reads the agent's full snapshot and applies the pure `shared.domain.why.why_not_running`."""

from __future__ import annotations

from datetime import datetime

from shared.domain.why import Reason, why_not_running
from shared.store.client import AnyRedis
from shared.store.snapshots import SnapshotReader
from shared.wire.names import Names


async def explain_not_running(
    redis: AnyRedis, names: Names, agent_id: str, work_item_id: str, now: datetime
) -> Reason | None:
    """The reason, or None when the agent or the WorkItem (of this agent) does not exist."""
    views = await SnapshotReader(redis, names).load([agent_id], full=True)
    view = views.get(agent_id)
    if view is None or work_item_id not in view.items:
        return None
    return why_not_running(view.items[work_item_id], view.snapshot, now)
