"""The usage route: an agent's model calls and tokens since a moment, in total and by model,
summed from the usage records the ledger keeps per finished turn."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from services.ingress.auth import AgentAccess
from services.ingress.deps import IngressDep
from services.ingress.errors import ApiError
from services.ingress.queries import usage_since, utc_midnight
from services.ingress.routes_agents import errors
from shared.domain.usage import UsageSummary

router = APIRouter(prefix="/v1/agents", tags=["agents"])


class UsageAnswer(UsageSummary):
    agent_id: str
    since: datetime = Field(description="Turns that finished at or after this instant count.")


@router.get("/{agent_id}/usage", responses=errors(404))
async def get_usage(
    record: AgentAccess,
    ingress: IngressDep,
    since: Annotated[
        datetime | None,
        Query(description="RFC 3339 instant with its offset; default: today's UTC midnight."),
    ] = None,
) -> UsageAnswer:
    """For the operator, or the agent itself: `{agent_id, since, turns, model_calls,
    input_tokens, cached_input_tokens, output_tokens, by_model}`."""
    if since is not None and since.tzinfo is None:
        raise ApiError(400, "invalid_request", "since needs a UTC offset (RFC 3339), e.g. Z")
    since = since or utc_midnight(ingress.clock())
    agent_id = record.state.agent_id
    summary = await usage_since(ingress, agent_id, since)
    return UsageAnswer(agent_id=agent_id, since=since, **summary.model_dump())
