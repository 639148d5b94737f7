"""The console's pages (agents, agent, history, runs), each also served as its live part alone
(`?part=live`), which open pages fetch again when the live feed says something changed.

Every page is built from the same read functions the HTTP routes answer with
(services.ingress.queries and the read model): the console has no read path of its own.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Response
from fastapi.responses import HTMLResponse

from services.ingress.console.session import CSRF_FIELD, Session
from services.ingress.console.web import (
    UI,
    Console,
    ConsoleDep,
    Refused,
    SessionDep,
    agent_or_404,
)
from services.ingress.deps import Ingress, IngressDep
from services.ingress.paging import CursorQuery
from services.ingress.queries import (
    EPOCH,
    agent_detail,
    board,
    delegation_tree,
    usage_since,
)
from services.ingress.queries import (
    agents_page as agents_page_of,
)
from shared.domain.records import WORK_ITEM_ID_PATTERN
from shared.domain.stored import AgentRecord
from shared.domain.usage import UsageSummary
from shared.domain.views import SchedulingState

router = APIRouter(prefix=UI, include_in_schema=False)

BOARD_ORDER = (
    SchedulingState.RUNNABLE,
    SchedulingState.WAITING_OPERATOR,
    SchedulingState.WAITING_SYSTEM,
    SchedulingState.WAITING_TASK,
    SchedulingState.WAITING_EXTERNAL,
    SchedulingState.WAITING_TIMER,
    SchedulingState.BLOCKED,
    SchedulingState.COMPLETED,
)
"""Board columns: what moves first, what waits on the operator next, what is done last."""
HISTORY_PAGE = 50
RUNS_SHOWN = 200
"""Runs on the runs page, newest first (the telemetry route pages further)."""
BRIEFS_SHOWN = 20
"""The newest briefs on the agent page (replies, results, failures); the briefs route has all."""
PartQuery = Annotated[str | None, Query(alias="part", pattern="^live$")]


NOTICES = {
    "message_sent": "Message sent.",
    "cancelled": "WorkItem cancelled.",
    "put_down": "WorkItem put down: the agent picks what comes next.",
    "approved": "Verdict recorded: approved.",
    "rejected": "Verdict recorded: rejected.",
    "paused": "Agent paused: no turn starts until it is resumed.",
    "resumed": "Agent resumed: it runs again if it has work.",
    "retired": "Agent retired: its open WorkItems were cancelled.",
}
"""What a redirect after a form may announce (by code, so a link cannot put words on a page)."""
NoticeQuery = Annotated[str | None, Query(max_length=32)]


def _common(console: Console, session: Session) -> dict[str, Any]:
    return {
        "csrf_field": CSRF_FIELD,
        "csrf": console.keys.csrf_for(session.nonce),
        "signed_in": True,
        "form_key": secrets.token_urlsafe(16),
    }


def render(
    console: Console, session: Session, template: str, part: str | None, **context: Any
) -> HTMLResponse:
    name = f"_{template}_live.html" if part == "live" else f"{template}.html"
    return console.page(name, **_common(console, session), **context)


async def _agent_row(ingress: Ingress, record: AgentRecord) -> dict[str, Any]:
    agent_id = record.state.agent_id
    detail, usage = await asyncio.gather(
        agent_detail(ingress, record), usage_since(ingress, agent_id, None)
    )
    current = detail.current_work_item_id
    items = await ingress.reads.items(agent_id, [current]) if current else []
    return {
        "agent": detail,
        "tokens_today": usage.input_tokens + usage.output_tokens,
        "current": items[0] if items else None,
    }


AGENTS_PAGE = 100
"""Agents the console lists on one page (then a link to the next, as the API's cursor)."""


@router.get("", response_class=HTMLResponse)
async def agents_page(
    ingress: IngressDep,
    console: ConsoleDep,
    session: SessionDep,
    part: PartQuery = None,
    cursor: CursorQuery = None,
) -> HTMLResponse:
    after = ingress.cursors.position("ui:agents", "", cursor)
    pairs, last = await agents_page_of(ingress, (), after, AGENTS_PAGE)
    rows = await asyncio.gather(*(_agent_row(ingress, record) for record, _ in pairs))
    for row, (_, stored) in zip(rows, pairs, strict=True):
        row["labels"] = stored.spec.labels
    here = f"?cursor={quote(cursor)}&" if cursor else "?"
    following = None if last is None else ingress.cursors.seal("ui:agents", "", last)
    return render(
        console,
        session,
        "agents",
        part,
        rows=rows,
        live_url=f"{UI}/events",
        fragment_url=f"{UI}{here}part=live",
        next_url=None if following is None else f"{UI}?cursor={quote(following)}",
        first_url=f"{UI}" if cursor else None,
    )


@router.get("/", include_in_schema=False)
async def slash() -> Response:
    return Response(status_code=308, headers={"location": UI})


def _columns(work_items: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    groups: dict[str, list[dict[str, Any]]] = {state.value: [] for state in BOARD_ORDER}
    for view in work_items:
        groups.setdefault(str(view.get("scheduling_state")), []).append(view)
    return [(state, views) for state, views in groups.items() if views]


async def _usage(ingress: Ingress, agent_id: str) -> tuple[UsageSummary, UsageSummary]:
    """Usage today (UTC) and over the agent's whole life."""
    today, total = await asyncio.gather(
        usage_since(ingress, agent_id, None), usage_since(ingress, agent_id, EPOCH)
    )
    return today, total


@router.get("/agents/{agent_id}", response_class=HTMLResponse)
async def agent_page(
    agent_id: str,
    *,
    ingress: IngressDep,
    console: ConsoleDep,
    session: SessionDep,
    part: PartQuery = None,
    notice: NoticeQuery = None,
) -> HTMLResponse:
    record = await agent_or_404(ingress, agent_id)
    # The resume point is read before the state, so no change can fall between the two.
    after = await console.feed.tail(agent_id)
    detail, listed, (today, total), inbox, delegations, (briefs, _) = await asyncio.gather(
        agent_detail(ingress, record),
        board(ingress, agent_id),
        _usage(ingress, agent_id),
        ingress.reads.inbox(agent_id),
        delegation_tree(ingress, agent_id),
        ingress.reads.briefs(agent_id),
    )
    return render(
        console,
        session,
        "agent",
        part,
        agent=detail,
        columns=_columns(listed["work_items"]),
        total_items=listed["total_matching"],
        shown_items=listed["returned"],
        usage_today=today,
        usage_total=total,
        inbox=inbox,
        delegations_in=delegations[0],
        delegations_out=delegations[1],
        briefs=briefs[::-1][:BRIEFS_SHOWN],
        notice=NOTICES.get(notice or ""),
        spec=detail.spec.model_dump(mode="json"),
        live_url=f"{UI}/events?agent={agent_id}&after={after}",
    )


@router.get("/agents/{agent_id}/history", response_class=HTMLResponse)
async def history_page(
    agent_id: str,
    *,
    ingress: IngressDep,
    console: ConsoleDep,
    session: SessionDep,
    after: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    part: PartQuery = None,
) -> HTMLResponse:
    await agent_or_404(ingress, agent_id)
    tail = await console.feed.tail(agent_id)
    verified = await ingress.reads.verify_history(agent_id)
    start = max(0, verified.count - HISTORY_PAGE) if after is None else after
    events = await ingress.reads.history(agent_id, after=start, limit=HISTORY_PAGE)
    return render(
        console,
        session,
        "history",
        part,
        agent_id=agent_id,
        verified=verified,
        events=events,
        after=start,
        newer=start + HISTORY_PAGE if start + HISTORY_PAGE < verified.count else None,
        older=max(0, start - HISTORY_PAGE) if start > 0 else None,
        page_size=HISTORY_PAGE,
        live_url=f"{UI}/events?agent={agent_id}&after={tail}",
        fragment_url=f"{UI}/agents/{agent_id}/history?"
        + (f"after={start}&" if after is not None else "")
        + "part=live",
    )


@router.get("/agents/{agent_id}/runs", response_class=HTMLResponse)
async def runs_page(
    agent_id: str,
    *,
    ingress: IngressDep,
    console: ConsoleDep,
    session: SessionDep,
    work_item: Annotated[str | None, Query(pattern=WORK_ITEM_ID_PATTERN)] = None,
    part: PartQuery = None,
) -> HTMLResponse:
    """What ran on each WorkItem (the telemetry routes' runs) and, for `work_item`, what broke."""
    await agent_or_404(ingress, agent_id)
    tail = await console.feed.tail(agent_id)
    runs = await ingress.reads.runs(agent_id)
    chosen = next((r for r in runs if r.work_item_id == work_item), None)
    if work_item is not None and chosen is None:
        raise Refused(404, "not found", f"no WorkItem {work_item} in the history of {agent_id}")
    return render(
        console,
        session,
        "runs",
        part,
        agent_id=agent_id,
        runs=runs[:RUNS_SHOWN],
        total=len(runs),
        chosen=chosen,
        live_url=f"{UI}/events?agent={agent_id}&after={tail}",
        fragment_url=f"{UI}/agents/{agent_id}/runs?"
        + (f"work_item={work_item}&" if work_item is not None else "")
        + "part=live",
    )


@router.get("/static/{name}", include_in_schema=False)
async def static(name: str, console: ConsoleDep) -> Response:
    found = console.static.get(name)
    if found is None:
        raise Refused(404, "not found", "no such file")
    body, media_type = found
    return Response(body, media_type=media_type)
