"""MCP servers as tools of a builtin agent, against real servers written with the SDK's own
server class: one over streamable HTTP on a loopback port (a subprocess), one over stdio (a child
of the executor). A scripted turn calls their tools and gets the results; `allowed_tools`
filters, listings are cached per spec version, the call id reaches the server in `_meta`, long
results are cut with a note, and a server that cannot be reached degrades the turn."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from services.turn_executor.mcp_client import McpClients
from services.turn_executor.providers import (
    ChatMessage,
    Provider,
    ProviderConfig,
    ProviderRound,
    ToolSpec,
    build_provider,
)
from shared.metrics import build_metrics
from shared.wire import commands as c
from tests.integration.test_executor_specs import put_spec
from tests.integration.test_executor_turns import (
    AGENT,
    Executor,
    executor,
    home,
    owned_redis,
    script,
)
from tests.unit.test_provider_openai import ChatServer, completion, function_call, serving

__all__ = ["home", "owned_redis"]

SERVER = Path(__file__).resolve().parents[1] / "mcp_fixtures" / "server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    """Until the server accepts connections (or has died): readiness, not a timing bound."""
    while process.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the MCP fixture server exited with {process.returncode}")


@pytest.fixture(scope="module")
def calls_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.jsonl"


@pytest.fixture(scope="module")
def http_url(calls_log: Path) -> Iterator[str]:
    port = free_port()
    env = {"PATH": "", "MCP_FIXTURE_LOG": str(calls_log)}
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and fixture server
        [sys.executable, str(SERVER), "http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


@dataclass
class Tools:
    """Wraps a provider and keeps the tool names and the conversation of every round."""

    inner: Provider
    names: list[list[str]] = field(default_factory=list)
    asked: list[list[dict[str, Any]]] = field(default_factory=list)

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        self.names.append([str(t["function"]["name"]) for t in tools])
        self.asked.append([dict(m) for m in messages])
        return await self.inner.complete(messages, tools)

    async def close(self) -> None:
        await self.inner.close()


def servers(http_url: str, calls_log: Path, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": "web",
            "transport": "http",
            "url": http_url,
            "headers_from_env": {"Authorization": "TEST_MCP_AUTH"},
            **extra,
        },
        {
            "name": "local",
            "transport": "stdio",
            "command": [sys.executable, str(SERVER), "stdio"],
            "env_from_env": {"MCP_FIXTURE_LOG": "TEST_MCP_LOG", "FIXTURE_TOKEN": "TEST_MCP_TOKEN"},
            "allowed_tools": ["echo", "long_text"],
            "max_result_chars": 100,
        },
    ]


@pytest.fixture
async def mcp(calls_log: Path) -> AsyncIterator[McpClients]:
    environ = {
        "TEST_MCP_AUTH": "Bearer s3cret",
        "TEST_MCP_LOG": str(calls_log),
        "TEST_MCP_TOKEN": "child-token",
    }
    clients = McpClients(build_metrics(CollectorRegistry()), ttl_s=300, environ=environ)
    yield clients
    await clients.aclose()


@dataclass
class Setup:
    """What a test needs: the ledger client, a provider-to-executor factory, the MCP client."""

    client: Any
    build: Any
    mcp: McpClients
    url: str
    log: Path

    def run(self, provider: Provider) -> Executor:
        run: Executor = self.build(provider)
        run.service.runner.mcp = self.mcp
        return run


@pytest.fixture
def setup(*, pump, redis, names, client, home, http_url, calls_log, mcp) -> Setup:
    calls_log.write_text("")
    return Setup(
        client, lambda p: executor(redis, names, client, home, p), mcp, http_url, calls_log
    )


def tool_answers(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [orjson.loads(m["content"]) for m in conversation if m["role"] == "tool"]


def logged(calls_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in calls_log.read_text().splitlines()]


CALLS = {
    "text": "Calling tools.",
    "tool_calls": [
        {"name": "web__echo", "arguments": {"text": "over http"}},
        {"name": "local__echo", "arguments": {"text": "over stdio"}},
        {"name": "local__long_text", "arguments": {"chars": 500}},
    ],
}


async def test_a_turn_calls_http_and_stdio_tools_and_gets_their_results(setup: Setup) -> None:
    provider = Tools(script(CALLS, {"text": "done"}))
    run = setup.run(provider)
    spec = {"tools": {"mcp_servers": servers(setup.url, setup.log)}}
    await put_spec(setup.client, spec, "spec-1")
    assert await run.tick() is c.TurnOutcome.YIELDED
    offered = provider.names[0]
    assert offered[-7:] == [
        "web__echo",
        "web__long_text",
        "web__slow",
        "web__lookup",
        "web__fail",
        "local__echo",
        "local__long_text",
    ]
    assert offered.index("CreateWorkItem") < offered.index("web__echo")
    web, local, long = (a["result"] for a in tool_answers(provider.asked[1]))
    assert web == {"outcome": "ok", "content": "echo: over http", "truncated": False}
    assert local["content"] == "echo: over stdio"
    assert long["truncated"] is True
    assert long["content"].startswith("x" * 100 + "\n[truncated: the result has 500 characters")
    seen = logged(setup.log)
    assert [s["tool"] for s in seen] == ["echo", "echo", "long_text"]
    assert all(s["call_id"].startswith("call_") for s in seen)
    assert len({s["call_id"] for s in seen}) == 3
    assert seen[0]["authorization"] == "Bearer s3cret"
    assert seen[1]["fixture_token"] == "child-token"


async def test_over_the_openai_wire_results_reach_the_next_request_and_long_ones_are_cut(
    setup: Setup,
) -> None:
    calls = [
        function_call("call_1", "web__echo", '{"text": "over the wire"}'),
        function_call("call_2", "web__long_text", '{"chars": 100000}'),
    ]
    app = ChatServer()
    app.replies.append((200, completion("Calling.", calls, "tool_calls"), {}))
    app.replies.append((200, completion("Done."), {}))
    async with serving(app) as server:
        config = ProviderConfig(
            kind="openai", base_url=server.base_url, model="stub", max_retries=0
        )
        provider = build_provider(config)
        run = setup.run(provider)
        await put_spec(setup.client, {"tools": {"mcp_servers": servers(setup.url, setup.log)}}, "s")
        assert await run.tick() is c.TurnOutcome.YIELDED
        await provider.close()
    first, second = app.requests
    offered = [tool["function"]["name"] for tool in first["tools"]]
    assert "web__long_text" in offered
    assert "local__fail" not in offered  # allowed_tools hides it
    echo, long = (json.loads(m["content"])["result"] for m in second["messages"][-2:])
    assert echo == {"outcome": "ok", "content": "echo: over the wire", "truncated": False}
    assert long["truncated"] is True
    note = "\n[truncated: the result has 100000 characters; only the first 20000 shown]"
    assert long["content"] == "x" * 20000 + note
    seen = logged(setup.log)
    events = await run.reads.history(AGENT, limit=1000)
    started = [e["data"]["call_id"] for e in events if e["type"] == "tool_call_started"]
    assert [line["call_id"] for line in seen] == started  # each call reached the server once
    assert len(set(started)) == 2


async def test_listings_are_cached_per_spec_version_and_the_child_is_shared(setup: Setup) -> None:
    provider = Tools(script({"text": "one"}, {"text": "two"}, {"text": "three"}))
    run = setup.run(provider)
    spec = {"tools": {"mcp_servers": servers(setup.url, setup.log)}}
    await put_spec(setup.client, spec, "spec-1")
    await run.tick()
    await run.tick()
    assert setup.mcp.listings == 2
    assert setup.mcp.children.started == 1
    spec = {"tools": {"mcp_servers": servers(setup.url, setup.log, timeout_s=30)}}
    await put_spec(setup.client, spec, "spec-2")
    await run.tick()
    assert setup.mcp.listings == 4
    assert (
        setup.mcp.children.started == 1
    )  # the stdio entry did not change: the same child serves it


async def test_an_unreachable_server_degrades_the_turn_and_a_failing_call_is_an_answer(
    setup: Setup,
) -> None:
    dead = {"name": "gone", "transport": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"}
    spec = {"tools": {"mcp_servers": [*servers(setup.url, setup.log), dead]}}
    failing = {"tool_calls": [{"name": "web__fail", "arguments": {}}]}
    provider = Tools(script(failing, {"text": "carried on"}))
    run = setup.run(provider)
    await put_spec(setup.client, spec, "spec-1")
    assert await run.tick() is c.TurnOutcome.YIELDED
    assert not any(name.startswith("gone__") for name in provider.names[0])
    note = provider.asked[0][-1]["content"]
    assert "unavailable this turn" in note
    assert "- gone:" in note
    (answer,) = tool_answers(provider.asked[1])
    assert answer["result"]["outcome"] == "error"
    errors = [
        sample.value
        for family in setup.mcp.metrics.mcp_errors.collect()
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["server"] == "gone"
    ]
    assert errors == [1.0]


async def test_every_call_is_recorded_before_and_after_with_the_args_hash(setup: Setup) -> None:
    provider = Tools(script(CALLS, {"text": "done"}))
    run = setup.run(provider)
    await put_spec(setup.client, {"tools": {"mcp_servers": servers(setup.url, setup.log)}}, "s")
    await run.tick()
    events = await run.reads.history(AGENT, limit=1000)
    calls = [e for e in events if e["type"].startswith("tool_call_")]
    assert [e["type"] for e in calls] == ["tool_call_started", "tool_call_finished"] * 3
    started = calls[0]["data"]
    canonical = '{"text":"over http"}'
    assert started["args_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert (started["server"], started["tool"]) == ("web", "echo")
    assert started["call_id"] == logged(setup.log)[0]["call_id"]
    long = calls[5]["data"]
    assert (long["outcome"], long["result_chars"], long["truncated"]) == ("ok", 500, True)


async def test_a_stdio_server_killed_between_turns_is_restarted_and_serves_the_next_call(
    setup: Setup,
) -> None:
    echo = {"tool_calls": [{"name": "local__echo", "arguments": {"text": "still there?"}}]}
    provider = Tools(script(echo, {"text": "one"}, echo, {"text": "two"}))
    run = setup.run(provider)
    await put_spec(setup.client, {"tools": {"mcp_servers": servers(setup.url, setup.log)}}, "s")
    await run.tick()
    (first,) = logged(setup.log)
    os.kill(first["pid"], signal.SIGKILL)
    # The watcher starts another without waiting for a call (the bound only ends a broken run).
    async with asyncio.timeout(30):
        while setup.mcp.children.started < 2:  # noqa: ASYNC110 - the watcher task restarts it
            await asyncio.sleep(0.05)
    await run.tick()
    (answer,) = tool_answers(provider.asked[-1])
    assert answer["result"]["outcome"] == "ok", answer
    assert answer["result"]["content"] == "echo: still there?"
    second = logged(setup.log)[-1]
    assert second["pid"] != first["pid"]
    assert setup.mcp.children.started == 2


async def until_logged(log: Path, tool: str) -> None:
    """Until the server has received the call (readiness, not a timing bound)."""
    while not any(line["tool"] == tool for line in logged(log)):  # noqa: ASYNC110 - another process writes it
        await asyncio.sleep(0.05)


async def test_a_turn_killed_mid_call_leaves_it_unknown_and_the_next_turn_is_told(
    setup: Setup,
) -> None:
    hang = {"tool_calls": [{"name": "web__slow", "arguments": {"seconds": 3600}}]}
    provider = Tools(script(hang, {"text": "checked first"}))
    run = setup.run(provider)
    await put_spec(setup.client, {"tools": {"mcp_servers": servers(setup.url, setup.log)}}, "s")
    turn = asyncio.create_task(run.tick())
    await until_logged(setup.log, "slow")
    (call_id,) = [line["call_id"] for line in logged(setup.log) if line["tool"] == "slow"]
    assert await outcomes(run) == {call_id: "running"}
    turn.cancel()  # the executor dies between the two records
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    await run.leases.redis.delete(run.leases.names.lease(AGENT))  # its lease expires
    # Derived from the history before any later turn writes a thing: nobody will finish it.
    assert await outcomes(run) == {call_id: "unknown"}
    await run.tick()
    told = "\n".join(str(m["content"]) for m in provider.asked[-1] if m["role"] == "user")
    assert (
        f'call {call_id}: web__slow({{"seconds":3600}}) was started by an interrupted turn; '
        "its outcome is unknown: check before repeating it"
    ) in told
    events = await run.reads.history(AGENT, limit=1000)
    ends = [e["data"] for e in events if e["type"] == "tool_call_finished"]
    assert ends == [
        {"call_id": call_id, "outcome": "unknown", "result_chars": 0, "truncated": False}
    ]
    await run.tick()  # told once: the record is finished now, so no later turn repeats it
    assert "was started by an interrupted turn" not in str(provider.asked[-1])
    assert await outcomes(run) == {call_id: "unknown"}


async def outcomes(run: Executor) -> dict[str, str]:
    """What the history views show for the agent's external calls (derived from every page)."""
    events = await run.reads.history(AGENT, limit=1000)
    return await run.reads.call_outcomes(AGENT, events)


async def test_the_turn_tallies_the_calls_the_history_does_not_record_on_their_own(
    setup: Setup,
) -> None:
    """Run telemetry counts external calls from their records and the others from the turn's
    tally in turn_finished: here 2 rounds, one MCP call (recorded), two builtin calls of which
    one failed (tallied and named)."""
    missing = "wi_" + "0" * 26
    mixed = {
        "tool_calls": [
            {"name": "web__echo", "arguments": {"text": "hi"}},
            {"name": "CreateWorkItem", "arguments": {"objective": "tally me"}},
            {"name": "PickWorkItem", "arguments": {"work_item_id": missing, "reason": "go"}},
        ]
    }
    run = setup.run(Tools(script(mixed, {"text": "done"})))
    await put_spec(setup.client, {"tools": {"mcp_servers": servers(setup.url, setup.log)}}, "s")
    await run.tick()
    events = await run.reads.history(AGENT, limit=1000)
    assert [e["type"] for e in events].count("tool_call_started") == 1
    (finished,) = [e["data"] for e in events if e["type"] == "turn_finished"]
    assert (finished["rounds"], finished["tool_calls"]) == (2, 2)
    (error,) = finished["tool_errors"]
    assert error.startswith("PickWorkItem: work_item_not_found: ")
