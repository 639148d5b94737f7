"""The read side of ingress: what the HTTP routes answer and what the console shows, from one
set of functions over the ledger's read model, so the two can never disagree."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time
from typing import Any

from services.ingress.deps import Ingress
from services.ingress.schemas import AgentDetail
from shared.domain.delegation import DelegationRecord
from shared.domain.records import NoteCovers
from shared.domain.specs import StoredSpec, label_matches
from shared.domain.stored import AgentRecord
from shared.domain.tools import GetWorkItemInput, ListWorkItemsInput
from shared.domain.usage import UsageSummary
from shared.domain.views import ListFilter
from shared.store.verifying import verifying_items

BOARD_LIMIT = 100
"""The most WorkItems one read of the board returns (ListWorkItems' own ceiling)."""


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The beginning of every range: usage since then is an agent's whole life."""


def utc_midnight(now: datetime) -> datetime:
    return datetime.combine(now.date(), time(0), tzinfo=now.tzinfo)


async def agents_page(
    ingress: Ingress, labels: Sequence[str], after: str | None, limit: int
) -> tuple[list[tuple[AgentRecord, StoredSpec]], str | None]:
    """One page of agents by id after `after` whose labels match all of `labels`, and the id
    to page on from (None at the end): records and specs are read a page at a time."""
    ids = [i for i in await ingress.reads.agent_ids() if after is None or i > after]
    found: list[tuple[AgentRecord, StoredSpec]] = []
    for start in range(0, len(ids), limit + 1):
        chunk = ids[start : start + limit + 1]
        records, specs = await asyncio.gather(
            asyncio.gather(*(ingress.reads.agent_record(i) for i in chunk)),
            ingress.reads.agent_specs(chunk),
        )
        found += [
            (r, s)
            for r, s in zip(records, specs, strict=True)
            if r is not None and all(label_matches(s.spec, selector) for selector in labels)
        ]
        if len(found) > limit:
            return found[:limit], found[limit - 1][0].state.agent_id
    return found, None


async def agent_detail(ingress: Ingress, record: AgentRecord) -> AgentDetail:
    """AgentState with counts by readiness, its spec, and why it starts no turn now (its
    verifying items are read for that: they are few, from one class index)."""
    agent_id = record.state.agent_id
    state, stored, verifying, sandboxes = await asyncio.gather(
        ingress.reads.agent_state(agent_id),
        ingress.reads.agent_spec(agent_id),
        verifying_items(ingress.reads, agent_id),
        ingress.reads.sandbox_reports(),
    )
    now = ingress.clock()
    return AgentDetail.of(
        state or record.state, record, stored, now, verifying, sandboxes=sandboxes
    )


async def usage_since(
    ingress: Ingress, agent_id: str, since: datetime | None, until: datetime | None = None
) -> UsageSummary:
    """Model usage of the turns that finished in [since, until) (default: since today's UTC
    midnight, no end), exact over any range (ReadModel.usage_between)."""
    since = since or utc_midnight(ingress.clock())
    return await ingress.reads.usage_between(agent_id, since, until)


async def board(ingress: Ingress, agent_id: str) -> dict[str, Any]:
    """ListWorkItems over every WorkItem, todos included, in ranking order."""
    args, _ = ListWorkItemsInput(
        filter=ListFilter.ALL, limit=BOARD_LIMIT, include_todo_list=True
    ).clamped()
    return await ingress.reads.list_work_items(agent_id, args)


@dataclass(frozen=True, slots=True)
class DelegationNode:
    """A delegation this agent (or one below it) made, with the delegations its child made
    from the delegated WorkItem."""

    record: DelegationRecord
    children: tuple[DelegationNode, ...] = ()


TREE_DEPTH = 8
"""Deeper than any chain the ledger allows (LONGRUN_MAX_DELEGATION_DEPTH), so a tree is whole."""


async def _below(
    ingress: Ingress, record: DelegationRecord, depth: int, seen: set[str]
) -> DelegationNode:
    if depth >= TREE_DEPTH:
        return DelegationNode(record)
    made = await ingress.reads.delegations(record.child_agent_id)
    children = [
        d
        for d in made
        if d.parent_agent_id == record.child_agent_id
        and d.parent_work_item_id == record.child_work_item_id
        and d.id not in seen
    ]
    seen.update(d.id for d in children)
    nodes = await asyncio.gather(*(_below(ingress, d, depth + 1, seen) for d in children))
    return DelegationNode(record, tuple(nodes))


async def delegation_tree(
    ingress: Ingress, agent_id: str
) -> tuple[list[DelegationRecord], list[DelegationNode]]:
    """The delegations made to this agent (in), and those it made (out) as a tree down every
    child's own delegations, from the same records the delegations route answers with."""
    found = await ingress.reads.delegations(agent_id)
    incoming = [d for d in found if d.direction_for(agent_id) == "in"]
    outgoing = [d for d in found if d.direction_for(agent_id) == "out"]
    seen = {d.id for d in outgoing}
    nodes = await asyncio.gather(*(_below(ingress, d, 1, seen) for d in outgoing))
    return incoming, list(nodes)


TRACE_ENTRIES = 40
"""Recorded entries the console shows of a WorkItem's trace (the newest, as `work show`)."""
TRACE_CHARS = 64_000
"""How far back (in characters) the console reads a WorkItem's trace before it stops."""


async def work_item_memory(
    ingress: Ingress, agent_id: str, work_item_id: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """GetWorkItem with its todos and process notes, and its process trace as its next turn
    would start from: the newest recorded entries of the agent's own (assistant text, tool
    calls, tool results) that no note covers yet, oldest first."""
    args = GetWorkItemInput(
        work_item_id=work_item_id, include_todo_list=True, include_process_notes=True
    )
    view = (await ingress.reads.get_work_item(agent_id, args))["work_item"]
    notes = view.get("process_notes") or []
    covered = NoteCovers.model_validate(notes[-1]["covers"]) if notes else None
    entries, _ = await ingress.reads.work_item_rounds(
        agent_id, work_item_id, covered=covered, max_chars=TRACE_CHARS
    )
    return view, entries[-TRACE_ENTRIES:]
