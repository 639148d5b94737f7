"""Measuring one system of the peers benchmark: the interface each system implements, the
runner (a paced producer and a reader that times follow-ups), the backlog drain, and the CPU
of process trees read from /proc."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from shared.store.client import AnyRedis

ROOT = Path(__file__).resolve().parents[3]

# ---------------------------------------------------------------- processes and CPU


def tree_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) of the processes and all their descendants, from /proc."""
    total, seen, todo = 0.0, set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
        total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def redis_cpu(redis: AnyRedis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@dataclass
class Worker:
    """A peer's worker command, run in its own session so stopping it stops its children."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(  # noqa: S603 - our interpreter, fixed arguments
                self.argv,
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


# ---------------------------------------------------------------- the systems


Sent = list[tuple[str, str]]
"""(event id, agent) pairs, in the order they were enqueued."""


class System(Protocol):
    name: str
    processes: str
    notes: list[str]

    async def setup(self, agents: list[str]) -> None: ...
    async def start(self) -> None: ...
    async def stop_intake(self) -> None: ...
    async def start_intake(self) -> None: ...
    async def stop(self) -> None: ...
    async def send(self, events: Sent) -> None: ...
    async def followups(self) -> list[tuple[str, str | None]]:
        """(agent, event id when the follow-up names it) of follow-ups seen since the last
        call, waiting up to ~100 ms for one."""
        ...

    def pids(self) -> dict[str, int]:
        """The system's processes by role; each counts with its descendants."""
        ...

    async def verify(self, sent: Sent) -> None: ...


# ---------------------------------------------------------------- load and measurement


@dataclass
class Drain:
    events: int
    rate: float
    """Events/s from the first follow-up seen to the last."""
    cpu_us: dict[str, float]
    """CPU per event of each of the system's processes over the same span (user + system)."""
    redis_us: float
    net_us: float
    """All the system's processes and Redis, per event, less what they burn when idle (polls,
    watchdogs, samplers) over the same span: the cost a faster machine would still pay."""

    @property
    def total_us(self) -> float:
        return sum(self.cpu_us.values())


@dataclass(frozen=True)
class Idle:
    """CPU seconds per second that each process, and Redis, use with no event to handle."""

    cpu: dict[str, float]
    redis: float

    @property
    def total(self) -> float:
        return sum(self.cpu.values()) + self.redis


async def idle(system: System, redis: AnyRedis, seconds: float = 3.0) -> Idle:
    pids = system.pids()
    before = {role: tree_cpu([pid]) for role, pid in pids.items()}
    server, started = await redis_cpu(redis), time.perf_counter()
    await asyncio.sleep(seconds)
    wall = time.perf_counter() - started
    used = {role: (tree_cpu([pid]) - before[role]) / wall for role, pid in pids.items()}
    return Idle(used, (await redis_cpu(redis) - server) / wall)


@dataclass
class Runner:
    """Drives one system: a producer that keeps one event in flight per agent at most, and a
    reader that times each follow-up against its agent's event."""

    system: System
    redis: AnyRedis
    agents: list[str]
    sent: Sent = field(default_factory=list)
    in_flight: dict[str, tuple[str, float]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    stopping: bool = False
    counter: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a follow-up arrives after the last reset."""

    def next_event(self, agent: str, now: float) -> tuple[str, str]:
        self.counter += 1
        event_id = f"e{self.counter}"
        self.in_flight[agent] = (event_id, now)
        self.sent.append((event_id, agent))
        return event_id, agent

    async def read(self) -> None:
        while not self.stopping:
            got = await self.system.followups()
            now = time.perf_counter()
            for agent, event_id in got:
                expected = self.in_flight.pop(agent, None)
                if expected is None or event_id not in (None, expected[0]):
                    self.unexpected.append(f"{agent}:{event_id}")
                    continue
                self.latencies.append(now - expected[1])
                self.arrivals.append(now)
                self.arrived.set()

    async def produce(self, rate: float, seconds: float) -> int:
        """Open loop: events due at `rate`, round robin, each to an agent with nothing in
        flight (a busy agent is skipped: `sent` says what could be offered)."""
        cycle, sent, started = _cycle(self.agents), 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            due = min(int(rate * elapsed) - sent, len(self.agents) - len(self.in_flight))
            if due > 0:
                batch, now = [], time.perf_counter()
                for _ in range(due):
                    agent = next(cycle)
                    while agent in self.in_flight:
                        agent = next(cycle)
                    batch.append(self.next_event(agent, now))
                await self.system.send(batch)
                sent += due
            await asyncio.sleep(0.002)
        return sent

    async def settle(self, within: float = 600.0) -> None:
        deadline = time.monotonic() + within
        while self.in_flight:
            assert time.monotonic() < deadline, f"{len(self.in_flight)} follow-ups missing"
            await asyncio.sleep(0.05)

    def reset(self) -> None:
        self.latencies.clear()
        self.arrivals.clear()
        self.arrived.clear()


def _cycle(items: list[str]) -> Iterator[str]:
    while True:
        yield from items


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] * 1000 if ordered else float("nan")


async def drain(runner: Runner, quiet: Idle) -> Drain:
    """Stop the intake, enqueue one event per agent, start it again, wait for every follow-up;
    CPU is sampled at the first follow-up and at the last."""
    system = runner.system
    await system.stop_intake()
    runner.reset()
    now = time.perf_counter()
    await system.send([runner.next_event(agent, now) for agent in runner.agents])
    await system.start_intake()
    await runner.arrived.wait()
    pids = system.pids()
    cpu = {role: tree_cpu([pid]) for role, pid in pids.items()}
    server, started = await redis_cpu(runner.redis), time.perf_counter()
    await runner.settle()
    server, window = await redis_cpu(runner.redis) - server, time.perf_counter() - started
    used = {role: tree_cpu([pid]) - cpu[role] for role, pid in pids.items()}
    span = runner.arrivals[-1] - runner.arrivals[0]
    n = len(runner.arrivals)
    net = sum(used.values()) + server - quiet.total * window
    per_event = {role: seconds / n * 1e6 for role, seconds in used.items()}
    return Drain(n, (n - 1) / span, per_event, server / n * 1e6, net / n * 1e6)
