"""MCP rounds for the chaos run, and their invariants.

A few builtin agents have one MCP server in their spec: the test fixture server over streamable
HTTP (a process of its own, never killed), whose `lookup` tool answers after 0.3 s so that some
executor kills land in the middle of a call. The scripted model calls it about every todo it
works. A round: one operator request, then wait until its WorkItem is completed.

`check_mcp_calls` reads the histories after quiescence and the server's own log of the calls it
received: every call longrun started is finished or reported unknown (its turn is over), no call
id was started or finished twice, the server received no call id twice (longrun never repeats an
external call), and every call the server received was recorded as started before it was made.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from shared.store.client import AnyRedis, connect
from shared.wire.names import Names
from tests.bench.loadgen import (
    Accepted,
    AgentEvents,
    Ambiguous,
    Api,
    EventWatch,
    StepTimeout,
    Target,
)
from tests.chaos.delegation import spread
from tests.chaos.invariants import Findings
from tests.chaos.stored import stored_history

SERVER = Path(__file__).resolve().parents[1] / "mcp_fixtures" / "server.py"
SERVER_NAME = "facts"
REQUEST = "Look up chaos fact {n} for {agent}, then write down chaos fact {n} for {agent}."
"""Two todos and no wait: the first is worked (and looked up) in one turn, the second ends it."""


@dataclass(frozen=True, slots=True)
class McpOptions:
    agents: int = 4
    duration: float = 40.0
    """New rounds start only within this many seconds."""
    step_timeout: float = 60.0
    run_id: str = "mcp"


@dataclass
class McpLog:
    agents: list[str] = field(default_factory=list)
    accepted: Accepted = field(default_factory=Accepted)
    rounds: int = 0
    crash_blocked: int = 0
    """Rounds whose WorkItem the crash rule blocked (three turns died on it): a visible end."""
    failed: list[str] = field(default_factory=list)
    calls_log: Path | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "agents": len(self.agents),
            "rounds": self.rounds,
            "crash_blocked": self.crash_blocked,
            "failed": self.failed[:20],
        }


class FixtureServer:
    """The fixture MCP server over HTTP on a free loopback port; it logs each call it gets."""

    def __init__(self, workdir: Path) -> None:
        self.log = workdir / "mcp-calls.jsonl"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.log.write_text("")
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and fixture server
            [sys.executable, str(SERVER), "http", str(self.port)],
            env={"PATH": "", "MCP_FIXTURE_LOG": str(self.log)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while self.proc.poll() is None:  # until it listens (readiness, not a timing bound)
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the MCP fixture server exited with {self.proc.returncode}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


class McpRounds:
    def __init__(self, target: Target, options: McpOptions, server: FixtureServer) -> None:
        self.target = target
        self.options = options
        self.server = server
        self.names = Names(target.prefix, target.partitions)
        self.log = McpLog(calls_log=server.log)
        self.log.agents = spread(self.names, f"mcp-{options.run_id}", options.agents)

    def spec(self) -> dict[str, Any]:
        entry = {
            "name": SERVER_NAME,
            "transport": "http",
            "url": self.server.url,
            "allowed_tools": ["lookup"],
            "timeout_s": 10,
        }
        return {"tools": {"mcp_servers": [entry]}}

    async def run(self) -> McpLog:
        redis = connect(self.target.redis_url, cluster=self.target.cluster)
        api = Api(self.target, timeout=min(30.0, self.options.step_timeout))
        watch = EventWatch(redis, self.names)
        try:
            await watch.start()
            began = time.monotonic()
            await asyncio.gather(*(self._agent(a, api, watch, began) for a in self.log.agents))
        finally:
            await watch.stop()
            await api.close()
            await redis.aclose()
        return self.log

    async def _agent(self, agent: str, api: Api, watch: EventWatch, began: float) -> None:
        events = watch.queue(agent)
        try:
            body = {"loop": "builtin", "spec": self.spec()}
            answer = await self._call(api, "PUT", f"/v1/agents/{agent}", body)
            if answer.status_code not in (200, 201):
                raise StepTimeout(f"PUT {agent} answered {answer.status_code}: {answer.text}")
            n = 0
            while time.monotonic() - began < self.options.duration:
                await self._round(agent, n, api, events)
                self.log.rounds += 1
                n += 1
        except StepTimeout as exc:
            self.log.failed.append(f"{agent}: {exc}")

    async def _call(self, api: Api, method: str, path: str, body: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.options.step_timeout
        return await api.call(
            method, path, json=body, deadline=deadline, on_latency=_ignore, on_retry=_ignore
        )

    async def _round(self, agent: str, n: int, api: Api, events: AgentEvents) -> None:
        text = REQUEST.format(n=n, agent=agent)
        deadline = time.monotonic() + self.options.step_timeout
        await self._message(agent, text, api, events, deadline)
        mark = f"chaos fact {n} "
        while True:  # until the round's WorkItem is completed (or blocked by the crash rule)
            try:
                kind, work_item, data = await events.get(deadline - time.monotonic())
            except TimeoutError:
                raise StepTimeout(f"{agent}: round {n} never completed") from None
            if mark not in orjson.dumps(data).decode():
                continue
            if kind == "work_item_completed":
                return
            if _crash_blocked(kind, work_item, data):
                self.log.crash_blocked += 1
                return

    async def _message(
        self, agent: str, text: str, api: Api, events: AgentEvents, deadline: float
    ) -> None:
        """POST the request; after a lost answer, send again only if it never arrived."""
        accepted = self.log.accepted
        while True:
            try:
                response = await api.call(
                    "POST",
                    f"/v1/agents/{agent}/messages",
                    json={"text": text},
                    deadline=deadline,
                    retry=False,
                    on_latency=_ignore,
                    on_retry=_ignore,
                )
            except Ambiguous:
                accepted.ambiguous_messages[agent] += 1
                if await self._arrived(agent, text):
                    return
                continue
            if response.status_code != 202:
                raise StepTimeout(f"POST message answered {response.status_code}")
            accepted.messages[agent].append(str(response.json()["message_id"]))
            return

    async def _arrived(self, agent: str, text: str) -> bool:
        """Whether the agent's history shows the message within a few seconds."""
        redis = connect(self.target.redis_url, cluster=self.target.cluster)
        try:
            for _ in range(50):
                with_text = [
                    d
                    for d in await stored_history(redis, self.names, agent)
                    if d["type"] == "operator_message_received" and d["data"].get("text") == text
                ]
                if with_text:
                    found = str(with_text[0]["data"]["message_id"])
                    self.log.accepted.messages[agent].append(found)
                    return True
                await asyncio.sleep(0.1)
            return False
        except Exception:  # Redis restarting: treat as not seen; the POST is sent again
            return False
        finally:
            await redis.aclose()


def _ignore(_: object) -> None:
    return None


def _crash_blocked(kind: str, work_item: str | None, data: dict[str, Any]) -> bool:
    blocked_by = str((data.get("work_item") or {}).get("blocked_by") or "")
    return (
        kind == "work_item_updated"
        and work_item is not None
        and blocked_by.startswith("turn failed")
    )


# ---------------------------------------------------------------------- invariants


def calls_in(agent: str, docs: list[dict[str, Any]], found: Findings) -> set[str]:
    """The call ids the agent's history started; every one finished once or left unknown."""
    started = Counter(str(d["data"]["call_id"]) for d in docs if d["type"] == "tool_call_started")
    finished = Counter(str(d["data"]["call_id"]) for d in docs if d["type"] == "tool_call_finished")
    outcomes = Counter(str(d["data"]["outcome"]) for d in docs if d["type"] == "tool_call_finished")
    for call_id in sorted(set(started) | set(finished)):
        if started[call_id] != 1 or finished[call_id] > 1:
            found.fail(
                f"{agent}: call {call_id} started {started[call_id]}x, "
                f"finished {finished[call_id]}x"
            )
    found.figures["mcp calls started"] += len(started)
    for outcome, count in outcomes.items():
        found.figures[f"mcp calls {outcome}"] += count
    # No finish record: its turn died in the call, and no later turn ran to record `unknown`;
    # the history views derive unknown for it (the turn check fails any turn still open).
    found.figures["mcp calls unknown, derived"] += sum(1 for c in started if not finished[c])
    return set(started)


def check_server_log(lines: list[dict[str, Any]], started: set[str], found: Findings) -> None:
    """The server got each call id at most once, and only calls recorded as started."""
    received = Counter(str(line.get("call_id")) for line in lines)
    found.figures["mcp calls received by the server"] += len(lines)
    for call_id, count in received.items():
        if count > 1:
            found.fail(f"mcp server: call {call_id} received {count} times")
        if call_id not in started:
            found.fail(f"mcp server: call {call_id} received but never recorded as started")


async def check_mcp_calls(redis: AnyRedis, names: Names, log: McpLog, found: Findings) -> None:
    started: set[str] = set()
    for agent in log.agents:
        docs = await stored_history(redis, names, agent)
        started |= calls_in(agent, docs, found)
    assert log.calls_log is not None
    lines = [json.loads(x) for x in log.calls_log.read_text().splitlines() if x.strip()]
    check_server_log(lines, started, found)
