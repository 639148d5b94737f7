"""One tool call from outside a turn, whichever surface it came in on (the HTTP tools route or
the MCP server): file tools run in the agent's home (`file_calls`), the others go through the
tool gateway as ledger commands without a fencing token (the ledger orders them with the
agent's turns). Both surfaces answer with the envelope this returns, so they cannot drift."""

from __future__ import annotations

from typing import Any

from services.ingress.deps import Ingress
from services.ingress.file_calls import run_file_call
from shared.domain.tools import ToolEnvelope
from shared.file_tools import FileToolName
from shared.tool_registry import ToolDefinition, find_tool, tool_definitions

UNKNOWN_TOOL_LABEL = "unknown"
"""The metric label of names no tool has, so callers cannot grow the label set."""


async def agent_tools(ingress: Ingress, agent_id: str) -> tuple[ToolDefinition, ...]:
    """The tools the agent is served: the file tools only when its spec has them on."""
    files = (await ingress.reads.agent_spec(agent_id)).spec.tools.files
    return tool_definitions(files)


async def run_tool(
    ingress: Ingress,
    agent_id: str,
    tool_name: str,
    args: dict[str, Any],
    *,
    command_id: str | None,
    assistant_text: str | None,
    by_operator: bool,
) -> ToolEnvelope:
    """The tool's envelope; `command_id` None gets a fresh one (then a retry is a new call).
    `by_operator`: the call came with the operator token, so acceptance checks it adds are
    the operator's."""
    tool = find_tool(tool_name)
    if tool is not None and tool.file_tool:
        name = FileToolName(tool_name)
        envelope = await run_file_call(ingress, agent_id, name, args, command_id)
    else:
        envelope = await ingress.gateway.call(
            agent_id,
            tool_name,
            args,
            command_id=command_id or ingress.new_id("cmd_"),
            report_text=assistant_text,
            by_operator=by_operator,
        )
    label = tool_name if tool is not None else UNKNOWN_TOOL_LABEL
    ingress.metrics.tool_calls.labels(tool=label, status=envelope.status).inc()
    return envelope
