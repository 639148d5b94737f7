"""The console's WorkItem page: one WorkItem's card with its process notes and the recent
process trace its next turn starts from, live like the other pages (`?part=live`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from services.ingress.console.pages import PartQuery, render
from services.ingress.console.web import UI, ConsoleDep, Refused, SessionDep, agent_or_404
from services.ingress.deps import IngressDep
from services.ingress.queries import agent_detail, work_item_memory
from shared.domain.errors import DomainError

router = APIRouter(prefix=UI, include_in_schema=False)

ENTRY_CHARS = 4000
"""Characters of one recorded entry the page shows (the rest is counted, not shown)."""


@router.get("/agents/{agent_id}/work-items/{work_item_id}", response_class=HTMLResponse)
async def work_item_page(
    agent_id: str,
    work_item_id: str,
    *,
    ingress: IngressDep,
    console: ConsoleDep,
    session: SessionDep,
    part: PartQuery = None,
) -> HTMLResponse:
    record = await agent_or_404(ingress, agent_id)
    after = await console.feed.tail(agent_id)
    try:
        view, trace = await work_item_memory(ingress, agent_id, work_item_id)
    except (ValidationError, DomainError):
        message = f"{agent_id} has no WorkItem {work_item_id!r}"
        raise Refused(404, "no such WorkItem", message) from None
    return render(
        console,
        session,
        "work",
        part,
        agent=await agent_detail(ingress, record),
        wi=view,
        notes=view.get("process_notes") or [],
        trace=trace,
        entry_chars=ENTRY_CHARS,
        live_url=f"{UI}/events?agent={agent_id}&after={after}",
        fragment_url=f"{UI}/agents/{agent_id}/work-items/{work_item_id}?part=live",
    )
