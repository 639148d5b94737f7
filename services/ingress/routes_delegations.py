"""The delegations route: the delegations an agent made (direction out) and those made to it
(direction in), as that agent's side of the ledger records them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from services.ingress.auth import AgentAccess
from services.ingress.deps import IngressDep
from services.ingress.paging import (
    CursorQuery,
    LimitQuery,
    Paged,
    instant_key,
    page_after,
    page_limit,
)
from services.ingress.routes_agents import errors
from shared.domain.delegation import DelegationRecord

router = APIRouter(prefix="/v1/agents", tags=["agents"])


class DelegationView(DelegationRecord):
    direction: Literal["out", "in"]


class DelegationsAnswer(Paged):
    agent_id: str
    delegations: list[DelegationView]


@router.get("/{agent_id}/delegations", responses=errors(404))
async def get_delegations(
    record: AgentAccess,
    ingress: IngressDep,
    direction: Annotated[Literal["out", "in"] | None, Query()] = None,
    limit: LimitQuery = None,
    cursor: CursorQuery = None,
) -> DelegationsAnswer:
    """For the operator, or the agent itself: both directions by default, oldest first,
    paged: `{agent_id, delegations, next_cursor}`."""
    size = page_limit(limit)
    agent_id = record.state.agent_id
    route = f"delegations?direction={direction or ''}"
    after = ingress.cursors.position(route, agent_id, cursor)
    found = await ingress.reads.delegations(agent_id)
    views = [DelegationView(**d.model_dump(), direction=d.direction_for(agent_id)) for d in found]
    if direction is not None:
        views = [v for v in views if v.direction == direction]
    page, last = page_after(views, _position, after, size)
    next_cursor = None if last is None else ingress.cursors.seal(route, agent_id, last)
    return DelegationsAnswer(agent_id=agent_id, delegations=page, next_cursor=next_cursor)


def _position(view: DelegationView) -> list[Any]:
    """The order the read model gives (created_at, id), as JSON."""
    return [instant_key(view.created_at), view.id]
