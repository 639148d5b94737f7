"""The console's live feed: reads the partitions' event streams with plain XREAD (no consumer
group, so a watcher leaves nothing durable in Redis) and fans each entry out to the open pages.

One reader task per partition that has a watcher, shared by every watcher of that partition in
this process, so 100 open pages cost one blocking XREAD per partition, not 100. A watcher joins
the reader first, then catches up from its resume point with XRANGE, and drops what it has
already sent: nothing between the resume point and the live tail is lost or sent twice. A
watcher too slow to keep up is disconnected; its browser reconnects with `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from shared.store.client import AnyRedis
from shared.wire.names import Names

log = structlog.get_logger("longrun.ingress.console")

READ_BLOCK_MS = 1000
"""How long one XREAD waits for entries; a reader with no watchers left stops after it."""
READ_COUNT = 500
QUEUE_MAX = 2000
"""Entries a watcher may fall behind by before it is disconnected (and resumes by id)."""
IDLE_S = 15.0
"""A watcher with nothing to send this long is given None: the page gets a keep-alive comment,
and a browser that went away is noticed."""


def stream_id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def valid_stream_id(value: str | None) -> str | None:
    """`<ms>-<seq>` as Redis writes it, or None for anything else (a forged Last-Event-ID)."""
    if not value or len(value) > 41:
        return None
    ms, dash, seq = value.partition("-")
    return value if ms.isdigit() and dash and seq.isdigit() else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """One entry of a partition's event stream: the history events one ledger command appended."""

    entry_id: str
    agent_id: str
    events: tuple[dict[str, Any], ...]

    def summary(self) -> bytes:
        """What a page is sent: the events without their data (pages re-read what they show)."""
        events = [
            {
                "seq": e.get("seq"),
                "type": e.get("type"),
                "at": e.get("at"),
                "work_item_id": e.get("work_item_id"),
            }
            for e in self.events
        ]
        return orjson.dumps({"agent_id": self.agent_id, "events": events})


def parse_entry(entry_id: bytes | str, fields: dict[Any, Any]) -> FeedEntry | None:
    agent = fields.get(b"k", fields.get("k"))
    raw = fields.get(b"m", fields.get("m"))
    if agent is None or raw is None:
        return None
    try:
        body = orjson.loads(raw).get("body") or {}
        events = tuple(e for e in body.get("events") or () if isinstance(e, dict))
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return FeedEntry(_text(entry_id), _text(agent), events)


@dataclass(eq=False)
class Watcher:
    """One open page: the agent it follows (None: every agent) and its queue of entries."""

    agent_id: str | None
    queue: asyncio.Queue[FeedEntry | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_MAX))
    overflowed: bool = False

    def offer(self, entry: FeedEntry) -> None:
        if self.overflowed or (self.agent_id is not None and entry.agent_id != self.agent_id):
            return
        try:
            self.queue.put_nowait(entry)
        except asyncio.QueueFull:
            self.overflowed = True
            log.info("console_watcher_overflow", agent_id=self.agent_id)


class PartitionReader:
    """The one XREAD loop of a partition in this process, alive while it has watchers."""

    def __init__(self, redis: AnyRedis, stream: str) -> None:
        self.redis = redis
        self.stream = stream
        self.watchers: set[Watcher] = set()
        self.started = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.position = "0-0"

    async def run(self) -> None:
        try:
            newest: Any = await self.redis.xrevrange(self.stream, count=1)
            self.position = _text(newest[0][0]) if newest else "0-0"
        finally:
            self.started.set()
        while self.watchers:
            answer: Any = await self.redis.xread(
                {self.stream: self.position}, count=READ_COUNT, block=READ_BLOCK_MS
            )
            for _stream, entries in answer or ():
                for entry_id, fields in entries:
                    self.position = _text(entry_id)
                    self._fan_out(parse_entry(entry_id, fields))

    def _fan_out(self, entry: FeedEntry | None) -> None:
        if entry is None:
            return
        for watcher in tuple(self.watchers):
            watcher.offer(entry)

    def close_all(self) -> None:
        for watcher in self.watchers:
            with contextlib.suppress(asyncio.QueueFull):
                watcher.queue.put_nowait(None)
        self.watchers.clear()


class EventFeed:
    """The readers of this process, started on demand and stopped with the app."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        self.redis = redis
        self.names = names
        self._readers: dict[int, PartitionReader] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        """Set by the first stop signal: a page reconnecting on a kept-alive connection while
        the server drains would otherwise start a new endless stream and hold the shutdown."""

    async def tail(self, agent_id: str) -> str:
        """The newest entry id of the agent's partition stream: where a page rendered now
        resumes from ("0-0" for an empty stream)."""
        stream = self.names.events(self.names.partition(agent_id))
        newest: Any = await self.redis.xrevrange(stream, count=1)
        return _text(newest[0][0]) if newest else "0-0"

    async def _join(self, partition: int, watcher: Watcher) -> PartitionReader:
        self._loop = asyncio.get_running_loop()
        reader = self._readers.get(partition)
        if reader is None or reader.task is None or reader.task.done():
            reader = PartitionReader(self.redis, self.names.events(partition))
            self._readers[partition] = reader
            reader.watchers.add(watcher)
            reader.task = asyncio.create_task(self._guarded(partition, reader))
        else:
            reader.watchers.add(watcher)
        await reader.started.wait()
        return reader

    async def _guarded(self, partition: int, reader: PartitionReader) -> None:
        try:
            await reader.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Redis gone: the pages reconnect and resume by id
            log.warning("console_reader_failed", partition=partition, error=repr(exc))
        finally:
            reader.close_all()
            if self._readers.get(partition) is reader:
                del self._readers[partition]

    def _leave(self, partitions: list[int], watcher: Watcher) -> None:
        for partition in partitions:
            reader = self._readers.get(partition)
            if reader is not None:
                reader.watchers.discard(watcher)

    async def _catch_up(self, agent_id: str, after: str) -> list[FeedEntry]:
        stream = self.names.events(self.names.partition(agent_id))
        found: list[FeedEntry] = []
        start = f"({after}"
        while True:
            chunk: Any = await self.redis.xrange(stream, min=start, max="+", count=READ_COUNT)
            for entry_id, fields in chunk:
                entry = parse_entry(entry_id, fields)
                if entry is not None and entry.agent_id == agent_id:
                    found.append(entry)
            if len(chunk) < READ_COUNT:
                return found
            start = f"({_text(chunk[-1][0])}"

    async def watch(
        self, agent_id: str | None, after: str | None
    ) -> AsyncIterator[FeedEntry | None]:
        """Entries for one agent (from `after`, exclusive) or for every agent (from now), and
        None after IDLE_S without any, until the watcher falls too far behind or the feed
        stops."""
        if self._closing:
            return
        watcher = Watcher(agent_id)
        entry: FeedEntry | None
        partitions = (
            [self.names.partition(agent_id)] if agent_id else list(range(self.names.partitions))
        )
        try:
            for partition in partitions:
                await self._join(partition, watcher)
            sent = stream_id_key(after) if after is not None else (0, -1)
            if agent_id is not None and after is not None:
                for entry in await self._catch_up(agent_id, after):
                    sent = stream_id_key(entry.entry_id)
                    yield entry
            while not watcher.overflowed:
                try:
                    entry = await asyncio.wait_for(watcher.queue.get(), IDLE_S)
                except TimeoutError:
                    yield None
                    continue
                if entry is None:
                    return
                if agent_id is None or stream_id_key(entry.entry_id) > sent:
                    yield entry
        finally:
            self._leave(partitions, watcher)

    def close_soon(self) -> None:
        """End every watcher's stream (from a signal handler: thread-safe), so a server that is
        shutting down is not held open by pages that would otherwise stream forever; the pages
        reconnect to whichever ingress answers next and resume by id."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._close_all)

    def _close_all(self) -> None:
        self._closing = True
        for reader in list(self._readers.values()):
            # Ended here as well as by the task's own cleanup: a task cancelled before it first
            # ran never runs its body (nor its `finally`), and its watchers would wait for its
            # start for ever (seen on a loaded machine).
            reader.started.set()
            reader.close_all()
            if reader.task is not None:
                reader.task.cancel()

    async def stop(self) -> None:
        readers = list(self._readers.values())
        self._close_all()
        for reader in readers:
            if reader.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await reader.task
