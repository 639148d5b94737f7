"""File tool calls from an event loop, run off it: each call in a worker thread, so no argument
an agent passes (a huge tree, a large file, a pattern that backtracks for ever) can stall other
turns, lease renewals or another agent's calls. SearchFiles runs on a few threads of its own,
one search at a time per agent, and answers `pattern_too_slow` once its time limit
(LONGRUN_SEARCH_TIMEOUT_MS, counted from the call) has passed."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shared.domain.errors import DomainError
from shared.domain.tools import ToolEnvelope
from shared.file_search import SEARCH_TIMEOUT_MS, SearchFilesInput, too_slow
from shared.file_tools import FileToolName, parse_file_tool_input, run_file_tool

SEARCH_THREADS = 4
"""Searches that run at once in one process; a search past its limit stops within one line."""


class FileTools:
    """Runs the six file tools in one agent home root for callers on an event loop."""

    def __init__(
        self,
        agent_home: Path,
        *,
        search_timeout_ms: int = SEARCH_TIMEOUT_MS,
        search_threads: int = SEARCH_THREADS,
    ) -> None:
        self.agent_home = agent_home
        self.search_timeout_ms = search_timeout_ms
        self._searches = ThreadPoolExecutor(search_threads, thread_name_prefix="search")
        self._searching: dict[str, asyncio.Future[ToolEnvelope]] = {}
        """Each agent's search still running in a thread (even past its caller's limit)."""

    async def run(self, agent_id: str, name: FileToolName, raw: object) -> ToolEnvelope:
        """The call's envelope; the blocking work happens in a worker thread."""
        if name == FileToolName.SEARCH_FILES:
            return await self._search(agent_id, raw)
        return await asyncio.to_thread(run_file_tool, self.agent_home, agent_id, name, raw)

    async def _search(self, agent_id: str, raw: object) -> ToolEnvelope:
        """SearchFiles within its limit: after the agent's previous search has ended (its
        thread, not only its answer), on the search threads, `pattern_too_slow` past the
        limit. The thread stops by itself: between lines at the same deadline, inside one
        line's match when the engine's own limit (process CPU time) runs out."""
        name = FileToolName.SEARCH_FILES
        try:
            args = parse_file_tool_input(name, raw)
        except DomainError as refused:
            return ToolEnvelope.failure(name.value, refused)
        assert isinstance(args, SearchFilesInput)
        limit_s = self.search_timeout_ms / 1000
        deadline = time.monotonic() + limit_s
        started = False
        try:
            async with asyncio.timeout(limit_s):
                while (previous := self._searching.get(agent_id)) is not None:
                    await asyncio.wait([previous])
                future, started = self._start(agent_id, raw, deadline), True
                return await asyncio.shield(future)
        except TimeoutError:
            slow = too_slow(args, self.search_timeout_ms, waited=not started)
            return ToolEnvelope.failure(name.value, slow)

    def _start(self, agent_id: str, raw: object, deadline: float) -> asyncio.Future[ToolEnvelope]:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._searches,
            lambda: run_file_tool(
                self.agent_home,
                agent_id,
                FileToolName.SEARCH_FILES,
                raw,
                search_timeout_ms=self.search_timeout_ms,
                deadline=deadline,
            ),
        )
        self._searching[agent_id] = future

        def ended(done: asyncio.Future[ToolEnvelope]) -> None:
            if self._searching.get(agent_id) is done:
                del self._searching[agent_id]
            if not done.cancelled():
                done.exception()  # seen: a caller past its limit no longer awaits it

        future.add_done_callback(ended)
        return future

    def close(self) -> None:
        """Stop taking searches; running ones end at their deadline."""
        self._searches.shutdown(wait=False, cancel_futures=True)
