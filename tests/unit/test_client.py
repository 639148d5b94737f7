"""longrun.client without a server: its models against the ingress's /openapi.json, its
Server-Sent Events parser, errors mapped to typed exceptions with the contract's kind, retries
on transient failures that repeat a tool call with the same command_id, and the package
standing alone (httpx and pydantic only, nothing of services or shared)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from longrun.client import (
    Agent,
    Conflict,
    Forbidden,
    Operator,
    RateLimited,
    ToolConflict,
    ToolError,
    Unauthorized,
    Unavailable,
)
from longrun.client import _http as client_http
from longrun.client._http import SseParser
from longrun.client.models import OPENAPI_NAMES
from services.ingress.app import build
from tests.unit.test_ingress_documents import settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    document: dict[str, Any] = build(settings()).app.openapi()
    return document


def _types(prop: dict[str, Any]) -> set[str] | None:
    """The JSON types a property allows, or None where it names a schema or any value."""
    options = prop.get("anyOf", [prop])
    found: set[str] = set()
    for option in options:
        if "type" not in option:
            return None
        found.add(option["type"])
    return found - {"null"}


@pytest.mark.parametrize("model", list(OPENAPI_NAMES), ids=lambda m: m.__name__)
def test_a_client_model_mirrors_its_openapi_schema(model: Any, openapi: dict[str, Any]) -> None:
    server = openapi["components"]["schemas"][OPENAPI_NAMES[model]]
    server_props: dict[str, Any] = server["properties"]
    client = model.model_json_schema()
    client_props: dict[str, Any] = client["properties"]
    unknown = set(client_props) - set(server_props)
    assert not unknown, f"{model.__name__} reads fields the server never sends: {unknown}"
    missing = set(server_props) - set(client_props)
    assert not missing, f"{model.__name__} does not read fields the server sends: {missing}"
    too_strict = set(client.get("required", ())) - set(server.get("required", ()))
    assert not too_strict, f"{model.__name__} requires fields the server may omit: {too_strict}"
    for name, prop in client_props.items():
        theirs, ours = _types(server_props[name]), _types(prop)
        if theirs is not None and ours is not None:
            assert theirs <= ours, f"{model.__name__}.{name}: server {theirs}, client {ours}"


def test_every_wake_and_tool_answer_has_a_client_model() -> None:
    names = set(OPENAPI_NAMES.values())
    assert {"WakeTick", "WakePage", "ToolEnvelope", "AgentCreatedAnswer", "AgentDetail"} <= names


def test_the_sse_parser_reads_ids_data_and_skips_comments() -> None:
    parser = SseParser()
    lines = ["retry: 1000", ": connected", "", "id: 5-1", 'data: {"a":', "data: 1}", ""]
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert [(e.id, e.data) for e in events] == [("5-1", '{"a":\n1}')]
    assert parser.feed(": idle") is None
    assert parser.feed("") is None


def _agent(handler: Any, retries: int = 4) -> Agent:
    transport = httpx.MockTransport(handler)
    http = httpx.Client(base_url="http://longrun.test", transport=transport)
    return Agent("http://longrun.test", "ada~secret", http=http, retries=retries)


@pytest.fixture
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_http, "backoff", lambda attempt, answer: 0.0)
    monkeypatch.setattr(client_http.time, "sleep", lambda s: None)


def _envelope(status: str, **extra: Any) -> dict[str, Any]:
    return {"tool_name": "CompleteWorkItem", "status": status, "warnings": [], **extra}


@pytest.mark.usefixtures("no_waiting")
def test_a_tool_call_is_retried_after_a_503_with_the_same_command_id() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert request.headers["authorization"] == "Bearer ada~secret"
        if len(seen) == 1:
            return httpx.Response(503, json={"error": {"kind": "unavailable", "message": "x"}})
        return httpx.Response(200, json=_envelope("success", result={"work_item": {}}))

    with _agent(handler) as agent:
        answer = agent.complete_work_item("wi_1", report="done")
    assert answer.status == "success"
    assert len(seen) == 2
    assert seen[0]["command_id"] == seen[1]["command_id"]
    assert seen[0] == {"args": {"work_item_id": "wi_1"}, "command_id": seen[0]["command_id"],
                       "assistant_text": "done"}  # fmt: skip


@pytest.mark.usefixtures("no_waiting")
def test_a_connection_error_is_retried_then_reported_as_unavailable() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("refused", request=request)

    with _agent(handler, retries=2) as agent, pytest.raises(Unavailable) as caught:
        agent.list_work_items()
    assert calls == 3
    assert caught.value.kind == "unreachable"


def test_a_tool_error_carries_its_kind_status_and_hint() -> None:
    error = {"kind": "work_item_not_open", "message": "completed", "recovery_hint": "list open"}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json=_envelope("error", error=error))

    with _agent(handler) as agent, pytest.raises(ToolConflict) as caught:
        agent.complete_work_item("wi_1")
    assert isinstance(caught.value, ToolError)
    assert isinstance(caught.value, Conflict)
    assert (caught.value.kind, caught.value.status) == ("work_item_not_open", 409)
    assert caught.value.recovery_hint == "list open"
    assert caught.value.tool_name == "CompleteWorkItem"


@pytest.mark.parametrize(
    ("status", "kind", "cls"),
    [(401, "unauthorized", Unauthorized), (403, "forbidden", Forbidden),
     (429, "rate_limited", RateLimited)],
)  # fmt: skip
@pytest.mark.usefixtures("no_waiting")
def test_route_errors_are_typed_exceptions(status: int, kind: str, cls: type[Exception]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"error": {"kind": kind, "message": "no"}}
        return httpx.Response(status, json=body, headers={"Retry-After": "2"})

    with _agent(handler, retries=1) as agent, pytest.raises(cls) as caught:
        agent.work_items()
    assert getattr(caught.value, "kind", None) == kind


def test_an_operator_message_carries_an_idempotency_key_and_a_callback_no_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.startswith("/v1/callbacks/"):
            return httpx.Response(202, json={"delivery_id": "k1", "disposition": "triggered"})
        return httpx.Response(202, json={"message_id": "m1"})

    http = httpx.Client(base_url="http://longrun.test", transport=httpx.MockTransport(handler))
    with Operator("http://longrun.test", "op-token", http=http) as operator:
        assert operator.send_message("ada", "hello").message_id == "m1"
        agent = operator.as_agent("ada")
        accepted = agent.callback("http://longrun.test/v1/callbacks/cap", {"ok": True}, "k1")
    assert accepted.disposition == "triggered"
    assert seen[0].headers["idempotency-key"]
    assert "authorization" not in seen[1].headers
    assert seen[1].headers["idempotency-key"] == "k1"


def test_the_client_imports_nothing_of_the_services() -> None:
    code = (
        "import sys, longrun.client\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'services', 'shared', 'redis', 'faststream', 'orjson', 'fastapi', 'openai'})\n"
        "print(','.join(bad))"
    )
    found = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert found.stdout.strip() == ""


def test_the_client_extra_is_httpx_and_pydantic_only() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {dep.split("=")[0].split("[")[0].strip() for dep in project["dependencies"]}
    client = {dep.split("=")[0].strip() for dep in project["optional-dependencies"]["client"]}
    assert names <= {"httpx", "pydantic"}, "the base install must stay the client's own"
    assert client <= {"httpx", "pydantic"}
