"""The delegations route: the delegations an agent made (direction out) and those made to it
(direction in), as that agent's side of the ledger records them."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from services.ingress.auth import AgentAccess
from services.ingress.deps import IngressDep
from services.ingress.routes_agents import errors
from shared.domain.delegation import DelegationRecord

router = APIRouter(prefix="/v1/agents", tags=["agents"])


class DelegationView(DelegationRecord):
    direction: Literal["out", "in"]


class DelegationsAnswer(BaseModel):
    agent_id: str
    delegations: list[DelegationView]


@router.get("/{agent_id}/delegations", responses=errors(404))
async def get_delegations(
    record: AgentAccess,
    ingress: IngressDep,
    direction: Annotated[Literal["out", "in"] | None, Query()] = None,
) -> DelegationsAnswer:
    """For the operator, or the agent itself: both directions by default, oldest first."""
    agent_id = record.state.agent_id
    found = await ingress.reads.delegations(agent_id)
    views = [DelegationView(**d.model_dump(), direction=d.direction_for(agent_id)) for d in found]
    if direction is not None:
        views = [v for v in views if v.direction == direction]
    return DelegationsAnswer(agent_id=agent_id, delegations=views)
