"""Speaking to ingress's `/mcp` with the official SDK's own client over streamable HTTP, and
to its HTTP tools route beside it, so tests can compare the two surfaces call for call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import httpx
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, RequestParamsMeta, TextContent

from tests.integration.ingress.conftest import OPERATOR_TOKEN

COMMAND_ID_META = "longrun/command_id"


def bearer(token: str, agent_id: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if agent_id is not None:
        headers["X-Longrun-Agent"] = agent_id
    return headers


def operator_for(agent_id: str) -> dict[str, str]:
    return bearer(OPERATOR_TOKEN, agent_id)


@asynccontextmanager
async def mcp_client(
    base_url: str, headers: dict[str, str], mode: str = "auto"
) -> AsyncIterator[Client]:
    """The SDK's Client on `<base_url>/mcp` with these headers on every request; `mode` is
    the SDK's: `auto` speaks the current protocol, `legacy` the initialize handshake."""
    http = create_mcp_http_client(headers=headers)
    transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode, cache=None) as client:
        yield client


def envelope(result: CallToolResult) -> dict[str, Any]:
    """The tool envelope a call answered with (its one text content, as JSON)."""
    (content,) = result.content
    assert isinstance(content, TextContent)
    answer = json.loads(content.text)
    assert result.is_error == (answer["status"] == "error")
    return cast(dict[str, Any], answer)


async def call(
    client: Client, tool: str, args: dict[str, Any], command_id: str | None = None
) -> dict[str, Any]:
    meta = cast(RequestParamsMeta, {COMMAND_ID_META: command_id}) if command_id else None
    return envelope(await client.call_tool(tool, args, meta=meta))


async def http_call(
    http: httpx.AsyncClient, agent_id: str, tool: str, args: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """The same call on the HTTP tools route, with the operator token."""
    answer = await http.post(
        f"/v1/agents/{agent_id}/tools/{tool}",
        headers=bearer(OPERATOR_TOKEN),
        json={"args": args, **extra},
    )
    return cast(dict[str, Any], answer.json())
