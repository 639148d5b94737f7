"""The one list of tools longrun serves and their input schemas: the model's tool list (the
turn executor), the HTTP tools route and the MCP server all read it, so a tool added to
`ToolName` / `TOOL_INPUTS` (or to the file tools) is offered on every surface at once, with the
same schema."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from shared.domain.tools import READ_ONLY_TOOLS, ToolName, tool_schema
from shared.file_tools import MUTATING, FileToolName, file_tool_schema


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One tool as every surface offers it: its name, what it is for, and its input schema."""

    name: str
    description: str
    input_schema: dict[str, Any]
    """JSON Schema of the arguments, `$ref`s inlined and titles dropped (self-contained)."""
    file_tool: bool
    """Runs in the agent's home (the file tools) rather than as a ledger command."""
    read_only: bool
    """Changes nothing (a read); clients may call it freely."""


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """Inline `$ref`s and drop titles: some OpenAI-compatible servers reject `$defs`."""
    if isinstance(node, list):
        return [_inline(value, defs) for value in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    if "$ref" in node:
        out.update(_inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs))
    for key, value in node.items():
        if key in ("title", "$defs", "$ref"):
            continue
        if key == "properties":
            out[key] = {name: _inline(prop, defs) for name, prop in value.items()}
        else:
            out[key] = _inline(value, defs)
    return out


def _definition(
    name: str, schema: dict[str, Any], *, file_tool: bool, read_only: bool
) -> ToolDefinition:
    inlined = _inline(schema, schema.get("$defs", {}))
    description = str(inlined.pop("description", ""))
    return ToolDefinition(name, description, inlined, file_tool, read_only)


@functools.cache
def tool_definitions(files: bool = True) -> tuple[ToolDefinition, ...]:
    """The WorkItem tools, then (unless turned off) the file tools, in the order the model
    sees them. Built once per process; callers must not mutate the schemas."""
    tools = [
        _definition(
            name.value, tool_schema(name), file_tool=False, read_only=name in READ_ONLY_TOOLS
        )
        for name in ToolName
    ]
    if files:
        tools += [
            _definition(
                name.value, file_tool_schema(name), file_tool=True, read_only=name not in MUTATING
            )
            for name in FileToolName
        ]
    return tuple(tools)


@functools.cache
def _by_name() -> dict[str, ToolDefinition]:
    return {tool.name: tool for tool in tool_definitions()}


def find_tool(name: str) -> ToolDefinition | None:
    """The tool of that name, or None for a name longrun does not serve."""
    return _by_name().get(name)
