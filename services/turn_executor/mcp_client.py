"""The executor as an MCP client (the official `mcp` SDK): it lists the tools of an agent's MCP
servers (cached per spec version and server), calls them with longrun's call id in `_meta`,
keeps stdio servers as child processes shared by identical entries, and turns every failure into
an answer the turn carries on with: a server that cannot be reached is reported, never fatal."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import httpx2  # the HTTP client the mcp SDK is built on (installed with it)
import structlog
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, RequestParamsMeta, Tool

from services.turn_executor.mcp_children import Children
from shared.domain.specs import McpServer
from shared.domain.tools import ToolEnvelope
from shared.metrics import Metrics

log = structlog.get_logger("longrun.executor.mcp")

CALL_ID_META = "longrun/call_id"
SEPARATOR = "__"
Outcome = Literal["ok", "error", "timeout"]
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
"""The SDK's own defaults for its HTTP transport: a server may hold a response stream open long
(each call is bounded by the server entry's `timeout_s` anyway); redirects are not followed."""


class MissingSecret(Exception):
    """A server entry names an environment variable the executor does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(f"missing_secret {name}")
        self.name = name


def resolved(mapping: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """`{key: value of the named variable}`; raises MissingSecret for the first one missing."""
    out = {}
    for key, env_name in sorted(mapping.items()):
        value = environ.get(env_name)
        if value is None:
            raise MissingSecret(env_name)
        out[key] = value
    return out


@dataclass(frozen=True)
class McpTool:
    """One server tool as the model sees it: `<server>__<tool>` with the server's schema."""

    server: McpServer
    tool: str
    spec: dict[str, Any]

    @property
    def exposed(self) -> str:
        return f"{self.server.name}{SEPARATOR}{self.tool}"


@dataclass
class McpToolset:
    """The MCP tools one turn may call, and the servers it could not reach (with why)."""

    tools: dict[str, McpTool] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec for tool in self.tools.values()]

    def note(self) -> str | None:
        """What the model is told about servers whose tools are missing this turn."""
        if not self.unavailable:
            return None
        lines = [f"- {name}: {why}" for name, why in sorted(self.unavailable.items())]
        return "These MCP servers are unavailable this turn; their tools are missing:\n" + (
            "\n".join(lines)
        )


@dataclass(frozen=True)
class McpAnswer:
    """One call's result as the model gets it, and what the ledger records about it."""

    outcome: Outcome
    text: str
    result_chars: int
    truncated: bool


def function_spec(server: McpServer, tool: Tool) -> dict[str, Any]:
    schema = dict(tool.input_schema or {"type": "object", "properties": {}})
    return {
        "type": "function",
        "function": {
            "name": f"{server.name}{SEPARATOR}{tool.name}",
            "description": tool.description or "",
            "parameters": schema,
        },
    }


def bounded(text: str, limit: int) -> tuple[str, int, bool]:
    """The text cut to `limit` characters with a note saying so; its length before the cut."""
    if len(text) <= limit:
        return text, len(text), False
    note = f"\n[truncated: the result has {len(text)} characters; only the first {limit} shown]"
    return text[:limit] + note, len(text), True


def result_text(result: CallToolResult) -> str:
    parts = []
    for content in result.content:
        text = getattr(content, "text", None)
        parts.append(text if isinstance(text, str) else f"[{content.type} content omitted]")
    return "\n".join(parts)


class McpClients:
    """Per executor process: the tool-list cache, the stdio children, the metrics."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        ttl_s: float,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.ttl_s = ttl_s
        self.environ = os.environ if environ is None else environ
        self.clock = clock
        self.children = Children()
        self._lists: dict[tuple[str, int, str], tuple[float, list[Tool]]] = {}
        self._http: dict[tuple[tuple[str, str], ...], httpx2.AsyncClient] = {}
        self.listings = 0
        """Tool lists fetched from servers (not served from the cache)."""

    @asynccontextmanager
    async def _session(self, server: McpServer) -> AsyncIterator[Client]:
        if server.transport == "stdio":
            argv = server.command or ("",)
            env = resolved(server.env_from_env, self.environ)
            params = StdioServerParameters(command=argv[0], args=list(argv[1:]), env=env)
            yield await self.children.client(params)
            return
        http = self._http_client(resolved(server.headers_from_env, self.environ))
        async with Client(
            streamable_http_client(server.url or "", http_client=http), cache=None
        ) as c:
            yield c

    def _http_client(self, headers: dict[str, str]) -> httpx2.AsyncClient:
        """One HTTP client per set of headers, kept: its connection pool outlives each call's
        MCP session, and building a client (its TLS context) costs tens of milliseconds."""
        key = tuple(sorted(headers.items()))
        client = self._http.get(key)
        if client is None:
            client = self._http[key] = httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT)
        return client

    async def _list(self, server: McpServer) -> list[Tool]:
        tools: list[Tool] = []
        async with asyncio.timeout(server.timeout_s), self._session(server) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    break
        self.listings += 1
        return tools

    async def _tools_of(self, agent_id: str, version: int, server: McpServer) -> list[Tool]:
        key = (agent_id, version, server.name)
        cached = self._lists.get(key)
        if cached is not None and self.clock() - cached[0] < self.ttl_s:
            return cached[1]
        tools = await self._list(server)
        self._lists[key] = (self.clock(), tools)
        return tools

    async def toolset(
        self, agent_id: str, version: int, servers: tuple[McpServer, ...]
    ) -> McpToolset:
        """The tools of every server, listed concurrently; a failing server is named instead."""
        answers = await asyncio.gather(
            *(self._tools_of(agent_id, version, server) for server in servers),
            return_exceptions=True,
        )
        toolset = McpToolset()
        for server, answer in zip(servers, answers, strict=True):
            if isinstance(answer, BaseException):
                toolset.unavailable[server.name] = self._failed(server, answer, "list")
                continue
            allowed = server.allowed_tools
            for tool in answer:
                if allowed is None or tool.name in allowed:
                    mcp_tool = McpTool(server, tool.name, function_spec(server, tool))
                    toolset.tools[mcp_tool.exposed] = mcp_tool
        return toolset

    def _failed(self, server: McpServer, error: BaseException, doing: str) -> str:
        if isinstance(error, MissingSecret):
            kind, why = "missing_secret", str(error)
        elif isinstance(error, TimeoutError):
            kind, why = "timeout", f"no answer within {server.timeout_s} s"
        else:
            kind, why = "unreachable", f"{type(error).__name__}: {error}"[:300]
        self.metrics.mcp_errors.labels(server=server.name, kind=kind).inc()
        log.warning("mcp_server_failed", server=server.name, doing=doing, kind=kind, error=why)
        return why

    async def call(self, tool: McpTool, args: dict[str, Any], call_id: str) -> McpAnswer:
        """Call once (never retried: the server may have acted); failures are error answers."""
        server = tool.server
        started = time.perf_counter()
        outcome: Outcome = "ok"
        try:
            async with asyncio.timeout(server.timeout_s), self._session(server) as client:
                meta = cast(RequestParamsMeta, {CALL_ID_META: call_id})
                result = await client.call_tool(tool.tool, args, meta=meta)
            text = result_text(result)
            outcome = "error" if result.is_error else "ok"
        except TimeoutError as error:
            outcome, text = (
                "timeout",
                f"{tool.exposed} failed: {self._failed(server, error, 'call')}",
            )
        except Exception as error:  # any failure of a foreign server is an answer to the model
            outcome, text = "error", f"{tool.exposed} failed: {self._failed(server, error, 'call')}"
        finally:
            self.metrics.mcp_call_seconds.labels(server=server.name).observe(
                time.perf_counter() - started
            )
        self.metrics.mcp_calls.labels(server=server.name, outcome=outcome).inc()
        shown, chars, truncated = bounded(text, server.max_result_chars)
        return McpAnswer(outcome, shown, chars, truncated)

    async def aclose(self) -> None:
        await self.children.aclose()
        clients, self._http = list(self._http.values()), {}
        for client in clients:
            await client.aclose()


def envelope_of(tool: McpTool, answer: McpAnswer) -> ToolEnvelope:
    """The tool envelope the model gets: the text, and whether the server reported an error."""
    result = {"outcome": answer.outcome, "content": answer.text, "truncated": answer.truncated}
    return ToolEnvelope.success(tool.exposed, result)
