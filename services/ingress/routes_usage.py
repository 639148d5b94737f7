"""The usage route: an agent's model calls and tokens over a range, in total and by model,
summed from the rows the ledger keeps per UTC day (exact over any life), and for a day a bound
cuts, from that day's turn_finished events."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import Field

from services.ingress.auth import AgentAccess
from services.ingress.deps import IngressDep
from services.ingress.errors import ApiError
from services.ingress.paging import CursorQuery, LimitQuery, bad_field, page_limit
from services.ingress.queries import EPOCH, usage_since, utc_midnight
from services.ingress.routes_agents import errors
from shared.domain.usage import UsageSummary

router = APIRouter(prefix="/v1/agents", tags=["agents"])


class DayRow(UsageSummary):
    day: str = Field(description="The UTC day, YYYY-MM-DD.")


class UsageAnswer(UsageSummary):
    agent_id: str
    since: datetime = Field(description="Turns that finished at or after this instant count.")
    until: datetime | None = Field(
        default=None, description="Turns that finished before this instant count (null: no end)."
    )
    days: list[DayRow] | None = Field(
        default=None,
        description="With `by=day`: a page of per-UTC-day rows of the range, ascending (days "
        "without model calls left out); the totals stay those of the whole range.",
    )
    next_cursor: str | None = Field(
        default=None, description="With `by=day`: `cursor` for the next page; null at the end."
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
    *,
    since: Annotated[
        datetime | None,
        Query(
            description="RFC 3339 instant with its offset; default: today's UTC midnight "
            "(with `by=day`: the beginning)."
        ),
    ] = None,
    until: Annotated[
        datetime | None,
        Query(description="RFC 3339 instant with its offset, excluded; default: no end."),
    ] = None,
    by: Annotated[
        Literal["day"] | None, Query(description="`day`: also a page of per-day rows.")
    ] = None,
    limit: LimitQuery = None,
    cursor: CursorQuery = None,
) -> UsageAnswer:
    """For the operator, or the agent itself: `{agent_id, since, until, turns, model_calls,
    input_tokens, cached_input_tokens, output_tokens, by_model}`, exact over any range; with
    `by=day`, also `days` (paged) and `next_cursor`."""
    size = page_limit(limit)
    default = EPOCH if by == "day" else utc_midnight(ingress.clock())
    since = _instant("since", since) or default
    until = _instant("until", until)
    if until is not None and until < since:
        raise ApiError(400, "invalid_request", "until is before since", details={"field": "until"})
    agent_id = record.state.agent_id
    summary = await usage_since(ingress, agent_id, since, until)
    answer = UsageAnswer(agent_id=agent_id, since=since, until=until, **summary.model_dump())
    if by != "day":
        if cursor is not None:
            raise bad_field("cursor", "cursor pages only by=day")
        return answer
    route = f"usage?by=day&since={since.isoformat()}&until={until.isoformat() if until else ''}"
    after = ingress.cursors.position(route, agent_id, cursor)
    rows, more = await ingress.reads.usage_by_day(
        agent_id, since, until, after if isinstance(after, str) else None, size
    )
    days = [DayRow(**r.model_dump(exclude={"last_seq"})) for r in rows]
    following = ingress.cursors.seal(route, agent_id, rows[-1].day) if more and rows else None
    return answer.model_copy(update={"days": days, "next_cursor": following})
