"""longrun as an MCP server (the official `mcp` SDK's low-level Server): every tool of the
registry with the HTTP tools route's schemas, envelopes, errors and idempotency (both call
`tool_calls.run_tool`), and each WorkItem and its plan as resources. Who the caller acts as was
settled by `mcp_http` before a request reaches these handlers."""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import TypeAdapter, ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from services.ingress.auth import Caller
from services.ingress.deps import Ingress
from services.ingress.tool_calls import run_tool
from shared.agent_home import read_bytes, resolve_in_home
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.tools import GetWorkItemInput, ListWorkItemsInput, ToolEnvelope, ToolName
from shared.domain.views import ListFilter
from shared.ledger_client import LedgerTimeout
from shared.store.client import CLUSTER_UNAVAILABLE
from shared.tool_registry import ToolDefinition, find_tool, tool_definitions
from shared.wire.commands import CommandId

SERVER_NAME = "longrun"
CALLER_STATE = "longrun_caller"
"""The request-state key `mcp_http` stores the authenticated Caller under."""
COMMAND_ID_META = "longrun/command_id"
"""A tool call's `_meta` key for its command id: a repeat returns the first answer."""
REPORT_ARGUMENT = "assistant_text"
"""CompleteWorkItem's extra argument over MCP: the completion report (the HTTP route's
`assistant_text`; a builtin turn's reply text)."""
WORK_ITEM_URI = "longrun://work-items/{id}"
PLAN_URI = "longrun://work-items/{id}/plan"
_URI = re.compile(r"^longrun://work-items/(?P<id>[^/?#]{1,64})(?P<plan>/plan)?$")
_COMMAND_ID = TypeAdapter(CommandId)
_UNAVAILABLE: tuple[type[Exception], ...] = (
    LedgerTimeout,
    RedisConnectionError,
    RedisTimeoutError,
    *CLUSTER_UNAVAILABLE,
)
_INSTRUCTIONS = (
    "longrun keeps your work as durable WorkItems: create one per objective, keep its plan and "
    "todos current, WaitFor what you need (an external wait answers with a callback_url), and "
    "CompleteWorkItem with assistant_text as the operator-facing report. Each tool answers "
    "with a JSON envelope {tool_name, status, result?, warnings, error?}. Put a command id in "
    "_meta['longrun/command_id'] to make a retry safe."
)


def _with_report(schema: dict[str, Any]) -> dict[str, Any]:
    widened = copy.deepcopy(schema)
    widened.setdefault("properties", {})[REPORT_ARGUMENT] = {
        "type": "string",
        "description": "The operator-facing completion report (the HTTP route's "
        "assistant_text); without it the item completes with warning missing_completion_report.",
    }
    return widened


def mcp_tool(tool: ToolDefinition) -> types.Tool:
    """A registry tool as MCP lists it: the same input schema (CompleteWorkItem also takes
    the report) and a read-only hint for the reads."""
    schema = tool.input_schema
    if tool.name == ToolName.COMPLETE_WORK_ITEM:
        schema = _with_report(schema)
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=schema,
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only),
    )


def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
    request = ctx.request
    caller = getattr(getattr(request, "state", None), CALLER_STATE, None)
    if not isinstance(caller, Caller):  # only mcp_http reaches here, and it always sets one
        raise MCPError(INTERNAL_ERROR, "the request was not authenticated")
    return caller


def _command_id(meta: types.RequestParamsMeta | None) -> str | None:
    raw = (meta or {}).get(COMMAND_ID_META)
    if raw is None:
        return None
    try:
        return _COMMAND_ID.validate_python(raw)
    except ValidationError:
        raise MCPError(
            INVALID_PARAMS,
            f"_meta[{COMMAND_ID_META!r}] must be a string of 1 to 200 characters",
            data={"kind": "invalid_request"},
        ) from None


def _split_report(
    tool: ToolDefinition, arguments: dict[str, Any]
) -> tuple[dict[str, Any], str | None, ToolEnvelope | None]:
    """(the tool's own arguments, the report text, an error envelope if the report is bad)."""
    if tool.name != ToolName.COMPLETE_WORK_ITEM or REPORT_ARGUMENT not in arguments:
        return arguments, None, None
    args = dict(arguments)
    report = args.pop(REPORT_ARGUMENT)
    if report is None or isinstance(report, str):
        return args, report, None
    error = DomainError(
        ErrorKind.INVALID_TOOL_INPUT,
        f"{tool.name}: invalid input ({REPORT_ARGUMENT})",
        details={"errors": [{"field": REPORT_ARGUMENT, "problem": "Input should be a string"}]},
    )
    return args, None, ToolEnvelope.failure(tool.name, error)


def _result(envelope: ToolEnvelope) -> types.CallToolResult:
    text = orjson.dumps(envelope.model_dump(mode="json")).decode()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=envelope.error is not None
    )


def _unknown_tool(name: str) -> MCPError:
    known = [tool.name for tool in tool_definitions()]
    return MCPError(
        INVALID_PARAMS,
        f"unknown tool {name!r}",
        data={"kind": ErrorKind.UNKNOWN_TOOL.value, "details": {"known_tools": known}},
    )


def _unavailable() -> MCPError:
    message = "the ledger or Redis did not answer in time; retry with the same command id"
    return MCPError(INTERNAL_ERROR, message, data={"kind": "unavailable"})


def _not_readable(err: DomainError) -> MCPError:
    return MCPError(INVALID_PARAMS, err.message, data=err.body().model_dump(mode="json"))


class LongrunMcp:
    """The handlers, over one ingress's tool gateway and read model."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress
        self.tools = [mcp_tool(tool) for tool in tool_definitions()]
        self.schemas = {tool.name: tool.input_schema for tool in self.tools}
        self.without_files = [mcp_tool(tool) for tool in tool_definitions(files=False)]

    def server(self) -> Server[Any]:
        server: Server[Any] = Server(
            SERVER_NAME,
            instructions=_INSTRUCTIONS,
            get_tool_input_schema=self.schemas.get,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
        )
        # No OpenTelemetry spans per message: longrun's metrics are Prometheus (as for the
        # FastAPI app), and a span per call costs CPU nobody collects.
        server.middleware = []
        return server

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Every tool, less the file tools when the caller's spec turns them off."""
        agent_id = caller_of(ctx).record.state.agent_id
        files = (await self.ingress.reads.agent_spec(agent_id)).spec.tools.files
        return types.ListToolsResult(tools=self.tools if files else self.without_files)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = caller_of(ctx)
        tool = find_tool(params.name)
        if tool is None:
            raise _unknown_tool(params.name)
        args, report, refused = _split_report(tool, params.arguments or {})
        if refused is not None:
            return _result(refused)
        try:
            envelope = await run_tool(
                self.ingress,
                caller.record.state.agent_id,
                tool.name,
                args,
                command_id=_command_id(params.meta),
                assistant_text=report,
                by_operator=caller.operator,
            )
        except _UNAVAILABLE:
            raise _unavailable() from None
        return _result(envelope)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="work-item",
                    uri_template=WORK_ITEM_URI,
                    description="One of your WorkItems: the WorkItemView JSON (GetWorkItem's "
                    "work_item, todo list included).",
                    mime_type="application/json",
                ),
                types.ResourceTemplate(
                    name="work-item-plan",
                    uri_template=PLAN_URI,
                    description="A WorkItem's plan file (edit it with the file tools).",
                    mime_type="text/markdown",
                ),
            ]
        )

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        """The open WorkItems (up to 100, in ranking order) and their plans."""
        agent_id = caller_of(ctx).record.state.agent_id
        listed = await self.ingress.reads.list_work_items(
            agent_id, ListWorkItemsInput(filter=ListFilter.OPEN, limit=100)
        )
        resources = []
        for view in orjson.loads(orjson.dumps(listed["work_items"])):
            item_id, objective = view["id"], view["objective"]
            resources += [
                types.Resource(
                    name=item_id,
                    title=objective,
                    uri=WORK_ITEM_URI.format(id=item_id),
                    mime_type="application/json",
                ),
                types.Resource(
                    name=f"{item_id}/plan",
                    title=f"plan: {objective}",
                    uri=PLAN_URI.format(id=item_id),
                    mime_type="text/markdown",
                ),
            ]
        return types.ListResourcesResult(resources=resources)

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        agent_id = caller_of(ctx).record.state.agent_id
        uri = str(params.uri)
        found = _URI.match(uri)
        if found is None:
            raise MCPError(
                INVALID_PARAMS,
                f"no resource {uri!r}: longrun serves {WORK_ITEM_URI} and {PLAN_URI}",
                data={"kind": "resource_not_found"},
            )
        try:
            answer = await self.ingress.reads.get_work_item(
                agent_id, GetWorkItemInput(work_item_id=found["id"], include_todo_list=True)
            )
        except DomainError as err:
            raise _not_readable(err) from None
        view = answer["work_item"]
        if found["plan"] is None:
            text = orjson.dumps(view).decode()
            return _contents(uri, "application/json", text)
        relative = orjson.loads(orjson.dumps(view))["plan_artifact"]["relative_path"]
        return _contents(uri, "text/markdown", await self._plan(agent_id, relative))

    async def _plan(self, agent_id: str, relative: str) -> str:
        home = self.ingress.gateway.agent_home

        def read() -> str:
            target = resolve_in_home(home, agent_id, relative)
            return read_bytes(target, relative).decode("utf-8", errors="replace")

        try:
            return await asyncio.to_thread(read)
        except DomainError as err:
            raise _not_readable(err) from None


def _contents(uri: str, mime_type: str, text: str) -> types.ReadResourceResult:
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type=mime_type, text=text)]
    )
