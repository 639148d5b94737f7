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
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

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


class Entry(Protocol):
    """What a feed fans out: an entry of a stream, for one agent."""

    @property
    def entry_id(self) -> str: ...

    @property
    def agent_id(self) -> str: ...


E = TypeVar("E", bound=Entry)
Parse = Callable[[bytes | str, dict[Any, Any]], E | None]


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
class Watcher(Generic[E]):
    """One open page: the agent it follows (None: every agent) and its queue of entries."""

    agent_id: str | None
    queue: asyncio.Queue[E | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_MAX))
    overflowed: bool = False

    def offer(self, entry: E) -> None:
        if self.overflowed or (self.agent_id is not None and entry.agent_id != self.agent_id):
            return
        try:
            self.queue.put_nowait(entry)
        except asyncio.QueueFull:
            self.overflowed = True
            log.info("console_watcher_overflow", agent_id=self.agent_id)


class WatcherSet(Generic[E]):
    """A reader's watchers, indexed by the agent each follows (None: every agent), so an entry
    is offered to its agent's watchers only: the cost per entry does not grow with the number
    of watchers of other agents (100 wake feeds on one stream)."""

    def __init__(self) -> None:
        self._by_agent: dict[str | None, set[Watcher[E]]] = {}
        self._count = 0

    def add(self, watcher: Watcher[E]) -> None:
        group = self._by_agent.setdefault(watcher.agent_id, set())
        if watcher not in group:
            group.add(watcher)
            self._count += 1

    def discard(self, watcher: Watcher[E]) -> None:
        group = self._by_agent.get(watcher.agent_id)
        if group is not None and watcher in group:
            group.discard(watcher)
            self._count -= 1
            if not group:
                del self._by_agent[watcher.agent_id]

    def of(self, agent_id: str) -> tuple[Watcher[E], ...]:
        """The watchers an entry of `agent_id` goes to."""
        return (*self._by_agent.get(agent_id, ()), *self._by_agent.get(None, ()))

    def clear(self) -> None:
        self._by_agent.clear()
        self._count = 0

    def __iter__(self) -> Iterator[Watcher[E]]:
        return iter([w for group in self._by_agent.values() for w in group])

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0


class PartitionReader(Generic[E]):
    """The one XREAD loop of a stream in this process, alive while it has watchers."""

    def __init__(self, redis: AnyRedis, stream: str, parse: Parse[E]) -> None:
        self.redis = redis
        self.stream = stream
        self.parse = parse
        self.watchers: WatcherSet[E] = WatcherSet()
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
                    self._fan_out(self.parse(entry_id, fields))

    def _fan_out(self, entry: E | None) -> None:
        if entry is None:
            return
        for watcher in self.watchers.of(entry.agent_id):
            watcher.offer(entry)

    def close_all(self) -> None:
        for watcher in self.watchers:
            with contextlib.suppress(asyncio.QueueFull):
                watcher.queue.put_nowait(None)
        self.watchers.clear()


class LiveFeed(ABC, Generic[E]):
    """The readers of this process over a set of streams (each entry names its agent), started
    on demand and stopped with the app. Subclasses say which streams an agent's entries are on
    and how an entry is read."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        self.redis = redis
        self.names = names
        self._readers: dict[int, PartitionReader[E]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        """Set by the first stop signal: a page reconnecting on a kept-alive connection while
        the server drains would otherwise start a new endless stream and hold the shutdown."""

    @abstractmethod
    def stream(self, key: int) -> str:
        raise NotImplementedError

    @abstractmethod
    def key_of(self, agent_id: str) -> int:
        raise NotImplementedError

    @abstractmethod
    def all_keys(self) -> list[int]:
        raise NotImplementedError

    @abstractmethod
    def parse(self, entry_id: bytes | str, fields: dict[Any, Any]) -> E | None:
        raise NotImplementedError

    async def tail(self, agent_id: str) -> str:
        """The newest entry id of the agent's stream: where a page rendered now resumes from
        ("0-0" for an empty stream)."""
        newest: Any = await self.redis.xrevrange(self.stream(self.key_of(agent_id)), count=1)
        return _text(newest[0][0]) if newest else "0-0"

    async def _join(self, partition: int, watcher: Watcher[E]) -> PartitionReader[E]:
        self._loop = asyncio.get_running_loop()
        reader = self._readers.get(partition)
        if reader is None or reader.task is None or reader.task.done():
            reader = PartitionReader(self.redis, self.stream(partition), self.parse)
            self._readers[partition] = reader
            reader.watchers.add(watcher)
            reader.task = asyncio.create_task(self._guarded(partition, reader))
        else:
            reader.watchers.add(watcher)
        await reader.started.wait()
        return reader

    async def _guarded(self, partition: int, reader: PartitionReader[E]) -> None:
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

    def _leave(self, partitions: list[int], watcher: Watcher[E]) -> None:
        for partition in partitions:
            reader = self._readers.get(partition)
            if reader is not None:
                reader.watchers.discard(watcher)

    async def _catch_up(self, agent_id: str, after: str, limit: int | None = None) -> list[E]:
        """The agent's entries after `after` (exclusive), oldest first, at most `limit`."""
        stream = self.stream(self.key_of(agent_id))
        found: list[E] = []
        start = f"({after}"
        while True:
            chunk: Any = await self.redis.xrange(stream, min=start, max="+", count=READ_COUNT)
            for entry_id, fields in chunk:
                entry = self.parse(entry_id, fields)
                if entry is not None and entry.agent_id == agent_id:
                    found.append(entry)
                    if limit is not None and len(found) >= limit:
                        return found
            if len(chunk) < READ_COUNT:
                return found
            start = f"({_text(chunk[-1][0])}"

    async def watch(self, agent_id: str | None, after: str | None) -> AsyncIterator[E | None]:
        """Entries for one agent (from `after`, exclusive) or for every agent (from now), and
        None after IDLE_S without any, until the watcher falls too far behind or the feed
        stops."""
        if self._closing:
            return
        watcher: Watcher[E] = Watcher(agent_id)
        entry: E | None
        partitions = [self.key_of(agent_id)] if agent_id else self.all_keys()
        try:
            for partition in partitions:
                await self._join(partition, watcher)
            if self._closing:
                return
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

    async def poll(self, agent_id: str, after: str, wait_s: float, limit: int) -> list[E]:
        """At most `limit` of the agent's entries after `after` (exclusive): those already on
        the stream at once, else the first to arrive within `wait_s` and any right behind it;
        [] when none came or the feed stops."""
        if self._closing:
            return []
        watcher: Watcher[E] = Watcher(agent_id)
        key = self.key_of(agent_id)
        try:
            await self._join(key, watcher)
            if self._closing:
                return []
            found = await self._catch_up(agent_id, after, limit)
            if found or wait_s <= 0:
                return found
            sent = stream_id_key(after)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    while not found:
                        entry = await watcher.queue.get()
                        if entry is None:
                            return []
                        if stream_id_key(entry.entry_id) > sent:
                            found.append(entry)
            while found and len(found) < limit and not watcher.queue.empty():
                entry = watcher.queue.get_nowait()
                if entry is not None and stream_id_key(entry.entry_id) > sent:
                    found.append(entry)
            return found
        finally:
            self._leave([key], watcher)

    def close_soon(self) -> None:
        """End every watcher's stream (from a signal handler: thread-safe), so a server that is
        shutting down is not held open by pages that would otherwise stream forever; the pages
        reconnect to whichever ingress answers next and resume by id.

        The flag is set here too, not only on the loop: a stream opened just before the signal,
        whose first watcher had not yet reached `_join` (no loop known, or a reader not yet
        registered), sees it once joined and ends instead of streaming for ever."""
        self._closing = True
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
        # Closed readers leave the feed now, not when their cancelled tasks next run: after the
        # stop signal the feed holds no reader, whatever the loop has run since.
        self._readers.clear()

    async def stop(self) -> None:
        readers = list(self._readers.values())
        self._close_all()
        for reader in readers:
            if reader.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await reader.task


class EventFeed(LiveFeed[FeedEntry]):
    """The console's feed: the partitions' event streams, one reader per partition."""

    def stream(self, key: int) -> str:
        return self.names.events(key)

    def key_of(self, agent_id: str) -> int:
        return self.names.partition(agent_id)

    def all_keys(self) -> list[int]:
        return list(range(self.names.partitions))

    def parse(self, entry_id: bytes | str, fields: dict[Any, Any]) -> FeedEntry | None:
        return parse_entry(entry_id, fields)
