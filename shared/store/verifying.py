"""Finding an agent's verifying WorkItems: they sit in its `blocked` class index (their
scheduling state is waiting_system), so only that index's items are read, never every item."""

from __future__ import annotations

from shared.domain.records import WorkItem
from shared.domain.views import CandidateClass
from shared.store.readmodel import ReadModel


async def verifying_items(reads: ReadModel, agent_id: str) -> list[WorkItem]:
    """The agent's open items whose acceptance checks are running, in index order."""
    index = reads.n.class_index(agent_id, CandidateClass.BLOCKED.value)
    ids = await reads.redis.zrange(index, 0, -1)
    names = [i.decode() if isinstance(i, bytes) else str(i) for i in ids]
    return [item for item in await reads.items(agent_id, names) if item.is_verifying]
