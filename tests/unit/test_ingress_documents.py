"""What ingress publishes about itself, built without Redis: the AsyncAPI document covers every
stream of docs/streams.md with schemas from the models, /openapi.json covers every route of
docs/contract.md §6, and a missing operator token stops the start."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from services.ingress.app import build
from services.ingress.asyncapi import asyncapi_document
from services.ingress.settings import IngressSettings, MisconfiguredError
from shared.wire.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return asyncapi_document(prefix="lr", redis_url="redis://:secret@redis:6380/0", version="1")


def documented_streams() -> set[str]:
    """Stream names of the table in docs/streams.md, as AsyncAPI addresses."""
    text = (ROOT / "docs" / "streams.md").read_text()
    names = re.findall(r"^\| `(lr:[^`]+)`", text, flags=re.MULTILINE)
    return {
        n.replace("lr:", "{prefix}:", 1)
        .replace("{pNNN}", "{partition}")
        .replace("<process>", "{process}")
        for n in names
    }


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def resolve(document: dict[str, Any], ref: str) -> Any:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_every_documented_stream_is_a_channel(document: dict[str, Any]) -> None:
    addresses = {c["address"] for c in document["channels"].values()}
    expected = documented_streams()
    assert len(expected) >= 8
    assert expected <= addresses


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    assert document["asyncapi"] == "3.0.0"
    for ref in refs(document):
        assert ref.startswith("#/"), ref
        assert resolve(document, ref) is not None, ref


def test_operations_send_only_their_channels_messages(document: dict[str, Any]) -> None:
    for operation in document["operations"].values():
        channel = operation["channel"]["$ref"]
        assert operation["action"] in {"send", "receive"}
        for message in operation["messages"]:
            assert message["$ref"].startswith(channel + "/messages/")
            assert resolve(document, message["$ref"]) is not None


def test_address_parameters_are_declared(document: dict[str, Any]) -> None:
    for channel in document["channels"].values():
        used = set(re.findall(r"\{(\w+)\}", channel["address"]))
        assert used == set(channel["parameters"]), channel["address"]


def test_message_schemas_come_from_the_models(document: dict[str, Any]) -> None:
    messages = document["components"]["messages"]
    schemas = document["components"]["schemas"]
    commands = document["channels"]["commands"]["messages"]
    assert set(commands) == {c.message_type for c in COMMANDS}
    record_callback = messages["record_callback"]["payload"]
    assert record_callback["properties"]["type"] == {"const": "record_callback"}
    body = resolve(document, record_callback["properties"]["body"]["$ref"])
    assert {"token_hash", "delivery_id", "body_encoding"} <= set(body["properties"])
    entry = resolve(document, messages["callback_entry"]["payload"]["$ref"])
    assert set(entry["required"]) == {"token", "delivery_id"}
    assert "WaitTriggered" in schemas
    assert "prefixItems" not in str(document)


def test_the_server_hides_credentials(document: dict[str, Any]) -> None:
    assert document["servers"]["redis"]["host"] == "redis:6380"
    assert "secret" not in str(document["servers"])


def settings(**overrides: Any) -> IngressSettings:
    values: dict[str, Any] = {"operator_token": "op-" + "x" * 20, "prefix": "lr", **overrides}
    return IngressSettings(**values)


def test_openapi_documents_every_route_with_bearer_auth() -> None:
    openapi = build(settings()).app.openapi()
    routes = {(m.upper(), p) for p, ops in openapi["paths"].items() for m in ops}
    contract = {
        ("GET", "/v1/agents"),
        ("PUT", "/v1/agents/{agent_id}"),
        ("GET", "/v1/agents/{agent_id}"),
        ("POST", "/v1/agents/{agent_id}/messages"),
        ("POST", "/v1/agents/{agent_id}/tasks/{task_id}/result"),
        ("GET", "/v1/agents/{agent_id}/tools"),
        ("POST", "/v1/agents/{agent_id}/tools/{tool_name}"),
        ("GET", "/v1/agents/{agent_id}/work-items"),
        ("GET", "/v1/agents/{agent_id}/work-items/{work_item_id}"),
        ("GET", "/v1/agents/{agent_id}/work-items/{work_item_id}/why"),
        ("GET", "/v1/agents/{agent_id}/briefs"),
        ("GET", "/v1/agents/{agent_id}/history"),
        ("GET", "/v1/agents/{agent_id}/history/verify"),
        ("POST", "/v1/callbacks/{token}"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
        ("GET", "/asyncapi.json"),
    }
    assert contract <= routes
    assert openapi["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    put = openapi["paths"]["/v1/agents/{agent_id}"]["put"]
    assert {"200", "201", "400", "401", "403"} <= set(put["responses"])
    why = openapi["paths"]["/v1/agents/{agent_id}/work-items/{work_item_id}/why"]["get"]
    assert {"200", "401", "403", "404"} <= set(why["responses"])
    answer = why["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    reason = openapi["components"]["schemas"][answer.rsplit("/", 1)[1]]["properties"]["reason"]
    assert "$ref" in reason or "enum" in reason


def documented_routes() -> set[tuple[str, str]]:
    """(method, path) of every row of docs/api.md's route table (a row may name several)."""
    text = (ROOT / "docs" / "api.md").read_text()
    rows = re.findall(r"^\| (`[A-Z]+ /[^|]*?) \|", text, flags=re.MULTILINE)
    found = set()
    for row in rows:
        for method, path in re.findall(r"`([A-Z]+) (/[^`]*)`", row):
            found.add((method, path))
    return found


def test_docs_api_md_lists_every_route() -> None:
    openapi = build(settings()).app.openapi()
    routes = {(m.upper(), p) for p, ops in openapi["paths"].items() for m in ops}
    missing = sorted(routes - documented_routes())
    assert missing == []


@pytest.mark.parametrize("token", [None, "", "   "])
def test_a_missing_operator_token_stops_the_start(token: str | None) -> None:
    configured = settings(operator_token=SecretStr(token) if token is not None else None)
    with pytest.raises(MisconfiguredError, match="LONGRUN_OPERATOR_TOKEN"):
        build(configured)
