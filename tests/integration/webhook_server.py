"""A real HTTP server standing in for acceptance webhooks: the path picks the answer, every
request is recorded with its signature, and `hold` keeps answers back until released."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import orjson

ANSWERS: dict[str, tuple[int, bytes]] = {
    "/pass": (200, b'{"passed": true, "reason": "all green"}'),
    "/fail": (200, b'{"passed": false, "reason": "3 tests fail"}'),
    "/500": (500, b'{"passed": true, "reason": "ignored"}'),
    "/nonjson": (200, b"<html>ok</html>"),
    "/yes": (200, b'{"passed": "yes", "reason": "a string is not a bool"}'),
    "/noreason": (200, b'{"passed": true}'),
    "/redirect": (302, b'{"passed": true, "reason": "a redirect is not an answer"}'),
}


@dataclass
class Received:
    path: str
    body: dict[str, Any]
    signature: str
    raw: bytes
    host: str = ""
    """The Host header the call carried."""


@dataclass
class WebhookServer:
    port: int = 0
    received: list[Received] = field(default_factory=list)
    hold: asyncio.Event = field(default_factory=asyncio.Event)
    """Cleared: every answer waits until it is set."""
    redirect_to: str = "/pass"
    """Where `/redirect` sends a caller (302), absolute or on this server."""
    flip: dict[str, int] = field(default_factory=dict)
    """`/flaky/<key>`: fails the first time for a key, passes after. `/second-attempt-passes...`
    fails attempt 1 and passes every later attempt."""
    connections: int = 0
    """Connections opened to the server so far."""
    busy: int = 0
    most_busy: int = 0
    """The most requests the server held at once."""
    _server: asyncio.Server | None = None

    async def start(self) -> WebhookServer:
        self.hold.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes] | None:
        if path.startswith("/second-attempt-passes"):
            # By the attempt in the body, not by call count: a call repeated after a crash
            # gets the same answer as the first.
            first = (body or {}).get("attempt") == 1
            return ANSWERS["/fail"] if first else ANSWERS["/pass"]
        if path.startswith("/flaky/"):
            seen = self.flip.get(path, 0)
            self.flip[path] = seen + 1
            return ANSWERS["/fail"] if seen == 0 else ANSWERS["/pass"]
        if path.startswith("/slow"):
            return None
        if path.startswith("/delay/"):
            return ANSWERS["/pass"]
        return ANSWERS.get(path, (404, b"{}"))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests on one connection until the client closes it (keep-alive, as a real webhook
        server does), so a caller's connection pool is what gets measured."""
        self.connections += 1
        try:
            while await self._one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        path = lines[0].split()[1]
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        body = orjson.loads(raw)
        signature = headers.get("x-longrun-signature", "")
        self.received.append(Received(path, body, signature, raw, headers.get("host", "")))
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        try:
            await self.hold.wait()
            if path.startswith("/delay/"):
                await asyncio.sleep(int(path.split("/")[2]) / 1000)  # `/delay/<ms>/...`
        finally:
            self.busy -= 1
        answer = self.answer(path, body)
        if answer is None:
            await asyncio.sleep(3600)  # never answers: the caller's timeout must end it
            return False
        status, content = answer
        location = f"Location: {self.redirect_to}\r\n" if status == 302 else ""
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Length: {len(content)}\r\n{location}"
            "Content-Type: application/json\r\n\r\n".encode()
            + content
        )
        await writer.drain()
        return headers.get("connection", "").lower() != "close"
