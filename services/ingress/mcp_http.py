"""The `/mcp` endpoint: MCP's streamable HTTP transport (the SDK's session manager, stateless
and answering JSON, so any ingress worker or replica can serve any request), behind longrun's
auth. `Authorization: Bearer <agent token>` acts as that agent; the operator token acts as
the agent named by `X-Longrun-Agent`; no or an unknown token is 401 before MCP sees the body."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from services.ingress.auth import AGENT_HEADER, act_as, unauthorized
from services.ingress.deps import Ingress
from services.ingress.errors import ApiError, error_response
from services.ingress.mcp_server import CALLER_STATE, LongrunMcp

PATH = "/mcp"
_AGENT_HEADER = AGENT_HEADER.lower().encode("latin-1")


def _headers(scope: Scope) -> tuple[str | None, str | None]:
    """(the bearer token, the X-Longrun-Agent value) of a request, each None when absent."""
    token = agent = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                token = credentials.strip()
        elif name == _AGENT_HEADER:
            agent = value.decode("latin-1").strip() or None
    return token, agent


@dataclass
class McpEndpoint:
    """The ASGI app served at `/mcp`, and the session manager its lifespan must run."""

    ingress: Ingress
    manager: StreamableHTTPSessionManager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token, agent_id = _headers(scope)
        try:
            if token is None:
                raise unauthorized(
                    f"send `Authorization: Bearer <token>`: an agent's token, or the operator "
                    f"token with `{AGENT_HEADER}: <agent_id>`"
                )
            caller = await act_as(self.ingress, token, agent_id)
        except ApiError as err:
            await error_response(err)(scope, receive, send)
            return
        scope.setdefault("state", {})[CALLER_STATE] = caller
        await self.manager.handle_request(scope, receive, send)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager, running for as long as this context is open.

        Its anyio task group must be left by the task that entered it, and an app's lifespan
        may start and end in different tasks (test fixtures do), so it runs in a task of its
        own that this context starts and stops."""
        ready, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with self.manager.run():
                ready.set()
                await stop.wait()

        task = asyncio.create_task(serve())
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():
            task.result()  # it failed to start: raise why
        try:
            yield
        finally:
            stop.set()
            await task

    def route(self) -> Route:
        return Route(PATH, endpoint=self, methods=["GET", "POST", "DELETE"])


def mcp_endpoint(ingress: Ingress, *, max_body_bytes: int) -> McpEndpoint:
    manager = StreamableHTTPSessionManager(
        app=LongrunMcp(ingress).server(),
        json_response=True,
        stateless=True,
        max_request_body_size=max_body_bytes,
        session_idle_timeout=None,
    )
    return McpEndpoint(ingress, manager)
