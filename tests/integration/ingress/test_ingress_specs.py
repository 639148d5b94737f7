"""Agent specs over HTTP against a real ledger process: created with version 1, changed with one
`agent_spec_changed` event, an identical PUT changing nothing, refused input storing nothing,
label filters, operator-only reads, and the wake budget following the spec."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from shared.store.readmodel import ReadModel
from tests.integration.ingress.conftest import Api, new_agent_id

SPEC: dict[str, Any] = {
    "instructions": "Review pull requests for the payments team.",
    "model": {"provider": "anthropic", "name": "claude-sonnet-4-5", "max_output_tokens": 4096},
    "tools": {
        "mcp_servers": [
            {
                "name": "github",
                "transport": "http",
                "url": "https://mcp.example/github",
                "headers_from_env": {"Authorization": "GITHUB_MCP_AUTH"},
            }
        ]
    },
    "limits": {"max_rounds_per_turn": 8, "wake_budget": 5},
    "labels": {"team": "payments"},
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def put(api: Api, agent_id: str, body: dict[str, Any]) -> httpx.Response:
    return await api.http.put(f"/v1/agents/{agent_id}", headers=api.operator, json=body)


async def history_types(api: Api, agent_id: str) -> list[tuple[str, dict[str, Any]]]:
    page = await api.http.get(f"/v1/agents/{agent_id}/history", headers=api.operator)
    return [(e["type"], e["data"]) for e in page.json()["events"]]


async def test_create_with_a_spec_echoes_it_with_defaults_and_version_1(api: Api) -> None:
    created = await api.create_agent(spec=SPEC)
    assert created["spec_version"] == 1
    assert created["spec"]["instructions"] == SPEC["instructions"]
    assert created["spec"]["model"]["context_window"] == 128_000
    assert created["spec"]["tools"]["mcp_servers"][0]["timeout_s"] == 60
    assert created["spec"]["tools"]["files"] is True
    assert created["spec"]["limits"]["daily_token_budget"] is None
    assert "agent_token" in created
    shown = await api.http.get(f"/v1/agents/{created['agent_id']}", headers=api.operator)
    assert shown.json()["spec"] == created["spec"]
    assert shown.json()["spec_version"] == 1
    assert shown.json()["wake_budget"]["limit"] == 5


async def test_create_without_a_spec_has_the_default_spec(api: Api) -> None:
    created = await api.create_agent()
    assert created["spec_version"] == 1
    assert created["spec"]["instructions"] == ""
    assert created["spec"]["model"] is None
    assert created["spec"]["limits"]["max_rounds_per_turn"] == 16


async def test_a_different_spec_bumps_the_version_with_one_event(api: Api) -> None:
    agent_id = (await api.create_agent(spec=SPEC))["agent_id"]
    changed = {**SPEC, "instructions": "Review every PR.", "limits": {"wake_budget": 9}}
    answer = await put(api, agent_id, {"spec": changed})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["spec_version"] == 2
    assert body["loop"] == "builtin"
    assert body["spec"]["instructions"] == "Review every PR."
    assert "agent_token" not in body
    events = await history_types(api, agent_id)
    assert events[-1] == (
        "agent_spec_changed",
        {"spec_version": 2, "changed": ["instructions", "limits"]},
    )
    shown = (await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)).json()
    assert shown["spec_version"] == 2
    assert shown["spec"]["limits"] == {
        "max_rounds_per_turn": 16,
        "wake_budget": 9,
        "daily_token_budget": None,
    }
    assert shown["wake_budget"]["limit"] == 9


async def test_an_identical_spec_changes_and_records_nothing(api: Api) -> None:
    agent_id = (await api.create_agent(spec=SPEC))["agent_id"]
    before = await history_types(api, agent_id)
    spelled_out = {**SPEC, "tools": {**SPEC["tools"], "files": True}}
    for body in ({"spec": SPEC}, {"spec": spelled_out}, {}, {"loop": "builtin"}):
        answer = await put(api, agent_id, body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["spec_version"] == 1
        assert answer.json()["spec"]["instructions"] == SPEC["instructions"]
    assert await history_types(api, agent_id) == before


async def test_loop_change_is_refused_with_409(api: Api) -> None:
    agent_id = (await api.create_agent(loop="external"))["agent_id"]
    answer = await put(api, agent_id, {"loop": "builtin", "spec": SPEC})
    assert answer.status_code == 409
    error = answer.json()["error"]
    assert error["kind"] == "loop_change_refused"
    assert error["details"] == {"loop": "external", "requested": "builtin"}
    assert "loop never changes" in error["message"]
    shown = (await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)).json()
    assert shown["loop"] == "external"
    assert shown["spec_version"] == 1
    assert shown["spec"]["instructions"] == ""


def many(n: int) -> dict[str, Any]:
    return {**SPEC["tools"]["mcp_servers"][0], "name": f"s{n}"}


HEADER_VALUE = ["tools", "mcp_servers", "0", "headers_from_env", "Authorization"]


def server(**overrides: Any) -> dict[str, Any]:
    return {"tools": {"mcp_servers": [{**SPEC["tools"]["mcp_servers"][0], **overrides}]}}


@pytest.mark.parametrize(
    ("spec", "loc"),
    [
        ({"instructions": "x" * 65_537}, ["instructions"]),
        ({"limits": {"max_rounds_per_turn": 0}}, ["limits", "max_rounds_per_turn"]),
        ({"limits": {"max_rounds_per_turn": 201}}, ["limits", "max_rounds_per_turn"]),
        ({"limits": {"wake_budget": 1001}}, ["limits", "wake_budget"]),
        ({"limits": {"daily_token_budget": 0}}, ["limits", "daily_token_budget"]),
        ({"labels": {f"k{i}": "v" for i in range(33)}}, ["labels"]),
        ({"model": {"provider": "gemini"}}, ["model", "provider"]),
        ({"model": {"provider": "openai", "temperature": 3}}, ["model", "temperature"]),
        ({"limits": {"max_rounds": 3}}, ["limits", "max_rounds"]),
        (server(retries=1), ["tools", "mcp_servers", "0", "retries"]),
        (server(name="Bad Name"), ["tools", "mcp_servers", "0", "name"]),
        (server(headers={"Authorization": "Bearer x"}), ["tools", "mcp_servers", "0", "headers"]),
        ({"model": {"provider": "openai", "api_key": "sk-x"}}, ["model", "api_key"]),
        # Every other limit, one past each end.
        ({"instructions": 7}, ["instructions"]),
        ({"limits": {"wake_budget": 0}}, ["limits", "wake_budget"]),
        ({"limits": {"daily_token_budget": 1.5}}, ["limits", "daily_token_budget"]),
        ({"labels": {"team": "x" * 257}}, ["labels", "team"]),
        ({"labels": {"a=b": "v"}}, ["labels", "a=b", "[key]"]),
        ({"model": {"name": "m"}}, ["model", "provider"]),
        ({"model": {"provider": "openai", "name": "m" * 201}}, ["model", "name"]),
        ({"model": {"provider": "openai", "temperature": -0.1}}, ["model", "temperature"]),
        ({"model": {"provider": "openai", "max_output_tokens": 0}}, ["model", "max_output_tokens"]),
        ({"model": {"provider": "openai", "context_window": 1023}}, ["model", "context_window"]),
        ({"tools": {"files": "sometimes"}}, ["tools", "files"]),
        ({"tools": {"files": "yes"}}, ["tools", "files"]),
        ({"tools": {"files": 1}}, ["tools", "files"]),
        ({"tools": {"mcp_servers": [many(n) for n in range(33)]}}, ["tools", "mcp_servers"]),
        (server(timeout_s=0), ["tools", "mcp_servers", "0", "timeout_s"]),
        (server(max_result_chars=1_000_001), ["tools", "mcp_servers", "0", "max_result_chars"]),
        (server(url="ftp://x"), ["tools", "mcp_servers", "0", "url"]),
        # Unknown fields at every depth.
        ({"instruction": "typo"}, ["instruction"]),
        ({"model": {"provider": "openai", "top_k": 3}}, ["model", "top_k"]),
        ({"tools": {"mcp_servers": [], "shell": True}}, ["tools", "shell"]),
        ({"labels": {"team": {"nested": "x"}}}, ["labels", "team"]),
        # A literal credential wherever one could be pasted.
        (server(headers_from_env={"Authorization": "Bearer sk-live-123"}), HEADER_VALUE),
        (server(url="https://user:pw@mcp.example/mcp"), ["tools", "mcp_servers", "0", "url"]),
    ],
)
async def test_bad_spec_is_400_naming_the_field_and_stores_nothing(
    api: Api, reads: ReadModel, spec: dict[str, Any], loc: list[str]
) -> None:
    agent_id = new_agent_id()
    answer = await put(api, agent_id, {"spec": spec})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["kind"] == "invalid_request"
    assert error["details"]["errors"][0]["loc"] == ["body", "spec", *loc]
    assert await reads.agent_record(agent_id) is None
    existing = (await api.create_agent(spec=SPEC))["agent_id"]
    assert (await put(api, existing, {"spec": spec})).status_code == 400
    assert (await reads.agent_spec(existing)).spec_version == 1


async def test_an_unknown_field_beside_the_spec_is_400_and_stores_nothing(
    api: Api, reads: ReadModel
) -> None:
    agent_id = new_agent_id()
    answer = await put(api, agent_id, {"specs": {"instructions": "typo"}})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["kind"], error["details"]["errors"][0]["loc"]) == (
        "invalid_request",
        ["body", "specs"],
    )
    assert await reads.agent_record(agent_id) is None


async def test_only_the_operator_reads_or_changes_a_spec(api: Api) -> None:
    created = await api.create_agent(spec=SPEC)
    agent_id, token = created["agent_id"], created["agent_token"]
    read = await api.http.get(f"/v1/agents/{agent_id}", headers=bearer(token))
    assert read.status_code == 403
    assert "spec" not in read.text
    change = await api.http.put(
        f"/v1/agents/{agent_id}", headers=bearer(token), json={"spec": {"instructions": "x"}}
    )
    assert change.status_code == 403
    shown = (await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)).json()
    assert shown["spec"]["instructions"] == SPEC["instructions"]


async def test_list_filters_by_label(api: Api) -> None:
    tag = new_agent_id()
    first = (await api.create_agent(spec={"labels": {"batch": tag, "team": "a"}}))["agent_id"]
    second = (await api.create_agent(spec={"labels": {"batch": tag, "team": "b"}}))["agent_id"]

    async def listed(*labels: str) -> list[str]:
        query = [("label", label) for label in labels]
        answer = await api.http.get("/v1/agents", headers=api.operator, params=query)
        assert answer.status_code == 200, answer.text
        return sorted(a["agent_id"] for a in answer.json()["agents"])

    assert await listed(f"batch={tag}") == sorted([first, second])
    assert await listed(f"batch={tag}", "team=b") == [second]
    assert await listed(f"batch={tag}", "team=c") == []
    everyone = await api.http.get("/v1/agents", headers=api.operator)
    labels = {a["agent_id"]: a["labels"] for a in everyone.json()["agents"]}
    assert labels[first] == {"batch": tag, "team": "a"}


async def test_the_transcript_route_is_the_operators(api: Api) -> None:
    created = await api.create_agent()
    path = f"/v1/agents/{created['agent_id']}/transcript"
    empty = await api.http.get(path, headers=api.operator, params={"after": 5})
    assert empty.status_code == 200, empty.text
    assert empty.json() == {"entries": [], "next_after": 5}
    assert (await api.http.get(path, headers=bearer(created["agent_token"]))).status_code == 403
    bad = await api.http.get(path, headers=api.operator, params={"work_item_id": "nope"})
    assert bad.status_code == 400
