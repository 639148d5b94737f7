"""stdio MCP servers as supervised child processes of the executor: one child per identical
server entry (same argv and environment), shared by every agent that names it, started on
first use, watched while it runs, and started again with a backoff when it exits."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import structlog
from mcp.client import Client, Transport
from mcp.client.stdio import StdioServerParameters, stdio_client

log = structlog.get_logger("longrun.executor.mcp")

RESTART_DELAY_S = 0.5
"""The first restart's wait; each restart that follows a short life doubles it."""
RESTART_DELAY_MAX_S = 30.0
HEALTHY_S = 60.0
"""A child that ran this long before exiting starts the backoff over: it was not crash-looping."""
GIVE_UP_AFTER = 8
"""Restarts in a row that never became ready before the watcher stops; the next use starts a
fresh child, so a server that is gone for good costs nothing while nobody calls it."""


def restart_delay(failures: int) -> float:
    """The wait before the restart that follows `failures` short lives in a row (>= 1)."""
    return min(RESTART_DELAY_S * 2.0 ** max(failures - 1, 0), RESTART_DELAY_MAX_S)


class _Watched:
    """The stdio transport's read stream, noting its end: the server's stdout closed, which is
    how a session learns that the process exited (the SDK's session would only fail the next
    request)."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self.inner = inner
        self.ended = ended

    async def receive(self) -> Any:
        try:
            return await self.inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self.ended.set()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # e.g. the sender's context the dispatcher may read

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def watched_stdio(params: StdioServerParameters, ended: asyncio.Event) -> Transport:
    """The SDK's stdio transport, with `ended` set once the server's output has ended."""

    @asynccontextmanager
    async def streams() -> AsyncIterator[tuple[Any, Any]]:
        async with stdio_client(params) as (read, write):
            yield _Watched(read, ended), write

    return streams()


class _Child:
    """One stdio server entry: a watcher task keeps a session open, and when the process exits
    starts another after a backoff; `ready` is the current session (a new future per start)."""

    def __init__(self, params: StdioServerParameters, children: Children) -> None:
        self.params = params
        self.children = children
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self._watch(), name=f"mcp-stdio:{params.command}")

    async def _watch(self) -> None:
        failures = 0
        while not self.stop.is_set():
            began = time.monotonic()
            served = await self._serve_once()
            if self.ready.done():  # callers from now on wait for the next start, not the dead one
                self.ready = asyncio.get_running_loop().create_future()
            if self.stop.is_set():
                return
            failures = 1 if served and time.monotonic() - began >= HEALTHY_S else failures + 1
            if not served and failures > GIVE_UP_AFTER:
                log.warning("mcp_child_given_up", command=self.params.command, starts=failures)
                self.ready.set_exception(RuntimeError("the stdio MCP server does not start"))
                self.ready.exception()
                return
            delay = restart_delay(failures)
            log.warning("mcp_child_restarting", command=self.params.command, after_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=delay)

    async def _serve_once(self) -> bool:
        """Start the process and hold its session until it exits or we stop; whether it ever
        became ready. The SDK's task groups must be entered and left by this one task."""
        ended = asyncio.Event()
        self.children.started += 1
        try:
            async with Client(watched_stdio(self.params, ended), cache=None) as client:
                self.ready.set_result(client)
                stopping = asyncio.ensure_future(self.stop.wait())
                exiting = asyncio.ensure_future(ended.wait())
                await asyncio.wait({stopping, exiting}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                exiting.cancel()
            if not self.stop.is_set():
                log.warning("mcp_child_exited", command=self.params.command)
            return True
        except Exception as error:
            served = self.ready.done() and not self.ready.cancelled()
            if not self.ready.done():
                self.ready.set_exception(error)
                self.ready.exception()  # retrieved: a start nobody waited for is only logged
            log.warning("mcp_child_failed", command=self.params.command, error=str(error)[:300])
            return served

    @property
    def alive(self) -> bool:
        return not self.task.done()


class Children:
    """The executor's stdio servers by identity; each is watched and restarted when it exits."""

    def __init__(self) -> None:
        self._children: dict[str, _Child] = {}
        self.started = 0
        """Processes started (first starts and restarts)."""

    async def client(self, params: StdioServerParameters) -> Client:
        key = params.model_dump_json()
        child = self._children.get(key)
        if child is None or not child.alive:
            child = _Child(params, self)
            self._children[key] = child
        return await asyncio.shield(child.ready)

    async def aclose(self) -> None:
        children, self._children = list(self._children.values()), {}
        for child in children:
            child.stop.set()
        for child in children:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(child.task, timeout=5)
