"""One tool call from outside a turn, whichever surface it came in on (the HTTP tools route or
the MCP server): file tools run in the agent's home, the others go through the tool gateway as
ledger commands without a fencing token (the ledger orders them with the agent's turns). Both
surfaces answer with the envelope this returns, so they cannot drift apart."""

from __future__ import annotations

import asyncio
from typing import Any

from services.ingress.deps import Ingress
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.tools import ToolEnvelope
from shared.file_tools import FileToolName, run_file_tool
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
        envelope = await _file_tool(ingress, agent_id, FileToolName(tool_name), args)
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


async def _file_tool(
    ingress: Ingress, agent_id: str, name: FileToolName, args: dict[str, Any]
) -> ToolEnvelope:
    """A file tool in the agent's home, unless its spec turns file tools off (`tools.files`)."""
    if not (await ingress.reads.agent_spec(agent_id)).spec.tools.files:
        off = DomainError(
            ErrorKind.UNKNOWN_TOOL,
            f"{name.value} is not one of this agent's tools: its spec turns file tools off",
            recovery_hint="Set tools.files to true in the agent's spec to use the file tools.",
        )
        return ToolEnvelope.failure(name.value, off)
    home = ingress.gateway.agent_home
    return await asyncio.to_thread(run_file_tool, home, agent_id, name, args)
