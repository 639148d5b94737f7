"""The transport both clients share: requests as values, retries on transient failures (no
answer, 429 with Retry-After, 502/503/504) for requests that are safe to repeat, errors mapped
to typed exceptions, and the Server-Sent Events parser of the wake feed."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from longrun.client.errors import LongrunError, RateLimited, Unavailable, error_class

TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 4
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 8.0


def new_key() -> str:
    """A fresh idempotency key (a tool call's `command_id`, a message's `Idempotency-Key`)."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class Call:
    """One request. `retry_safe`: repeating it changes nothing twice (reads, and writes that
    carry an idempotency key), so a transient failure is retried."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    """A body sent as is (with its own Content-Type header) instead of `json`."""
    timeout: float | None = None
    """Overrides the client's timeout (a long poll waits longer)."""
    retry_safe: bool = True
    ok: tuple[int, ...] = (200, 201, 202)


def backoff(attempt: int, answer: httpx.Response | None) -> float:
    """Seconds before retry `attempt` (1, 2, ...): Retry-After when the server gave one, else
    exponential with jitter."""
    if answer is not None:
        after = answer.headers.get("retry-after")
        if after is not None:
            try:
                return min(max(float(after), 0.0), BACKOFF_MAX_S * 4)
            except ValueError:
                pass
    ceiling = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** (attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not a secret


def error_of(answer: httpx.Response) -> LongrunError:
    """The typed exception for a refused answer (`{error: {kind, message, details?}}`)."""
    kind, message, details = "http_error", answer.reason_phrase or "error", None
    try:
        body = answer.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            kind = str(error.get("kind", kind))
            message = str(error.get("message", message))
            details = error.get("details")
    except ValueError:
        if answer.text:
            message = answer.text[:500]
    cls = error_class(answer.status_code)
    if cls is RateLimited:
        after = answer.headers.get("retry-after")
        return RateLimited(
            kind,
            message,
            status=answer.status_code,
            details=details,
            retry_after=float(after) if after and after.replace(".", "", 1).isdigit() else None,
        )
    return cls(kind, message, status=answer.status_code, details=details)


def unreachable(exc: httpx.TransportError) -> Unavailable:
    return Unavailable("unreachable", f"{type(exc).__name__}: {exc}")


def _build(http: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
    timeout: Any = httpx.USE_CLIENT_DEFAULT if call.timeout is None else call.timeout
    if call.raw is not None:
        return http.build_request(
            call.method,
            call.path,
            params=call.params,
            content=call.raw,
            headers=call.headers,
            timeout=timeout,
        )
    return http.build_request(
        call.method,
        call.path,
        params=call.params,
        json=call.json,
        headers=call.headers,
        timeout=timeout,
    )


class SyncTransport:
    def __init__(self, http: httpx.Client, retries: int) -> None:
        self.http = http
        self.retries = retries

    def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            last = attempt > self.retries or not call.retry_safe
            try:
                answer = self.http.send(_build(self.http, call))
            except httpx.TransportError as exc:
                if last:
                    raise unreachable(exc) from exc
                time.sleep(backoff(attempt, None))
                continue
            if answer.status_code in call.ok:
                return answer
            if answer.status_code in TRANSIENT_STATUSES and not last:
                time.sleep(backoff(attempt, answer))
                continue
            raise error_of(answer)


class AsyncTransport:
    def __init__(self, http: httpx.AsyncClient, retries: int) -> None:
        self.http = http
        self.retries = retries

    async def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            last = attempt > self.retries or not call.retry_safe
            try:
                answer = await self.http.send(_build(self.http, call))
            except httpx.TransportError as exc:
                if last:
                    raise unreachable(exc) from exc
                await asyncio.sleep(backoff(attempt, None))
                continue
            if answer.status_code in call.ok:
                return answer
            if answer.status_code in TRANSIENT_STATUSES and not last:
                await asyncio.sleep(backoff(attempt, answer))
                continue
            raise error_of(answer)


@dataclass(slots=True)
class SseEvent:
    id: str | None
    data: str


@dataclass(slots=True)
class SseParser:
    """Server-Sent Events, line by line (the WHATWG rules the feed uses: `id`, `data`,
    comments; `event` and `retry` are read and ignored)."""

    event_id: str | None = None
    data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> SseEvent | None:
        if not line:
            if not self.data:
                return None
            event = SseEvent(self.event_id, "\n".join(self.data))
            self.data = []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        elif name == "id" and "\0" not in value:
            self.event_id = value
        return None


def sse_events(lines: Iterator[str]) -> Iterator[SseEvent]:
    parser = SseParser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event


async def async_sse_events(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    parser = SseParser()
    async for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event
