"""stdio MCP servers as supervised child processes of the executor: one child per identical
server entry (same argv and environment), shared by every agent that names it, started on
first use and started again on the next use after it exits."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

log = structlog.get_logger("longrun.executor.mcp")


class _Child:
    """One running stdio server: a task holds its client session open until told to stop."""

    def __init__(self, params: StdioServerParameters) -> None:
        self.params = params
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self._hold(), name=f"mcp-stdio:{params.command}")

    async def _hold(self) -> None:
        # The SDK's session lives in task groups that must be entered and left by one task.
        try:
            async with Client(self.params, cache=None) as client:
                self.ready.set_result(client)
                await self.stop.wait()
        except Exception as error:
            if not self.ready.done():
                self.ready.set_exception(error)
            log.warning("mcp_child_exited", command=self.params.command, error=str(error)[:300])

    @property
    def alive(self) -> bool:
        return not self.task.done()


class Children:
    """The executor's stdio servers by identity; a dead one is replaced when next needed."""

    def __init__(self) -> None:
        self._children: dict[str, _Child] = {}
        self.started = 0

    async def client(self, params: StdioServerParameters) -> Client:
        key = params.model_dump_json()
        child = self._children.get(key)
        if child is None or not child.alive:
            child = _Child(params)
            self._children[key] = child
            self.started += 1
        try:
            return await asyncio.shield(child.ready)
        except Exception:
            self._children.pop(key, None)
            raise

    def forget_failed(self) -> None:
        """Drop children whose process has exited, so the next call starts a fresh one."""
        for key, child in list(self._children.items()):
            if not child.alive:
                del self._children[key]

    async def aclose(self) -> None:
        children, self._children = list(self._children.values()), {}
        for child in children:
            child.stop.set()
        for child in children:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(child.task, timeout=5)
