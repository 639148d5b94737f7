"""The one tool registry: every tool once, self-contained schemas, and the surfaces that read it
(the model's tool list, the MCP server's listing) offering exactly its tools."""

from __future__ import annotations

import json
from typing import Any

from services.ingress.mcp_server import REPORT_ARGUMENT, mcp_tool
from services.turn_executor.prompt import tool_specs
from shared.domain.tools import READ_ONLY_TOOLS, TOOL_INPUTS, ToolName
from shared.file_tools import FILE_TOOL_INPUTS, MUTATING, FileToolName
from shared.tool_registry import find_tool, tool_definitions


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for value in node.values() for k in _keys(value)}
    if isinstance(node, list):
        return {k for value in node for k in _keys(value)}
    return set()


def test_every_tool_is_defined_once_in_the_models_order() -> None:
    names = [tool.name for tool in tool_definitions()]
    assert names == [*(t.value for t in ToolName), *(t.value for t in FileToolName)]
    inputs = [*TOOL_INPUTS, *FILE_TOOL_INPUTS]
    assert sorted(names) == sorted(name.value for name in inputs)
    assert [tool.name for tool in tool_definitions(files=False)] == [t.value for t in ToolName]


def test_schemas_are_self_contained_and_refuse_unknown_fields() -> None:
    for tool in tool_definitions():
        assert not {"$ref", "$defs", "title"} & _keys(tool.input_schema), tool.name
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False, tool.name
        assert tool.description, tool.name


def test_reads_are_marked_read_only() -> None:
    read_only = {tool.name for tool in tool_definitions() if tool.read_only}
    expected = {t.value for t in READ_ONLY_TOOLS} | {
        t.value for t in FileToolName if t not in MUTATING
    }
    assert read_only == expected


def test_the_models_tool_list_is_the_registry() -> None:
    for spec, tool in zip(tool_specs(reviews=True), tool_definitions(), strict=True):
        function = spec["function"]
        assert (function["name"], function["description"]) == (tool.name, tool.description)
        assert function["parameters"] == tool.input_schema


def test_the_model_cannot_change_the_registry_through_its_copy() -> None:
    before = json.dumps([tool.input_schema for tool in tool_definitions()])
    tool_specs()[0]["function"]["parameters"]["properties"].clear()
    assert json.dumps([tool.input_schema for tool in tool_definitions()]) == before


def test_mcp_lists_the_registry_schema_with_the_report_only_on_complete() -> None:
    for tool in tool_definitions():
        listed = mcp_tool(tool)
        schema = dict(listed.input_schema)
        properties = dict(schema["properties"])
        if tool.name == ToolName.COMPLETE_WORK_ITEM:
            assert properties.pop(REPORT_ARGUMENT)["type"] == "string"
            assert REPORT_ARGUMENT not in tool.input_schema["properties"]
        assert {**schema, "properties": properties} == tool.input_schema, tool.name
        assert listed.annotations is not None
        assert listed.annotations.read_only_hint is tool.read_only


def test_an_unknown_name_is_no_tool() -> None:
    assert find_tool("LaunchRocket") is None
    found = find_tool("ReadFile")
    assert found is not None
    assert found.file_tool
