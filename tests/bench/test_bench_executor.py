"""Turn-executor benchmark: the figures of the "Executor" section of docs/benchmarks.md.

Turns per second for 1 and 2 executor processes (`python -m services.turn_executor`, concurrency
100 each) behind ledger processes, with the scripted provider standing in for a model of fixed
latency (`LONGRUN_SCRIPTED_LATENCY_MS`, 200 ms per round), and the runtime overhead of a turn:
its wall time (lease taken to FinishTurn answered) minus the time spent waiting on the model, as
each executor logs it per turn (`turn_finished`, `overhead_ms`, of which `ledger_ms` waiting on
ledger replies); and CPU per turn of the executors, the ledgers and Redis over the window.

Ticks come from a driver in the test process standing in for the scheduler: it follows every
agent's `turn_finished` event on the partition event streams and publishes the agent's next tick
(behind the outstanding-tick marker, once the lease is free); when an agent's WorkItem is
completed it first sends the agent a new request. Each agent works requests of three todos, so
turns have 3, 2, 2 and 1 rounds (2 on average).

The baseline, in the same run: the ledger floor (`executor_baseline.Floor`), the same ledger
traffic per turn sent from the test process with no executor, for the light phase's agents; the
light phase (few agents, nothing queues) runs the executor on the same load right after it.
Sizes come from BENCH_EXECUTOR_* variables (see `Config`). Nothing about timing is asserted;
what is asserted is that no turn failed and nothing was dead-lettered.
"""

from __future__ import annotations

import asyncio
import os
import platform
import secrets
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as sync_redis

from services.turn_executor.app import executor_redis
from services.turn_executor.lease import Leases
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.functions import load_functions
from shared.tool_gateway import ToolGateway
from shared.wire import commands as c
from shared.wire.codec import Envelope, decode, encode
from shared.wire.names import Names
from shared.wire.ticks import Tick
from tests.bench.executor_baseline import Floor
from tests.bench.test_bench_ledger import process_cpu, redis_cpu
from tests.integration.conftest import ServiceProcess, free_port
from tests.integration.test_executor_process import ensure

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1200)]


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"BENCH_EXECUTOR_{name}", default))


@dataclass(frozen=True)
class Config:
    agents: int = int(_env("AGENTS", 400))
    """Agents kept busy: more than the executors' combined concurrency, so slots never idle."""
    light_agents: int = int(_env("LIGHT_AGENTS", 8))
    """The light phase: few agents, so nothing queues and the overhead is the path's own."""
    concurrency: int = int(_env("CONCURRENCY", 100))
    latency_ms: int = int(_env("LATENCY_MS", 200))
    ledgers: int = int(_env("LEDGERS", 1))
    """Ledger processes, one as `longrun up` runs it: a second split each round's commands in
    two and cost more CPU per turn than it added (docs/benchmarks.md, "Executor")."""
    partitions: int = int(_env("PARTITIONS", 16))
    warmup_s: float = _env("WARMUP_S", 10)
    window_s: float = _env("WINDOW_S", 30)


def request(agent: str, cycle: int) -> c.AppendOperatorMessage:
    text = f"Summarize incident {agent}-{cycle}. Then file the follow-ups. Then close the ticket."
    message_id = f"ask-{agent}-{cycle}"
    return c.AppendOperatorMessage(
        command_id=message_id, agent_id=agent, message_id=message_id, text=text
    )


@dataclass
class Driver:
    """Publishes each agent's next tick as soon as its previous turn has finished."""

    redis: AnyRedis
    names: Names
    client: LedgerClient
    finished: list[tuple[float, str]] = field(default_factory=list)
    cycles: Counter[str] = field(default_factory=Counter)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    """Stops the driver; a flag, not a cancel, which Python 3.11 can swallow (gh-86296)."""

    async def tick(self, agent: str, kind: str) -> None:
        """Wait until the agent is free (lease and marker released), then publish one tick."""
        lease, marker = self.names.lease(agent), self.names.outstanding_tick(agent)
        for _ in range(5000):
            if not await self.redis.exists(lease, marker):
                break
            await asyncio.sleep(0.002)
        tick = Tick(tick_id=new_id("tick_"), agent_id=agent, kind=kind, issued_at=utc_now())
        await self.redis.set(marker, tick.tick_id, px=120_000)
        body = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=tick))
        await self.redis.xadd(
            self.names.ticks(self.names.partition(agent)), {"m": body, "k": agent}
        )

    async def advance(self, agent: str, outcome: str) -> None:
        if self.stop.is_set():
            return
        kind = "continue_current"
        if outcome == "completed":
            self.cycles[agent] += 1
            await self.client.send(request(agent, self.cycles[agent]))
            kind = "input"
        await self.tick(agent, kind)

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def follow(self) -> None:
        """Read turn_finished events from every partition's event stream, from now on."""
        last = {self.names.events(p): "$" for p in range(self.names.partitions)}
        while not self.stop.is_set():
            found = await self.redis.xread(last, count=500, block=500)  # type: ignore[arg-type]
            for stream, entries in found or []:
                last[stream.decode()] = entries[-1][0].decode()
                for _, fields in entries:
                    batch = decode(fields[b"m"]).body
                    for event in batch.events:  # type: ignore[attr-defined]
                        if event.type == "turn_finished":
                            self.finished.append((time.monotonic(), event.data["outcome"]))
                            self.spawn(self.advance(batch.agent_id, event.data["outcome"]))  # type: ignore[attr-defined]


@dataclass
class Result:
    processes: int
    agents: int
    turns: int
    seconds: float
    outcomes: Counter[str]
    overhead_ms: list[float]
    ledger_ms: list[float]
    turn_ms: list[float]
    model_ms: list[float]
    rounds: list[int]
    executor_cpu: float
    ledger_cpu: float
    redis_cpu: float
    loadavg: tuple[float, float]

    @property
    def rate(self) -> float:
        return self.turns / self.seconds


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def logged_turns(paths: list[Path], start: datetime, end: datetime) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.startswith("{") or '"turn_finished"' not in line:
                continue
            doc = orjson.loads(line)
            at = datetime.fromisoformat(doc["timestamp"].replace("Z", "+00:00"))
            if start <= at <= end:
                out.append(doc)
    return out


def spawn(module: str, port_env: str, env: dict[str, str], log: Path) -> ServiceProcess:
    port = free_port()
    proc = ServiceProcess(module, {**env, port_env: str(port)}, port, log)
    proc.start()
    return proc


def cleanup(redis_url: str, prefix: str) -> None:
    client = sync_redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


async def run_phase(cfg: Config, processes: int, agents: int, redis_url: str, tmp: Path) -> Result:
    """One phase on a fresh prefix: `processes` executors (0: the ledger floor, no executor)."""
    prefix = "bx" + secrets.token_hex(4)
    names = Names(prefix=prefix, partitions=cfg.partitions)
    home = tmp / f"home-{prefix}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(cfg.partitions),
        LONGRUN_AGENT_HOME=str(home),
        LONGRUN_LOG_LEVEL="INFO",
        LONGRUN_SCRIPTED_LATENCY_MS=str(cfg.latency_ms),
        LONGRUN_EXECUTOR_CONCURRENCY=str(cfg.concurrency),
    )
    ledgers = [
        spawn("services.ledger", "LONGRUN_LEDGER_PORT", env, tmp / f"ledger-{prefix}-{n}.log")
        for n in range(cfg.ledgers)
    ]
    logs = [tmp / f"executor-{prefix}-{n}.log" for n in range(processes)]
    executors = [spawn("services.turn_executor", "LONGRUN_EXECUTOR_PORT", env, p) for p in logs]
    redis = executor_redis(redis_url, 200)  # a pool big enough for the driver's bursts
    await load_functions(redis)
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id, timeout=60.0)
    try:
        for proc in (*ledgers, *executors):
            await proc.wait_ready(60)
        stack = Stack(redis, names, client, ledgers, executors, logs, home)
        if not executors:
            return await drive_floor(cfg, agents, stack)
        return await drive(cfg, processes, agents, stack)
    finally:
        await asyncio.wait({asyncio.ensure_future(client.stop())}, timeout=5)
        for proc in (*executors, *ledgers):
            try:
                proc.stop()
            except subprocess.TimeoutExpired:
                proc.proc.kill()  # type: ignore[union-attr]
        await redis.aclose()
        cleanup(redis_url, prefix)


@dataclass
class Stack:
    redis: AnyRedis
    names: Names
    client: LedgerClient
    ledgers: list[ServiceProcess]
    executors: list[ServiceProcess]
    logs: list[Path]
    home: Path

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the executors (or, with none, of this process) and ledgers."""
        own = [process_cpu(p.proc.pid) for p in self.executors if p.proc]
        ledger = [process_cpu(p.proc.pid) for p in self.ledgers if p.proc]
        return sum(own) if self.executors else process_cpu(None), sum(ledger)


async def drive_floor(cfg: Config, count: int, stack: Stack) -> Result:
    """The baseline: the same ledger traffic per turn, sent without an executor."""
    redis, names, client = stack.redis, stack.names, stack.client
    agents = [f"agent-{n:04d}" for n in range(count)]
    await set_up(client, agents)
    gateway = ToolGateway(
        client,
        agent_home=stack.home,
        callback_base_url="http://127.0.0.1:8080",
        clock=utc_now,
        new_id=new_id,
    )
    leases = Leases(redis, names, ttl_ms=15_000)
    floor = Floor(client, gateway, leases, stack.home, cfg.latency_ms / 1000)
    runs = [asyncio.create_task(floor.agent(a)) for a in agents]
    await asyncio.sleep(cfg.warmup_s)
    cpu0, redis0, seen0, t0 = (
        stack.cpu(),
        await redis_cpu(redis),
        len(floor.turn_ms),
        time.monotonic(),
    )
    await asyncio.sleep(cfg.window_s)
    cpu1, redis1, seen1, t1 = (
        stack.cpu(),
        await redis_cpu(redis),
        len(floor.turn_ms),
        time.monotonic(),
    )
    loadavg = os.getloadavg()[:2]
    floor.stop.set()
    await asyncio.wait(runs, timeout=30)
    for run in runs:
        run.result()  # a failed baseline turn fails the benchmark
    window = floor.turn_ms[seen0:seen1]
    return Result(
        processes=0,
        agents=count,
        turns=seen1 - seen0,
        seconds=t1 - t0,
        outcomes=Counter(),
        overhead_ms=window,
        ledger_ms=[float("nan")] * len(window),
        turn_ms=window,
        model_ms=[cfg.latency_ms * r for r in floor.rounds[seen0:seen1]],
        rounds=floor.rounds[seen0:seen1],
        executor_cpu=cpu1[0] - cpu0[0],
        ledger_cpu=cpu1[1] - cpu0[1],
        redis_cpu=redis1 - redis0,
        loadavg=(loadavg[0], loadavg[1]),
    )


async def bounded(calls: list[Awaitable[Any]], limit: int = 32) -> None:
    """Await all, at most `limit` at once: a burst of hundreds of new Redis connections on a
    busy machine runs into connect timeouts."""
    slots = asyncio.Semaphore(limit)

    async def one(call: Awaitable[Any]) -> None:
        async with slots:
            await call

    await asyncio.gather(*(one(call) for call in calls))


async def set_up(client: LedgerClient, agents: list[str]) -> None:
    """Each agent created with its first request in its inbox."""
    await bounded([client.send(ensure(a)) for a in agents])
    await bounded([client.send(request(a, 0)) for a in agents])


async def drive(cfg: Config, processes: int, count: int, stack: Stack) -> Result:
    redis, names, client = stack.redis, stack.names, stack.client
    logs = stack.logs
    agents = [f"agent-{n:04d}" for n in range(count)]
    await set_up(client, agents)
    driver = Driver(redis, names, client)
    follower = asyncio.create_task(driver.follow())
    await asyncio.sleep(0.5)  # the follower reads from "$": let it start first
    await bounded([driver.tick(a, "input") for a in agents])
    await asyncio.sleep(cfg.warmup_s)

    cpu0 = stack.cpu()
    redis0, seen0, t0, start = (
        await redis_cpu(redis),
        len(driver.finished),
        time.monotonic(),
        datetime.now(UTC),
    )
    await asyncio.sleep(cfg.window_s)
    cpu1 = stack.cpu()
    redis1, seen1, t1, end = (
        await redis_cpu(redis),
        len(driver.finished),
        time.monotonic(),
        datetime.now(UTC),
    )
    loadavg = os.getloadavg()[:2]

    driver.stop.set()
    await asyncio.wait({follower, *driver.tasks}, timeout=10)
    await asyncio.sleep(1)  # let the log lines of the window's last turns reach the files
    turns = logged_turns(logs, start, end)
    assert all(doc["outcome"] != "failed" for doc in turns)
    assert await redis.xlen(names.dead_letter) == 0
    seconds = t1 - t0
    return Result(
        processes=processes,
        agents=count,
        turns=seen1 - seen0,
        seconds=seconds,
        outcomes=Counter(o for _, o in driver.finished[seen0:seen1]),
        overhead_ms=[doc["overhead_ms"] for doc in turns],
        ledger_ms=[doc["ledger_ms"] for doc in turns],
        turn_ms=[doc["seconds"] * 1000 for doc in turns],
        model_ms=[doc["model_seconds"] * 1000 for doc in turns],
        rounds=[doc["rounds"] for doc in turns],
        executor_cpu=cpu1[0] - cpu0[0],
        ledger_cpu=cpu1[1] - cpu0[1],
        redis_cpu=redis1 - redis0,
        loadavg=(loadavg[0], loadavg[1]),
    )


def report(cfg: Config, results: list[Result]) -> None:
    print()
    print(f"machine: {platform.machine()} {os.cpu_count()} CPU, Python {platform.python_version()}")
    print(
        f"config: concurrency {cfg.concurrency}/process, model "
        f"{cfg.latency_ms} ms/round, {cfg.ledgers} ledger processes, {cfg.partitions} partitions, "
        f"window {cfg.window_s:g} s after {cfg.warmup_s:g} s warm-up"
    )
    print(
        "| executor processes | agents | turns/s | rounds/turn | turn p50 ms | model ms/turn | "
        "overhead p50 ms | overhead p99 ms | of which ledger replies p50 ms | executor own "
        "p50 ms | executor CPU ms/turn | ledger CPU ms/turn | "
        "Redis CPU ms/turn | outcomes | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        per_turn = 1000 / max(r.turns, 1)
        own = [o - w for o, w in zip(r.overhead_ms, r.ledger_ms, strict=True)]
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r.outcomes.items())) or "-"
        who = str(r.processes) if r.processes else "none (ledger floor)"
        print(
            f"| {who} | {r.agents} | {r.rate:.1f} | {statistics.fmean(r.rounds):.2f} | "
            f"{pct(r.turn_ms, 0.5):.0f} | {statistics.fmean(r.model_ms):.0f} | "
            f"{pct(r.overhead_ms, 0.5):.1f} | {pct(r.overhead_ms, 0.99):.1f} | "
            f"{pct(r.ledger_ms, 0.5):.1f} | {pct(own, 0.5):.1f} | "
            f"{r.executor_cpu * per_turn:.2f} | {r.ledger_cpu * per_turn:.2f} | "
            f"{r.redis_cpu * per_turn:.2f} | {outcomes} | {r.loadavg[0]:.1f} / {r.loadavg[1]:.1f} |"
        )
    print(
        "ledger floor: the same ledger traffic per turn sent by this process without an executor "
        "(tests/bench/executor_baseline.py); its 'overhead' is lease taken to FinishTurn answered "
        "minus the model sleeps, its 'executor CPU' is this process's CPU"
    )


async def test_turn_executor_throughput_and_overhead(redis_url: str, tmp_path: Path) -> None:
    cfg = Config()
    counts = [int(n) for n in os.environ.get("BENCH_EXECUTOR_PROCESSES", "1,2").split(",")]
    light = [(0, cfg.light_agents), (1, cfg.light_agents)] if cfg.light_agents > 0 else []
    phases = [(n, cfg.agents) for n in counts] + light
    results = [await run_phase(cfg, n, agents, redis_url, tmp_path) for n, agents in phases]
    report(cfg, results)
    for r in results:
        assert r.turns > 0
