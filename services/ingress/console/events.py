"""`/ui/events`: Server-Sent Events for open console pages, one `ledger` event per entry of the
agent's partition event stream (its id is the stream entry id, so a reconnecting browser's
`Last-Event-ID` resumes exactly after the last entry it got), or for every agent without
`?agent=` (no ids: that page simply reloads its live part when it reconnects)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from services.ingress.console.live import EventFeed, FeedEntry, valid_stream_id
from services.ingress.console.web import UI, ConsoleDep, Refused, SessionDep, agent_or_404
from services.ingress.deps import IngressDep

router = APIRouter(prefix=UI, include_in_schema=False)
RETRY_MS = 1000
"""How soon a browser reconnects after the stream drops (the SSE `retry` field)."""


def frame(entry: FeedEntry, with_id: bool) -> bytes:
    head = f"id: {entry.entry_id}\n".encode() if with_id else b""
    return head + b"event: ledger\ndata: " + entry.summary() + b"\n\n"


async def _frames(feed: EventFeed, agent_id: str | None, after: str | None) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n: connected\n\n".encode()
    async for entry in feed.watch(agent_id, after):
        yield b": idle\n\n" if entry is None else frame(entry, agent_id is not None)


@router.get("/events")
async def events(
    ingress: IngressDep,
    console: ConsoleDep,
    _session: SessionDep,
    agent: Annotated[str | None, Query(max_length=128)] = None,
    after: Annotated[str | None, Query(max_length=41)] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """The browser's own `Last-Event-ID` (a reconnect) wins over `after` (the page's render
    point); with neither, the stream starts now."""
    if agent is not None:
        await agent_or_404(ingress, agent)
    resume = valid_stream_id(last_event_id) or valid_stream_id(after)
    if (after or last_event_id) and resume is None:
        raise Refused(400, "bad resume point", "Last-Event-ID and after are stream ids (ms-seq)")
    return StreamingResponse(
        _frames(console.feed, agent, resume if agent is not None else None),
        media_type="text/event-stream",
        headers={"x-accel-buffering": "no"},
    )
