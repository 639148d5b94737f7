"""The ASGI middlewares alone: the body limit answers 413 before the app sees an over-size body
(declared or chunked), and the request counter labels by route template, never by raw path."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter
from starlette.requests import Request
from starlette.routing import Route

from services.ingress.errors import ApiError, install
from services.ingress.middleware import BodyLimit, RequestMetrics
from services.ingress.routes_callbacks import error_answer
from shared.domain.errors import DomainError, ErrorKind
from shared.ledger_client import LedgerTimeout


class Recorder:
    """An ASGI app that records the body it read and answers 204."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def http_scope(path: str = "/x", headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    return {"type": "http", "method": "POST", "path": path, "headers": headers or []}


async def run(app: Any, scope: Any, chunks: list[bytes]) -> list[dict[str, Any]]:
    pending = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_a_declared_length_over_the_limit_is_413_without_reading() -> None:
    inner = Recorder()
    sent = await run(
        BodyLimit(inner, 10), http_scope(headers=[(b"content-length", b"11")]), [b"x" * 11]
    )
    assert sent[0]["status"] == 413
    assert orjson.loads(sent[1]["body"])["error"]["kind"] == "payload_too_large"
    assert inner.bodies == []


async def test_a_chunked_body_over_the_limit_is_413() -> None:
    inner = Recorder()
    sent = await run(BodyLimit(inner, 10), http_scope(), [b"x" * 6, b"y" * 6])
    assert sent[0]["status"] == 413
    assert inner.bodies == []


async def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    inner = Recorder()
    sent = await run(BodyLimit(inner, 10), http_scope(), [b"abc", b"def", b"ghij"])
    assert sent[0]["status"] == 204
    assert inner.bodies == [b"abcdefghij"]


async def test_a_malformed_content_length_is_400() -> None:
    sent = await run(
        BodyLimit(Recorder(), 10), http_scope(headers=[(b"content-length", b"ten")]), [b""]
    )
    assert sent[0]["status"] == 400


async def test_a_client_that_leaves_mid_body_gets_nothing() -> None:
    inner = Recorder()
    sent = await run(BodyLimit(inner, 10), http_scope(), [])
    assert sent == []
    assert inner.bodies == []


def counter() -> tuple[Counter, CollectorRegistry]:
    registry = CollectorRegistry()
    return Counter("t_requests", "x", ["route", "status"], registry=registry), registry


ROUTES = [Route("/v1/agents/{agent_id}", lambda r: None, methods=["POST"])]


async def test_requests_are_counted_by_route_template_and_status() -> None:
    requests, registry = counter()

    async def routed(scope: Any, receive: Any, send: Any) -> None:
        scope["route"] = ROUTES[0]
        await Recorder()(scope, receive, send)

    app = RequestMetrics(routed, requests, lambda: ROUTES)
    await run(app, http_scope("/v1/agents/a-1"), [b""])
    limited = RequestMetrics(BodyLimit(Recorder(), 1), requests, lambda: ROUTES)
    await run(limited, http_scope("/v1/agents/a-2"), [b"too big"])
    await run(RequestMetrics(Recorder(), requests, lambda: ROUTES), http_scope("/nope"), [b""])
    sample = registry.get_sample_value
    assert sample("t_requests_total", {"route": "/v1/agents/{agent_id}", "status": "204"}) == 1
    assert sample("t_requests_total", {"route": "/v1/agents/{agent_id}", "status": "413"}) == 1
    assert sample("t_requests_total", {"route": "unmatched", "status": "204"}) == 1


async def test_an_app_that_raises_is_counted_as_500() -> None:
    requests, registry = counter()

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        await run(RequestMetrics(broken, requests, lambda: ROUTES), http_scope("/x"), [b""])
    assert registry.get_sample_value("t_requests_total", {"route": "unmatched", "status": "500"})


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (
            ApiError(429, "rate_limited", "slow down", headers={"Retry-After": "2"}),
            429,
            "rate_limited",
        ),
        (DomainError(ErrorKind.WORK_ITEM_NOT_FOUND, "no such item"), 404, "work_item_not_found"),
        (LedgerTimeout("no reply"), 503, "unavailable"),
        (RuntimeError("a bug"), 500, "internal"),
    ],
)
async def test_error_answer_maps_like_the_apps_handlers(
    exc: Exception, status: int, kind: str
) -> None:
    app = FastAPI()
    install(app)
    scope = {"type": "http", "method": "POST", "path": "/v1/callbacks/t", "headers": [], "app": app}
    request = Request(scope)
    answer = await error_answer(request, exc)
    assert answer.status_code == status
    assert orjson.loads(bytes(answer.body))["error"]["kind"] == kind
