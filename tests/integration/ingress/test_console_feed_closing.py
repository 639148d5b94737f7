"""The console's live feed on a stopping ingress, against a real Redis: the stop signal ends
every open stream, and a page that reconnects while the server drains gets a stream that ends
at once instead of a new endless one that would hold the shutdown."""

from __future__ import annotations

import asyncio

from services.ingress.console.live import EventFeed, FeedEntry
from shared.store.client import AnyRedis
from shared.wire.names import Names


async def _drain(feed: EventFeed, agent_id: str) -> list[FeedEntry | None]:
    return [entry async for entry in feed.watch(agent_id, None)]


async def test_a_stop_signal_ends_open_streams_and_refuses_new_ones(
    redis: AnyRedis, names: Names
) -> None:
    feed = EventFeed(redis, names)
    watching = asyncio.create_task(_drain(feed, "ag-open"))
    async with asyncio.timeout(10):
        while not feed._readers:  # noqa: ASYNC110 - the feed offers nothing to await
            await asyncio.sleep(0.01)
    feed.close_soon()
    async with asyncio.timeout(10):
        assert await watching == []
        # Reconnecting after the signal, as a browser retries within a second.
        assert await _drain(feed, "ag-late") == []
    assert not feed._readers, "a reader was started for a stream that must not be served"
    await feed.stop()


async def test_a_stop_signal_before_a_new_reader_first_ran_still_ends_its_watchers(
    redis: AnyRedis, names: Names
) -> None:
    feed = EventFeed(redis, names)
    watching = asyncio.create_task(_drain(feed, "ag-early"))
    await asyncio.sleep(0)  # the watcher starts its partition's reader and waits for it
    assert feed._readers
    feed._close_all()  # what close_soon schedules, landing before the reader's task first ran
    async with asyncio.timeout(10):
        assert await watching == []
    await feed.stop()
