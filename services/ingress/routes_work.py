"""Agent routes on WorkItems: tool calls for agents that bring their own loop, and the reads
(list, one item, briefs) answered from the ledger's read model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Path, Query, Response
from pydantic import ValidationError

from services.ingress.auth import AgentAccess, ByOperator
from services.ingress.deps import Ingress, IngressDep
from services.ingress.errors import INVALID_REQUEST, ApiError
from services.ingress.paging import (
    CursorQuery,
    LimitQuery,
    Source,
    bad_field,
    instant_key,
    page_after,
    page_limit,
    page_sources,
)
from services.ingress.routes_agents import errors
from services.ingress.schemas import (
    BriefsAnswer,
    ErrorAnswer,
    ToolCallBody,
    ToolsAnswer,
    WhyNotRunningAnswer,
)
from services.ingress.tool_calls import agent_tools, run_tool
from shared.domain.archive import ItemBatchEntry
from shared.domain.errors import HTTP_STATUS, ErrorKind
from shared.domain.readouts import work_item_view_json
from shared.domain.records import BriefKind, BriefRecord
from shared.domain.tools import (
    GetWorkItemInput,
    ToolEnvelope,
)
from shared.domain.views import ListFilter, Ranked, rank_key
from shared.domain.why import Reason, ReasonKind
from shared.store.archived import CursorError, decode_cursor

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["work items"])

TOOL_ANSWERS: dict[int | str, dict[str, Any]] = {
    **errors(),
    200: {"model": ToolEnvelope, "description": "The tool's success envelope."},
    409: {"model": ToolEnvelope, "description": "The tool's error envelope."},
    **{
        status: {
            "model": ToolEnvelope | ErrorAnswer,
            "description": "The tool's error envelope, or a request error before the tool ran.",
        }
        for status in (400, 403, 404)
    },
}


@router.get("/tools", responses=errors(404))
async def list_tools(record: AgentAccess, ingress: IngressDep) -> ToolsAnswer:
    """The tools this route serves the agent, each with its input schema: the same definitions
    the builtin loop's model is given and the MCP server lists (bring them to your own model).
    The file tools are listed only when the agent's spec has them on (`tools.files`)."""
    return ToolsAnswer.of(await agent_tools(ingress, record.state.agent_id))


@router.post(
    "/tools/{tool_name}",
    response_model=ToolEnvelope,
    responses=TOOL_ANSWERS,
)
async def call_tool(
    record: AgentAccess,
    tool_name: Annotated[str, Path(max_length=64, description="One of the tools of section 3.")],
    body: ToolCallBody,
    ingress: IngressDep,
    by_operator: ByOperator,
) -> Response:
    """Run one tool outside a turn (no fencing token); the status follows the error kind.
    File tools run here, in the agent's home; the others are ledger commands. Acceptance
    checks added with the operator token are the operator's (the agent cannot remove them)."""
    envelope = await run_tool(
        ingress,
        record.state.agent_id,
        tool_name,
        body.args,
        command_id=body.command_id,
        assistant_text=body.assistant_text,
        by_operator=by_operator,
    )
    status = 200 if envelope.error is None else HTTP_STATUS.get(envelope.error.kind, 400)
    return Response(
        orjson.dumps(envelope.model_dump(mode="json")),
        status_code=status,
        media_type="application/json",
    )


def _invalid(exc: ValidationError) -> ApiError:
    errors = [
        {"loc": [str(p) for p in e["loc"]], "msg": e["msg"]} for e in exc.errors(include_url=False)
    ]
    return ApiError(400, INVALID_REQUEST, "invalid query parameters", details={"errors": errors})


@router.get("/work-items", responses=errors(400, 404))
async def list_work_items(
    record: AgentAccess,
    ingress: IngressDep,
    *,
    filter: ListFilter = ListFilter.ALL,
    limit: LimitQuery = None,
    include_todo_list: bool = False,
    state: Annotated[
        Literal["finished"] | None,
        Query(
            description="`finished`: the finished WorkItems newest first, those in Redis then "
            "the archived ones (each with `archived`)."
        ),
    ] = None,
    cursor: CursorQuery = None,
) -> dict[str, Any]:
    """ListWorkItems over HTTP, paged: `{filter, returned, total_matching, work_items,
    next_cursor}` in ranking order (the order may change between pages as the items do; an
    item is never shown twice on one walk unless its rank moved past the cursor); with
    `state=finished`, `{state, returned, total_matching, work_items, next_cursor}`."""
    agent_id = record.state.agent_id
    size = page_limit(limit)
    if state == "finished":
        return await _finished(ingress, agent_id, size, cursor, include_todo_list)
    route = f"work-items?filter={filter.value}"
    after = ingress.cursors.position(route, agent_id, cursor)
    ranked, waits, current = await ingress.reads.ranked_work_items(agent_id, filter)
    page, last = page_after(ranked, _rank, after, size)
    views = [
        work_item_view_json(e.item, waits, current, include_todo_list=include_todo_list)
        for e in page
    ]
    return {
        "filter": filter.value,
        "returned": len(views),
        "total_matching": len(ranked),
        "work_items": views,
        "next_cursor": None if last is None else ingress.cursors.seal(route, agent_id, last),
    }


def _rank(entry: Ranked) -> list[Any]:
    return list(rank_key(entry))


FINISHED_ROUTE = "work-items?state=finished"


async def _finished(
    ingress: Ingress, agent_id: str, size: int, cursor: str | None, todo: bool
) -> dict[str, Any]:
    """The finished list pages with the archive's own position (shared.store.archived), sealed
    like every other cursor."""
    inner = ingress.cursors.position(FINISHED_ROUTE, agent_id, cursor)
    try:
        after = decode_cursor(agent_id, inner) if isinstance(inner, str) else None
    except CursorError as exc:
        raise bad_field("cursor", str(exc)) from None
    answer = await ingress.reads.finished_page(
        agent_id, limit=size, after=after, include_todo_list=todo
    )
    following = answer.get("next_cursor")
    if following is not None:
        answer["next_cursor"] = ingress.cursors.seal(FINISHED_ROUTE, agent_id, following)
    return answer


@router.get("/work-items/{work_item_id}", responses=errors(404))
async def get_work_item(
    record: AgentAccess,
    work_item_id: Annotated[str, Path(max_length=64)],
    ingress: IngressDep,
    include_todo_list: bool = False,
    include_process_notes: bool = False,
) -> dict[str, Any]:
    """GetWorkItem: the bare result `{current_work_item_id, work_item}`."""
    try:
        args = GetWorkItemInput(
            work_item_id=work_item_id,
            include_todo_list=include_todo_list,
            include_process_notes=include_process_notes,
        )
    except ValidationError as exc:
        raise _invalid(exc) from None
    return await ingress.reads.get_work_item(record.state.agent_id, args)


@router.get("/work-items/{work_item_id}/why", responses=errors(404))
async def why_not_running(
    record: AgentAccess, work_item_id: Annotated[str, Path(max_length=64)], ingress: IngressDep
) -> WhyNotRunningAnswer:
    """Why this WorkItem is not running right now (or `running`), from the agent's current
    state: the same pure function the scheduler decides with, so the answer cannot drift."""
    agent_id = record.state.agent_id
    reason = await ingress.why(agent_id, work_item_id)
    if reason is None:
        # Missing, or another agent's: the same answer GetWorkItem gives.
        try:
            args = GetWorkItemInput(work_item_id=work_item_id)
        except ValidationError as exc:
            raise _invalid(exc) from None
        found = await ingress.reads.get_work_item(agent_id, args)
        if found.get("archived"):
            # Archived: completed, with its report, like a completed WorkItem still in Redis.
            report = found["work_item"].get("result_summary")
            return WhyNotRunningAnswer.of(work_item_id, Reason(ReasonKind.COMPLETED, text=report))
        raise ApiError(404, ErrorKind.WORK_ITEM_NOT_FOUND.value, f"no WorkItem {work_item_id!r}")
    return WhyNotRunningAnswer.of(work_item_id, reason)


@router.get("/briefs", responses=errors(404))
async def get_briefs(
    record: AgentAccess,
    ingress: IngressDep,
    *,
    work_item_id: Annotated[str | None, Query(max_length=64)] = None,
    kind: Annotated[BriefKind | None, Query(description="Only briefs of this kind.")] = None,
    limit: LimitQuery = None,
    cursor: CursorQuery = None,
) -> BriefsAnswer:
    """The agent's briefs newest first, paged, with the delivery summaries of the WorkItems
    whose briefs are on the page: `{briefs, delivery_summaries, next_cursor}`. Those in Redis
    come first, then those of archived WorkItems, batch by batch from the newest committed
    (read from their files only when a page reaches them)."""
    size = page_limit(limit)
    agent_id = record.state.agent_id
    route = f"briefs?work_item_id={work_item_id or ''}&kind={kind or ''}"
    after = ingress.cursors.position(route, agent_id, cursor)
    briefs, summaries = await ingress.reads.briefs(agent_id, work_item_id)
    known = {s.id: s for s in summaries}

    def newest(found: list[BriefRecord]) -> list[BriefRecord]:
        wanted = [b for b in found if kind is None or b.kind is kind]
        return sorted(wanted, key=_brief_position, reverse=True)

    async def hot() -> list[BriefRecord]:
        return newest(briefs)

    sources: list[Source[BriefRecord]] = [("hot", hot)]
    if work_item_id is None:
        # An archived WorkItem's briefs with ?work_item_id= come from reads.briefs itself.
        finished = ingress.reads.finished
        batches = await finished.batches(agent_id)

        def batch(entry: ItemBatchEntry) -> Callable[[], Awaitable[list[BriefRecord]]]:
            async def load() -> list[BriefRecord]:
                found, of_batch = await finished.batch_records(agent_id, entry)
                known.update((s.id, s) for s in of_batch)
                return newest(found)

            return load

        sources += [(index, batch(batches[index])) for index in reversed(range(len(batches)))]
    page, last = await page_sources(sources, _brief_position, after, size, descending=True)
    on_page = {b.work_item_id for b in page}
    shown = sorted(
        (s for s in known.values() if s.work_item_id in on_page), key=lambda s: s.created_at
    )
    return BriefsAnswer(
        briefs=page,
        delivery_summaries=shown,
        next_cursor=None if last is None else ingress.cursors.seal(route, agent_id, last),
    )


def _brief_position(brief: BriefRecord) -> list[Any]:
    return [instant_key(brief.created_at), brief.id]
