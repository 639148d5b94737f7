"""Two plain ASGI middlewares: the body-size limit, enforced before anything parses a body
(chunked bodies included), and the request counter labelled by route template and status."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import Counter
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.ingress.errors import INVALID_REQUEST, PAYLOAD_TOO_LARGE, error_body

UNMATCHED = "unmatched"
"""The route label of paths no route serves, so scanners cannot grow the label set."""


async def _send_error(send: Send, status: int, kind: str, message: str) -> None:
    body = error_body(kind, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value)
    return None


class BodyLimit:
    """Reads the whole body up to `max_bytes` and replays it; one byte more is a 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            declared = _declared_length(scope)
        except ValueError:
            await _send_error(send, 400, INVALID_REQUEST, "Content-Length is not a number")
            return
        if declared is not None and declared > self.max_bytes:
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _too_large(self, send: Send) -> None:
        message = f"the body is larger than {self.max_bytes} bytes (LONGRUN_MAX_BODY_BYTES)"
        await _send_error(send, 413, PAYLOAD_TOO_LARGE, message)


def _replay(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class RequestMetrics:
    """Counts every response as longrun_http_requests_total{route, status}."""

    def __init__(
        self, app: ASGIApp, counter: Counter, routes: Callable[[], Sequence[BaseRoute]]
    ) -> None:
        self.app = app
        self.counter = counter
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def observe(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            self.counter.labels(route=self._template(scope), status=str(status)).inc()

    def _template(self, scope: Scope) -> str:
        route = scope.get("route")
        if route is not None:
            return str(getattr(route, "path", UNMATCHED))
        # Refused before routing (413): find the template the same way the router would.
        for candidate in self.routes():
            match, _ = candidate.matches(scope)
            if match is not Match.NONE:
                return str(getattr(candidate, "path", UNMATCHED))
        return UNMATCHED
