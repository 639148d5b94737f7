"""The agent spec: who an agent is (its instructions, model, tools, limits and labels).

An `AgentSpec` is what an operator PUTs with an agent and what the ledger stores with it under a
`spec_version`. Every field is optional and every model here is frozen, trims strings and refuses
unknown fields at every depth, so a typo is an error rather than a silently ignored setting.
`AgentSpec.model_dump(mode="json")` is the stored and echoed form, with every default filled in.

Secrets are never stored. A credential is named by the executor's environment variable
(`headers_from_env`, `env_from_env`); a field that would hold one literally (`headers`, `env`,
`api_key`, a URL with a password, a value shaped like a bearer or API token) is refused with an
error that names the field and says what to write instead.

Defaults that live outside the spec: `model is None` means the executor's `LONGRUN_PROVIDER` /
`LONGRUN_MODEL`; `limits.wake_budget is None` means `LONGRUN_MAX_WAKE_CYCLES` (see
`effective_wake_budget`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from shared.domain.spec_secrets import refuse_literal_secret, refuse_secret_fields

MAX_INSTRUCTIONS_CHARS = 65_536
MAX_LABELS = 32
DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_MAX_ROUNDS_PER_TURN = 16
MAX_ROUNDS_CEILING = 200

ProviderName = Literal["scripted", "openai", "anthropic"]
ServerName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{1,32}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]{0,127}$")]
"""An environment variable's name (upper case, as a pasted value rarely is): read, never stored."""
HeaderName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")]
LabelKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")]
"""No `=` in a key, so `?label=k=v` splits unambiguously at the first `=`."""
LabelValue = Annotated[str, StringConstraints(max_length=256)]
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
ArgvItem = Annotated[str, StringConstraints(min_length=1, max_length=4096)]


MAX_DAILY_TOKEN_BUDGET = 10**12
"""A trillion tokens a day: beyond any model's rate, and inside what JSON codecs and Lua's
numbers hold exactly."""


class SpecModel(BaseModel):
    """Frozen, trimmed, unknown fields refused; literal-secret field names refused by name."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    @model_validator(mode="before")
    @classmethod
    def _no_secret_fields(cls, data: Any) -> Any:
        refuse_secret_fields(data)
        return data


class ModelSpec(SpecModel):
    """Which model runs this agent's turns; credentials come from the executor's environment."""

    provider: ProviderName
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_output_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    context_window: Annotated[int, Field(ge=1024, le=10_000_000)] = DEFAULT_CONTEXT_WINDOW


class McpServer(SpecModel):
    """One MCP server the agent may call: over streamable HTTP (`url`) or as a child (`command`)."""

    name: ServerName
    transport: Literal["http", "stdio"]
    url: Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=2048)] | None = None
    headers_from_env: dict[HeaderName, EnvName] = Field(default_factory=dict, max_length=32)
    command: tuple[ArgvItem, ...] | None = Field(default=None, min_length=1, max_length=256)
    env_from_env: dict[EnvName, EnvName] = Field(default_factory=dict, max_length=64)
    allowed_tools: tuple[ToolName, ...] | None = Field(default=None, max_length=512)
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 60
    max_result_chars: Annotated[int, Field(ge=1, le=1_000_000)] = 20_000

    @field_validator("url")
    @classmethod
    def _url_without_credentials(cls, url: str | None) -> str | None:
        if url is not None:
            refuse_literal_secret(url, "url")
            if re.match(r"^https?://[^/?#]*@", url):
                raise ValueError("a URL must not carry a user or password; use headers_from_env")
        return url

    @field_validator("command")
    @classmethod
    def _argv_without_secrets(cls, argv: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for index, item in enumerate(argv or ()):
            refuse_literal_secret(item, f"command[{index}]")
        return argv

    @model_validator(mode="after")
    def _fields_match_transport(self) -> McpServer:
        if self.transport == "http":
            if self.url is None:
                raise ValueError("an http server needs `url`")
            if self.command is not None or self.env_from_env:
                raise ValueError("`command` and `env_from_env` are for stdio servers")
        else:
            if self.command is None:
                raise ValueError("a stdio server needs `command` (an argv list)")
            if self.url is not None or self.headers_from_env:
                raise ValueError("`url` and `headers_from_env` are for http servers")
        return self


class ToolsSpec(SpecModel):
    """What the agent can do besides the WorkItem tools."""

    mcp_servers: tuple[McpServer, ...] = Field(default=(), max_length=32)
    files: StrictBool = True
    """Strict: only JSON `true`/`false` (YAML's `true`/`false`/`yes`/`no` arrive as booleans),
    never a string such as "yes" or "0" coerced into one."""
    commands: StrictBool = False
    """RunCommand (builtin agents): commands in a sandbox over the agent's home. Off unless
    asked for; offered only where the executor's sandbox works."""

    @field_validator("mcp_servers")
    @classmethod
    def _unique_names(cls, servers: tuple[McpServer, ...]) -> tuple[McpServer, ...]:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"MCP server names must be unique: {', '.join(duplicates)}")
        return servers


class Limits(SpecModel):
    """Per-agent bounds; `wake_budget=None` means the deployment's `LONGRUN_MAX_WAKE_CYCLES`."""

    max_rounds_per_turn: Annotated[int, Field(ge=1, le=MAX_ROUNDS_CEILING)] = (
        DEFAULT_MAX_ROUNDS_PER_TURN
    )
    wake_budget: Annotated[int, Field(ge=1, le=1000)] | None = None
    daily_token_budget: Annotated[int, Field(ge=1, le=MAX_DAILY_TOKEN_BUDGET)] | None = None


class AgentSpec(SpecModel):
    """The whole spec; `AgentSpec()` is the spec of an agent created without one."""

    instructions: Annotated[str, StringConstraints(max_length=MAX_INSTRUCTIONS_CHARS)] = ""
    model: ModelSpec | None = None
    tools: ToolsSpec = ToolsSpec()
    limits: Limits = Limits()
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)
    peers: tuple[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")], ...
    ] = Field(default=(), max_length=100)
    """Agents this one may SendMessage besides its parent and children."""

    @field_validator("instructions")
    @classmethod
    def _instructions_without_secrets(cls, text: str) -> str:
        refuse_literal_secret(text, "instructions")
        return text

    @field_validator("labels")
    @classmethod
    def _labels_without_secrets(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            refuse_literal_secret(value, f"labels.{key}")
        return labels


class StoredSpec(SpecModel):
    """The spec as the ledger stores it beside the agent: version 0 is an agent from before
    specs existed, which runs with the default spec."""

    spec_version: Annotated[int, Field(ge=0)] = 0
    spec: AgentSpec = AgentSpec()


SPEC_FIELDS: tuple[str, ...] = tuple(AgentSpec.model_fields)


def spec_document(spec: AgentSpec) -> dict[str, Any]:
    """The stored and echoed JSON form: every field present, defaults filled in."""
    return spec.model_dump(mode="json")


def changed_fields(old: AgentSpec, new: AgentSpec) -> list[str]:
    """Top-level field names whose value differs, in declaration order (empty when identical)."""
    before, after = spec_document(old), spec_document(new)
    return [name for name in SPEC_FIELDS if before[name] != after[name]]


def effective_wake_budget(spec: AgentSpec, default: int) -> int:
    """The wake budget a turn runs under: the spec's, or the deployment's default."""
    return spec.limits.wake_budget if spec.limits.wake_budget is not None else default


def required_env_names(spec: AgentSpec) -> list[str]:
    """Every environment variable the spec names, sorted: a turn cannot run without all of them."""
    names: set[str] = set()
    for server in spec.tools.mcp_servers:
        names.update(server.headers_from_env.values())
        names.update(server.env_from_env.values())
    return sorted(names)


def label_matches(spec: AgentSpec, selector: str) -> bool:
    """Whether `selector` (`key=value`, or a bare `key` for presence) matches the spec's labels."""
    key, sep, value = selector.partition("=")
    if not sep:
        return key in spec.labels
    return spec.labels.get(key) == value
