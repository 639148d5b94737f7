"""The read side of ingress: what the HTTP routes answer and what the console shows, from one
set of functions over the ledger's read model, so the two can never disagree."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, time
from typing import Any

from services.ingress.deps import Ingress
from services.ingress.schemas import AgentDetail
from shared.domain.specs import StoredSpec, label_matches
from shared.domain.stored import AgentRecord
from shared.domain.tools import ListWorkItemsInput
from shared.domain.usage import UsageSummary, summarize
from shared.domain.views import ListFilter

BOARD_LIMIT = 100
"""The most WorkItems one read of the board returns (ListWorkItems' own ceiling)."""


def utc_midnight(now: datetime) -> datetime:
    return datetime.combine(now.date(), time(0), tzinfo=now.tzinfo)


async def agents_with_specs(
    ingress: Ingress, labels: Sequence[str] = ()
) -> list[tuple[AgentRecord, StoredSpec]]:
    """Every agent (sorted by id) with its spec, keeping those whose labels match all of
    `labels` (`key=value` or a bare `key`)."""
    ids = await ingress.reads.agent_ids()
    records, specs = await asyncio.gather(
        asyncio.gather(*(ingress.reads.agent_record(i) for i in ids)),
        ingress.reads.agent_specs(ids),
    )
    return [
        (r, s)
        for r, s in zip(records, specs, strict=True)
        if r is not None and all(label_matches(s.spec, selector) for selector in labels)
    ]


async def agent_detail(ingress: Ingress, record: AgentRecord) -> AgentDetail:
    """AgentState with counts by readiness, its spec, and why it starts no turn now."""
    agent_id = record.state.agent_id
    state, stored = await asyncio.gather(
        ingress.reads.agent_state(agent_id), ingress.reads.agent_spec(agent_id)
    )
    return AgentDetail.of(state or record.state, record, stored, ingress.clock())


async def usage_since(ingress: Ingress, agent_id: str, since: datetime | None) -> UsageSummary:
    """Model usage of the turns that finished at or after `since` (default: today, UTC)."""
    since = since or utc_midnight(ingress.clock())
    return summarize(await ingress.reads.usage(agent_id), since)


async def board(ingress: Ingress, agent_id: str) -> dict[str, Any]:
    """ListWorkItems over every WorkItem, todos included, in ranking order."""
    args, _ = ListWorkItemsInput(
        filter=ListFilter.ALL, limit=BOARD_LIMIT, include_todo_list=True
    ).clamped()
    return await ingress.reads.list_work_items(agent_id, args)
