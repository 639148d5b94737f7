"""MCP benchmark: one tool call over MCP (`/mcp`, the official SDK's client, streamable HTTP)
against the same call over the HTTP tools route (`POST /v1/agents/{id}/tools/{tool}`, httpx),
in the same run, against one ingress process with a ledger process behind it.

For each tool (GetWorkItem: a read answered from the read model; UpdateWorkItem: a ledger
command and its reply) the two surfaces take turns in blocks of BENCH_MCP_CALLS sequential calls
(one in flight, keep-alive), BENCH_MCP_ROUNDS blocks each, so drift on a shared machine hits both
alike. Printed per surface: p50 and p99 of the call's wall time as the client sees it, the
ingress process's CPU per call (from /proc) and this client process's CPU per call. Nothing
about timing is asserted; every call must succeed.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import TextContent

from tests.bench.test_bench_ingress import OPERATOR, Config, process_cpu, stack

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]

CALLS = int(os.environ.get("BENCH_MCP_CALLS", "300"))
ROUNDS = int(os.environ.get("BENCH_MCP_ROUNDS", "5"))
Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class Figures:
    walls: list[float] = field(default_factory=list)
    server_cpu: float = 0.0
    client_cpu: float = 0.0

    def line(self, label: str) -> str:
        walls = sorted(self.walls)
        p50 = statistics.median(walls) * 1e3
        p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))] * 1e3
        calls = len(walls)
        return (
            f"| {label} | {calls} | {p50:.2f} | {p99:.2f} | "
            f"{self.server_cpu / calls * 1e6:.0f} | {self.client_cpu / calls * 1e6:.0f} |"
        )


async def block(use: Call, tool: str, args: dict[str, Any], pid: int, into: Figures) -> None:
    server, client = process_cpu(pid), time.process_time()
    for _ in range(CALLS):
        start = time.perf_counter()
        answer = await use(tool, args)
        into.walls.append(time.perf_counter() - start)
        assert answer["status"] == "success", answer
    into.server_cpu += process_cpu(pid) - server
    into.client_cpu += time.process_time() - client


async def test_a_tool_call_over_mcp_against_the_http_tools_route(
    redis_url: str, tmp_path: Path
) -> None:
    async with stack(redis_url, tmp_path, Config(), scheduler=False) as (_, procs):
        ingress = procs["ingress"]
        assert ingress.proc is not None
        base = f"http://127.0.0.1:{ingress.port}"
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            # The operator token on both surfaces: an agent token is rate-limited (50/s by
            # default), and sequential calls on loopback go faster than that.
            auth = {"Authorization": f"Bearer {OPERATOR}"}
            put = await http.put("/v1/agents/bench-mcp", json={"loop": "external"}, headers=auth)
            assert put.status_code == 201, put.text

            async def over_http(tool: str, args: dict[str, Any]) -> dict[str, Any]:
                answer = await http.post(
                    f"/v1/agents/bench-mcp/tools/{tool}", json={"args": args}, headers=auth
                )
                return dict(answer.json())

            mcp_http = create_mcp_http_client(headers={**auth, "X-Longrun-Agent": "bench-mcp"})
            transport = streamable_http_client(f"{base}/mcp", http_client=mcp_http)
            async with mcp_http, Client(transport, cache=None) as client:

                async def over_mcp(tool: str, args: dict[str, Any]) -> dict[str, Any]:
                    (content,) = (await client.call_tool(tool, args)).content
                    assert isinstance(content, TextContent)
                    return dict(orjson.loads(content.text))

                created = await over_http("CreateWorkItem", {"objective": "benchmark"})
                item_id = created["result"]["work_item"]["id"]
                workloads = {
                    "GetWorkItem": {"work_item_id": item_id},
                    "UpdateWorkItem": {"work_item_id": item_id, "todo_list": [{"text": "a"}]},
                }
                surfaces = {"HTTP tools route": over_http, "MCP (SDK client)": over_mcp}
                print(f"\nMCP against the HTTP tools route: {ROUNDS} x {CALLS} calls each")
                print(
                    "| tool / surface | calls | p50 ms | p99 ms | ingress CPU µs/call | "
                    "client CPU µs/call |"
                )
                print("|---|---|---|---|---|---|")
                for tool, args in workloads.items():
                    for use in surfaces.values():  # warm-up, not counted
                        await block(use, tool, args, ingress.proc.pid, Figures())
                    figures = {name: Figures() for name in surfaces}
                    for _ in range(ROUNDS):
                        for name, use in surfaces.items():
                            await block(use, tool, args, ingress.proc.pid, figures[name])
                    for name, measured in figures.items():
                        print(measured.line(f"{tool} / {name}"))
