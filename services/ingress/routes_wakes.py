"""`GET /v1/agents/{agent_id}/wakes`: the agent's own ticks for its own loop, without Redis.

Server-Sent Events (`id:` the tick's entry id on `<prefix>:wakes`, `data:` the tick JSON),
resumable with `Last-Event-ID`; or, with `?wait_s=`, a long poll answering `{ticks,
next_cursor}`, resumable with `?cursor=`. Without a resume point the feed starts at the live
tail. At-least-once: a resumed feed sends every tick after its resume point still on the stream.
Only the agent's own token opens it. Nothing durable is kept per watcher (plain XREAD)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from services.ingress.auth import OwnAgentAccess
from services.ingress.console.live import stream_id_key, valid_stream_id
from services.ingress.errors import INVALID_REQUEST, ApiError
from services.ingress.routes_agents import errors
from services.ingress.schemas import WakePage, WakeTick
from services.ingress.wake_feed import WakeEntry, WakeFeed

router = APIRouter(prefix="/v1/agents", tags=["wakes"])
WAIT_S_MAX = 60.0
POLL_LIMIT = 100
"""Ticks one long poll answers at most; the next poll resumes after the last."""
RETRY_MS = 1000
"""How soon an EventSource reconnects after the stream drops (the SSE `retry` field)."""
RESUME_ID_MAX = 41


def get_wake_feed(request: Request) -> WakeFeed:
    feed = request.app.state.wake_feed
    assert isinstance(feed, WakeFeed)
    return feed


def frame(entry: WakeEntry) -> bytes:
    return f"id: {entry.entry_id}\n".encode() + b"data: " + entry.data() + b"\n\n"


async def _frames(feed: WakeFeed, agent_id: str, after: str) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n: connected\n\n".encode()
    async for entry in feed.watch(agent_id, after):
        yield b": idle\n\n" if entry is None else frame(entry)


async def _resume_point(feed: WakeFeed, agent_id: str, given: str | None, name: str) -> str:
    """Where the feed resumes: the given entry id (400 unless it is one this stream could have
    given: a Redis stream id no later than its newest entry), else the live tail."""
    tail = await feed.tail(agent_id)
    if given is None:
        return tail
    resume = valid_stream_id(given)
    if resume is None or stream_id_key(resume) > stream_id_key(tail):
        raise ApiError(
            400,
            INVALID_REQUEST,
            f"{name} is not a tick id of this feed: send the `id` of a tick it sent, "
            "or nothing to start at the live tail",
            details={name: given[:RESUME_ID_MAX]},
        )
    return resume


SSE_OR_JSON: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events (`text/event-stream`: `id:` the tick's entry id, "
        "`data:` the tick JSON); with `wait_s`, the long poll's JSON.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
        "model": WakePage,
    },
}


@router.get(
    "/{agent_id}/wakes",
    response_model=WakePage,
    responses={**SSE_OR_JSON, **errors()},
)
async def wakes(
    record: OwnAgentAccess,
    request: Request,
    wait_s: Annotated[
        float | None,
        Query(
            ge=0,
            le=WAIT_S_MAX,
            description="Long poll: wait up to this many seconds (0..60) for a tick and answer "
            "JSON `{ticks, next_cursor}`. Absent: Server-Sent Events.",
        ),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            max_length=RESUME_ID_MAX,
            description="Long poll: resume after this tick id (a previous `next_cursor`).",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=RESUME_ID_MAX,
            description="Server-Sent Events: resume after this tick id.",
        ),
    ] = None,
) -> Any:
    """The agent's own ticks (agents with `loop: external`), for its own loop."""
    feed = get_wake_feed(request)
    agent_id = record.state.agent_id
    if wait_s is None:
        if cursor is not None:
            raise ApiError(400, INVALID_REQUEST, "`cursor` resumes a long poll (with `wait_s`); "
                           "a Server-Sent Events stream resumes with `Last-Event-ID`")  # fmt: skip
        after = await _resume_point(feed, agent_id, last_event_id, "Last-Event-ID")
        return StreamingResponse(
            _frames(feed, agent_id, after),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
    given = cursor if cursor is not None else last_event_id
    after = await _resume_point(feed, agent_id, given, "cursor")
    found = await feed.poll(agent_id, after, wait_s, POLL_LIMIT)
    return WakePage(
        ticks=[WakeTick(id=e.entry_id, **e.tick()) for e in found],
        next_cursor=found[-1].entry_id if found else after,
    )
