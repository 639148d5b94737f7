"""Run telemetry routes: what ran on each WorkItem of an agent (turns, rounds, tool calls and
errors, failed checks, crashes, tokens, time) and, for one WorkItem, what broke, folded from the
agent's whole history, archived and hot (shared/domain/telemetry.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel

from services.ingress.auth import OperatorAgent
from services.ingress.deps import IngressDep
from services.ingress.errors import ApiError
from services.ingress.routes_agents import errors
from shared.domain.errors import ErrorKind
from shared.domain.records import WORK_ITEM_ID_PATTERN
from shared.domain.telemetry import RunSummary, RunTelemetry

router = APIRouter(prefix="/v1/agents", tags=["telemetry"])

RUNS_DEFAULT = 50
RUNS_MAX = 1000


class RunsAnswer(BaseModel):
    agent_id: str
    runs: list[RunSummary]
    """One per WorkItem, newest first (by its last event)."""
    total: int
    """WorkItems the history names (`runs` holds the newest `limit` of them)."""


@router.get("/{agent_id}/telemetry", responses=errors(404))
async def list_runs(
    record: OperatorAgent,
    ingress: IngressDep,
    limit: Annotated[int, Query(ge=1, le=RUNS_MAX)] = RUNS_DEFAULT,
) -> RunsAnswer:
    """What ran: one run per WorkItem, newest first, `{work_item_id, state, turns, rounds,
    tool_calls, tool_errors, checks_failed, crashes, tokens, wall_ms, first_at, last_at}`. Reads
    the whole history (archived and hot) at each request."""
    agent_id = record.state.agent_id
    runs = await ingress.reads.runs(agent_id)
    summaries = [RunSummary.model_validate(r.model_dump(exclude={"failed_steps"})) for r in runs]
    return RunsAnswer(agent_id=agent_id, runs=summaries[:limit], total=len(runs))


@router.get("/{agent_id}/work-items/{work_item_id}/telemetry", responses=errors(404))
async def get_run(
    record: OperatorAgent,
    ingress: IngressDep,
    work_item_id: Annotated[str, Path(pattern=WORK_ITEM_ID_PATTERN)],
) -> RunTelemetry:
    """What ran on one WorkItem and what broke: its run and `failed_steps: [{seq, kind,
    detail}]` (kind `tool_error`, `check_failed`, `turn_crashed` or `unknown_outcome`), in seq
    order. 404 `work_item_not_found` when the history never names it."""
    for run in await ingress.reads.runs(record.state.agent_id):
        if run.work_item_id == work_item_id:
            return run
    raise ApiError(
        404, ErrorKind.WORK_ITEM_NOT_FOUND.value, f"no WorkItem {work_item_id!r} in the history"
    )
