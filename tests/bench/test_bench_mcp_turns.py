"""MCP call benchmark, the executor's side: an MCP tool call made through a longrun turn against
the same call made with the SDK's client directly, same server, same run.

The server is the test fixture (`tests/mcp_fixtures/server.py`, its `echo` tool) over streamable
HTTP, a process of its own; a ledger process applies the turn's commands. The turn service runs
in this process with a stub model that asks for one `web__echo` call and then answers text, so
each turn has one tool round. Through a turn, a call's time is from the model's answer asking
for it to the next model request carrying its result: the fenced `tool_call_started` record, the
call, the `tool_call_finished` record and the executor's bookkeeping between two rounds. Directly,
the SDK's client calls the same tool, once with a new session per call (as the executor opens
one per HTTP call) and once on a session kept open. The three take turns in blocks of
BENCH_MCP_TURN_CALLS calls, BENCH_MCP_TURN_ROUNDS blocks each, after a warm-up block, so drift on
a shared machine hits all alike. Printed: p50 and p99 per side, the added p50/p99 through a turn
over each direct side, this process's CPU per call and the ledger process's. Nothing about
timing is asserted; every call must succeed.
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from prometheus_client import CollectorRegistry

from services.turn_executor.app import executor_redis
from services.turn_executor.mcp_client import McpClients
from services.turn_executor.providers import ChatMessage, ProviderRound, ToolCall, ToolSpec
from shared.ledger_client import LedgerClient
from shared.metrics import build_metrics
from shared.runtime import configure_logging, new_id, utc_now
from shared.store.functions import load_functions
from shared.wire import commands as c
from shared.wire.names import Names
from tests.bench.test_bench_ingress import process_cpu
from tests.integration.conftest import ServiceProcess, free_port
from tests.integration.test_executor_mcp import SERVER, wait_listening
from tests.integration.test_executor_specs import put_spec
from tests.integration.test_executor_turns import executor

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]

CALLS = int(os.environ.get("BENCH_MCP_TURN_CALLS", "100"))
ROUNDS = int(os.environ.get("BENCH_MCP_TURN_ROUNDS", "3"))
ARGS = {"text": "benchmark"}


@dataclass
class Stub:
    """The model: asks for one echo call, then (seeing its result) answers text; it notes when
    it handed the call over and when the result came back."""

    handed: float = 0.0
    walls: list[float] = field(default_factory=list)

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        if messages[-1].get("role") == "tool":
            self.walls.append(time.perf_counter() - self.handed)
            content = orjson.loads(str(messages[-1]["content"]))
            assert content["result"]["outcome"] == "ok", content
            return ProviderRound(text="done", tool_calls=(), finish_reason="stop")
        call = ToolCall(id="call_1", name="web__echo", arguments=orjson.dumps(ARGS).decode())
        self.handed = time.perf_counter()
        return ProviderRound(text="", tool_calls=(call,), finish_reason="tool_calls")

    async def close(self) -> None:
        return None


@dataclass
class Figures:
    walls: list[float] = field(default_factory=list)
    cpu: float = 0.0
    ledger_cpu: float = 0.0

    def p(self, q: float) -> float:
        walls = sorted(self.walls)
        if q == 0.5:
            return statistics.median(walls) * 1e3
        return walls[min(len(walls) - 1, int(len(walls) * q))] * 1e3

    def line(self, label: str) -> str:
        calls = len(self.walls)
        return (
            f"| {label} | {calls} | {self.p(0.5):.2f} | {self.p(0.99):.2f} | "
            f"{self.cpu / calls * 1e6:.0f} | {self.ledger_cpu / calls * 1e6:.0f} |"
        )


@pytest.fixture
def mcp_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and fixture server
        [sys.executable, str(SERVER), "http", str(port)],
        env={"PATH": ""},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


@asynccontextmanager
async def ledger(redis_url: str, prefix: str, tmp: Path) -> AsyncIterator[ServiceProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    port = free_port()
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS="4",
        LONGRUN_AGENT_HOME=str(tmp / "home"),
        LONGRUN_LOG_LEVEL="WARNING",
        LONGRUN_LEDGER_PORT=str(port),
    )
    proc = ServiceProcess("services.ledger", env, port, tmp / "ledger.log")
    proc.start()
    try:
        await proc.wait_ready()
        yield proc
    finally:
        proc.stop()


async def block(call: Callable[[], Awaitable[float]], pid: int, into: Figures) -> None:
    cpu, ledger_cpu = time.process_time(), process_cpu(pid)
    for _ in range(CALLS):
        into.walls.append(await call())
    into.cpu += time.process_time() - cpu
    into.ledger_cpu += process_cpu(pid) - ledger_cpu


async def test_an_mcp_call_through_a_turn_against_the_sdk_client_directly(
    redis_url: str, tmp_path: Path, mcp_url: str
) -> None:
    configure_logging("INFO")  # as the executor process logs by default (no debug lines)
    prefix = "bm" + secrets.token_hex(4)
    names = Names(prefix=prefix, partitions=4)
    redis = executor_redis(redis_url, 20)
    await load_functions(redis)
    async with ledger(redis_url, prefix, tmp_path) as ledger_proc:
        assert ledger_proc.proc is not None
        pid = ledger_proc.proc.pid
        client = LedgerClient(redis, names, clock=utc_now, new_id=new_id, timeout=10.0)
        await client.start()
        stub = Stub()
        run = executor(redis, names, client, tmp_path / "home", stub)
        mcp = McpClients(build_metrics(CollectorRegistry()), ttl_s=3600)
        run.service.runner.mcp = mcp
        spec = {"tools": {"mcp_servers": [{"name": "web", "transport": "http", "url": mcp_url}]}}
        await put_spec(client, spec, "spec-1")

        async def through_a_turn() -> float:
            before = len(stub.walls)
            assert await run.tick() is c.TurnOutcome.YIELDED
            assert len(stub.walls) == before + 1
            return stub.walls[-1]

        async def fresh_session() -> float:
            started = time.perf_counter()
            async with (
                create_mcp_http_client() as http,
                Client(streamable_http_client(mcp_url, http_client=http), cache=None) as sdk,
            ):
                result = await sdk.call_tool("echo", ARGS)
            assert not result.is_error
            return time.perf_counter() - started

        http = create_mcp_http_client()
        async with (
            http,
            Client(streamable_http_client(mcp_url, http_client=http), cache=None) as kept,
        ):

            async def kept_session() -> float:
                started = time.perf_counter()
                result = await kept.call_tool("echo", ARGS)
                assert not result.is_error
                return time.perf_counter() - started

            sides = {
                "through a longrun turn": through_a_turn,
                "SDK client, a session per call": fresh_session,
                "SDK client, one session kept": kept_session,
            }
            for call in sides.values():  # warm-up: imports, connections, the listing cache
                await block(call, pid, Figures())
            figures = {label: Figures() for label in sides}
            for _ in range(ROUNDS):
                for label, call in sides.items():
                    await block(call, pid, figures[label])
        await mcp.aclose()
        await client.stop()
    await redis.aclose()
    report(figures)


def report(figures: dict[str, Figures]) -> None:
    print(f"\nMCP call through a turn against the SDK client: {ROUNDS} x {CALLS} calls each")
    print(f"load average {os.getloadavg()}")
    print("| side | calls | p50 ms | p99 ms | this process CPU µs/call | ledger CPU µs/call |")
    print("|---|---|---|---|---|---|")
    for label, fig in figures.items():
        print(fig.line(label))
    turn = figures["through a longrun turn"]
    for label, fig in figures.items():
        if fig is not turn:
            print(
                f"added over '{label}': p50 {turn.p(0.5) - fig.p(0.5):+.2f} ms, "
                f"p99 {turn.p(0.99) - fig.p(0.99):+.2f} ms"
            )
