"""The agent spec model: defaults, every limit, unknown fields at every depth, refused secrets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.domain.spec_secrets import error_path
from shared.domain.specs import (
    AgentSpec,
    changed_fields,
    effective_wake_budget,
    label_matches,
    required_env_names,
    spec_document,
)

HTTP_SERVER: dict[str, Any] = {"name": "gh", "transport": "http", "url": "https://mcp.example/mcp"}
STDIO_SERVER: dict[str, Any] = {"name": "fs", "transport": "stdio", "command": ["mcp-fs", "--ro"]}


def refused(document: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as caught:
        AgentSpec.model_validate(document)
    return [(error_path(e), e["msg"]) for e in caught.value.errors()]


def with_server(**overrides: Any) -> dict[str, Any]:
    return {"tools": {"mcp_servers": [{**HTTP_SERVER, **overrides}]}}


def test_empty_spec_echoes_every_default() -> None:
    assert spec_document(AgentSpec()) == {
        "instructions": "",
        "model": None,
        "tools": {"mcp_servers": [], "files": True, "commands": False},
        "limits": {"max_rounds_per_turn": 16, "wake_budget": None, "daily_token_budget": None},
        "labels": {},
        "peers": [],
    }


def test_server_defaults_are_filled_in() -> None:
    server = spec_document(AgentSpec.model_validate(with_server()))["tools"]["mcp_servers"][0]
    assert server["timeout_s"] == 60
    assert server["max_result_chars"] == 20_000
    assert server["headers_from_env"] == {}


def test_model_defaults_context_window() -> None:
    spec = AgentSpec.model_validate({"model": {"provider": "anthropic"}})
    assert spec.model is not None
    assert spec.model.context_window == 128_000


def test_strings_are_trimmed() -> None:
    spec = AgentSpec.model_validate({"instructions": "  review PRs \n", "labels": {"t": " a "}})
    assert spec.instructions == "review PRs"
    assert spec.labels == {"t": "a"}


def test_instructions_limit() -> None:
    AgentSpec(instructions="x" * 65_536)
    assert refused({"instructions": "x" * 65_537})[0][0] == ("instructions",)


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("max_rounds_per_turn", [1, 200], [0, 201]),
        ("wake_budget", [1, 1000, None], [0, 1001]),
        ("daily_token_budget", [1, 10**12, None], [0, -5, 10**12 + 1, 10**30]),
    ],
)
def test_limits_bounds(field: str, good: list[int | None], bad: list[int]) -> None:
    for value in good:
        assert getattr(AgentSpec.model_validate({"limits": {field: value}}).limits, field) == value
    for value in bad:
        assert refused({"limits": {field: value}})[0][0] == ("limits", field)


def test_limits_refuse_non_integers() -> None:
    assert refused({"limits": {"max_rounds_per_turn": 2.5}})[0][0] == (
        "limits",
        "max_rounds_per_turn",
    )


def test_labels_at_most_32() -> None:
    AgentSpec(labels={f"k{i}": "v" for i in range(32)})
    assert refused({"labels": {f"k{i}": "v" for i in range(33)}})[0][0] == ("labels",)


@pytest.mark.parametrize("key", ["a=b", "", "a b", "-lead"])
def test_label_keys_are_refused_when_unfilterable(key: str) -> None:
    assert refused({"labels": {key: "v"}})[0][0][0] == "labels"


def test_label_value_limit() -> None:
    assert refused({"labels": {"k": "v" * 257}})[0][0][0] == "labels"


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({"provider": "gemini"}, "provider"),
        ({}, "provider"),
        ({"provider": "openai", "temperature": 2.5}, "temperature"),
        ({"provider": "openai", "temperature": -0.1}, "temperature"),
        ({"provider": "openai", "max_output_tokens": 0}, "max_output_tokens"),
        ({"provider": "openai", "context_window": 10}, "context_window"),
        ({"provider": "openai", "name": ""}, "name"),
    ],
)
def test_model_field_limits(model: dict[str, Any], field: str) -> None:
    assert refused({"model": model})[0][0] == ("model", field)


@pytest.mark.parametrize(
    "document",
    [
        {"instructionz": "x"},
        {"model": {"provider": "openai", "nmae": "x"}},
        {"tools": {"mcp": []}},
        {"tools": {"mcp_servers": [{**HTTP_SERVER, "retries": 3}]}},
        {"limits": {"max_rounds": 3}},
    ],
)
def test_unknown_fields_are_refused_at_every_depth(document: dict[str, Any]) -> None:
    errors = refused(document)
    assert errors[0][1] == "Extra inputs are not permitted"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "Has Caps"}, "name"),
        ({"name": "x" * 33}, "name"),
        ({"transport": "ws"}, "transport"),
        ({"url": "ftp://x"}, "url"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_result_chars": 0}, "max_result_chars"),
        ({"headers_from_env": {"Authorization": "not an env name"}}, "headers_from_env"),
        ({"headers_from_env": {"Bad Header": "TOKEN_VAR"}}, "headers_from_env"),
        ({"allowed_tools": [""]}, "allowed_tools"),
    ],
)
def test_server_field_limits(overrides: dict[str, Any], field: str) -> None:
    path = refused(with_server(**overrides))[0][0]
    assert path[:4] == ("tools", "mcp_servers", 0, field)


def test_server_names_are_unique() -> None:
    document = {"tools": {"mcp_servers": [HTTP_SERVER, {**STDIO_SERVER, "name": "gh"}]}}
    [(path, message)] = refused(document)
    assert path == ("tools", "mcp_servers")
    assert "unique: gh" in message


@pytest.mark.parametrize(
    "server",
    [
        {"name": "a", "transport": "http"},
        {"name": "a", "transport": "stdio"},
        {"name": "a", "transport": "stdio", "command": []},
        {**HTTP_SERVER, "command": ["x"]},
        {**STDIO_SERVER, "url": "https://x"},
        {**STDIO_SERVER, "headers_from_env": {"X-Key": "KEY_VAR"}},
        {**HTTP_SERVER, "env_from_env": {"A": "B"}},
    ],
)
def test_server_fields_match_transport(server: dict[str, Any]) -> None:
    assert refused({"tools": {"mcp_servers": [server]}})[0][0][:3] == ("tools", "mcp_servers", 0)


def test_literal_authorization_header_is_refused_naming_the_field() -> None:
    [(path, message)] = refused(with_server(headers={"Authorization": "Bearer abc"}))
    assert path == ("tools", "mcp_servers", 0, "headers")
    assert "headers_from_env" in message


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({"model": {"provider": "openai", "api_key": "x"}}, ("model", "api_key")),
        ({"model": {"provider": "openai", "apiKey": "x"}}, ("model", "apiKey")),
        ({"tools": {"mcp_servers": [{**STDIO_SERVER, "env": {"A": "1"}}]}}, ("env",)),
        (with_server(Authorization="Bearer x"), ("Authorization",)),
        (with_server(token="t"), ("token",)),
        ({"password": "hunter2"}, ("password",)),
    ],
)
def test_secret_fields_are_refused_by_name(document: dict[str, Any], path: tuple[str, ...]) -> None:
    [(got, message)] = refused(document)
    assert got[-len(path) :] == path
    assert message.startswith("literal secrets are not stored")


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"instructions": "call with Bearer abcdefghijklmnop123"}, "instructions"),
        ({"instructions": "key sk-ant-api03-abcdefghijklmnopqrstuv"}, "instructions"),
        ({"labels": {"k": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}, "labels"),
        (with_server(url="https://user:pw@mcp.example/mcp"), "url"),
        (with_server(url="https://mcp.example/mcp?api_key=abc"), "url"),
        (with_server(url="https://mcp.example/mcp?access_token=abc"), "url"),
        (
            {
                "tools": {
                    "mcp_servers": [{**STDIO_SERVER, "command": ["x", "AKIAABCDEFGHIJKLMNOP"]}]
                }
            },
            "command",
        ),
    ],
)
def test_values_shaped_like_credentials_are_refused(document: dict[str, Any], field: str) -> None:
    [(path, message)] = refused(document)
    assert field in path
    assert "credential" in message or "password" in message


def test_named_environment_variables_are_accepted() -> None:
    spec = AgentSpec.model_validate(
        {
            "tools": {
                "mcp_servers": [
                    {**HTTP_SERVER, "headers_from_env": {"Authorization": "GH_MCP_AUTH"}},
                    {**STDIO_SERVER, "env_from_env": {"API_TOKEN": "FS_TOKEN"}},
                ]
            }
        }
    )
    assert required_env_names(spec) == ["FS_TOKEN", "GH_MCP_AUTH"]


def test_changed_fields_names_top_level_fields_in_order() -> None:
    old = AgentSpec(instructions="a")
    new = AgentSpec.model_validate({"instructions": "b", "labels": {"k": "v"}})
    assert changed_fields(old, new) == ["instructions", "labels"]
    assert changed_fields(new, AgentSpec.model_validate(spec_document(new))) == []


def test_defaults_written_out_are_the_same_spec() -> None:
    explicit = AgentSpec.model_validate({"limits": {"max_rounds_per_turn": 16}, "instructions": ""})
    assert changed_fields(AgentSpec(), explicit) == []


def test_effective_wake_budget() -> None:
    assert effective_wake_budget(AgentSpec(), 25) == 25
    assert effective_wake_budget(AgentSpec.model_validate({"limits": {"wake_budget": 3}}), 25) == 3


def test_label_selector() -> None:
    spec = AgentSpec(labels={"team": "infra", "expr": "a=b"})
    assert label_matches(spec, "team=infra")
    assert not label_matches(spec, "team=web")
    assert label_matches(spec, "expr=a=b")
    assert label_matches(spec, "team")
    assert not label_matches(spec, "owner")


def test_spec_is_frozen() -> None:
    spec = AgentSpec()
    with pytest.raises(ValidationError):
        spec.instructions = "x"  # type: ignore[misc]


@pytest.mark.parametrize("value", ["yes", "true", "1", 1, 0, "off"])
def test_files_takes_only_a_json_boolean(value: object) -> None:
    [(path, message)] = refused({"tools": {"files": value}})
    assert path == ("tools", "files")
    assert message == "Input should be a valid boolean"
    assert AgentSpec.model_validate({"tools": {"files": False}}).tools.files is False
