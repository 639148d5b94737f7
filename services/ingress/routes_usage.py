"""The usage route: an agent's model calls and tokens over a range, in total and by model,
summed from the rows the ledger keeps per UTC day (exact over any life), and for a day a bound
cuts, from that day's turn_finished events."""

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
    until: datetime | None = Field(
        default=None, description="Turns that finished before this instant count (null: no end)."
    )


def _instant(name: str, value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise ApiError(
            400,
            "invalid_request",
            f"{name} needs a UTC offset (RFC 3339), e.g. Z",
            details={"field": name},
        )
    return value


@router.get("/{agent_id}/usage", responses=errors(404))
async def get_usage(
    record: AgentAccess,
    ingress: IngressDep,
    since: Annotated[
        datetime | None,
        Query(description="RFC 3339 instant with its offset; default: today's UTC midnight."),
    ] = None,
    until: Annotated[
        datetime | None,
        Query(description="RFC 3339 instant with its offset, excluded; default: no end."),
    ] = None,
) -> UsageAnswer:
    """For the operator, or the agent itself: `{agent_id, since, until, turns, model_calls,
    input_tokens, cached_input_tokens, output_tokens, by_model}`, exact over any range."""
    since = _instant("since", since) or utc_midnight(ingress.clock())
    until = _instant("until", until)
    if until is not None and until < since:
        raise ApiError(400, "invalid_request", "until is before since", details={"field": "until"})
    agent_id = record.state.agent_id
    summary = await usage_since(ingress, agent_id, since, until)
    return UsageAnswer(agent_id=agent_id, since=since, until=until, **summary.model_dump())
