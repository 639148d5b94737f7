"""The chaos harness: the full stack with several processes of every service on a given Redis,
and the controller that kill -9s them (and the Redis it owns) while the load generator runs.

`ChaosStack` takes a Redis URL and a cluster flag, so the Redis Cluster run reuses it unchanged;
`AofRedis` is the private, durable single Redis the single-node chaos run owns and restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis.exceptions

from services.cli.processes import Child, free_port, is_ready, stop_all
from services.cli.redis_server import redis_answers
from services.cli.up import EXECUTOR, INGRESS, LEDGER, SCHEDULER, ServiceKind
from shared.store.client import AnyRedis
from shared.wire.names import Group, Names

KINDS = (LEDGER, SCHEDULER, EXECUTOR, INGRESS)
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class ChaosError(Exception):
    """The harness could not do what it was asked (a process did not start, Redis did not)."""


@dataclass
class AofRedis:
    """A private redis-server with `appendfsync always`: nothing it acknowledged is lost when it
    is killed with SIGKILL and started again on the same port and directory."""

    workdir: Path
    port: int = field(default_factory=free_port)
    child: Child | None = None
    restarts: int = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ChaosError("redis-server is not on PATH")
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
        ]
        self.child = Child("redis", argv, {}, self.port, self.workdir / "redis.log")
        self.child.start()
        deadline = time.monotonic() + 30.0
        # PING answers -LOADING until the AOF is replayed: wait for +PONG.
        while not redis_answers(self.port):
            if self.child.exit_code() is not None or time.monotonic() > deadline:
                raise ChaosError(f"redis-server did not start:\n{self.child.log_tail()}")
            time.sleep(0.05)

    def kill9_and_restart(self) -> float:
        """SIGKILL, then start on the same port and AOF dir; returns seconds until it answered."""
        assert self.child is not None
        began = time.monotonic()
        self.child.kill()
        self.start()
        self.restarts += 1
        return time.monotonic() - began

    def stop(self) -> None:
        if self.child is not None:
            stop_all([self.child], grace=5.0)


@dataclass
class Process:
    """One service process of the stack; restarted with the same argv, env and port."""

    kind: ServiceKind
    index: int
    child: Child
    starts: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind.service}-{self.index}"


@dataclass
class ChaosStack:
    """`replicas` processes of every service on `redis_url`; `cluster` is passed to the services
    (LONGRUN_REDIS_CLUSTER) and to the harness's own clients."""

    redis_url: str
    workdir: Path
    cluster: bool = False
    replicas: int = 2
    prefix: str = field(default_factory=lambda: f"chaos{secrets.token_hex(3)}")
    partitions: int = 16
    extra_env: Mapping[str, str] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    processes: list[Process] = field(default_factory=list)
    python: str = "python"

    @property
    def names(self) -> Names:
        return Names(self.prefix, self.partitions)

    @property
    def ingress_urls(self) -> list[str]:
        return [p.child.base_url for p in self.processes if p.kind is INGRESS]

    def env(self, public_port: int) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
        base.pop("REDIS_URL", None)
        env = {
            **base,
            "REDIS_URL": self.redis_url,
            "LONGRUN_PREFIX": self.prefix,
            "LONGRUN_PARTITIONS": str(self.partitions),
            "LONGRUN_OPERATOR_TOKEN": self.token,
            "LONGRUN_PROVIDER": "scripted",
            "LONGRUN_AGENT_HOME": str(self.workdir / "home"),
            "LONGRUN_LOG_LEVEL": "WARNING",
            "LONGRUN_PUBLIC_URL": f"http://127.0.0.1:{public_port}",
            INGRESS.port_env: str(public_port),
            # A dead consumer's entries are reclaimed, and a dead turn's lease expires, in seconds.
            "LONGRUN_RECLAIM_IDLE_MS": "4000",
            "LONGRUN_LEASE_TTL_MS": "3000",
            # The generator is the only client; it must not be throttled.
            "LONGRUN_CALLBACK_RATE": "0",
            "LONGRUN_AGENT_RATE": "0",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }
        if self.cluster:
            env["LONGRUN_REDIS_CLUSTER"] = "true"
        return env

    def plan(self) -> None:
        ports = set()

        def port() -> int:
            while (p := free_port()) in ports:
                pass
            ports.add(p)
            return p

        ingress_ports = [port() for _ in range(self.replicas)]
        env = self.env(ingress_ports[0])
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for kind in KINDS:
            for index in range(self.replicas):
                p = ingress_ports[index] if kind is INGRESS else port()
                argv = [self.python, "-m", kind.module]
                child = Child(
                    kind.service,
                    argv,
                    {**env, kind.port_env: str(p)},
                    p,
                    logs / f"{kind.service}-{index}.log",
                )
                self.processes.append(Process(kind, index, child))

    def start(self, ready_within: float = 90.0) -> None:
        if not self.processes:
            self.plan()
        for process in self.processes:
            process.child.start()
            process.starts += 1
        self.wait_ready(self.processes, ready_within)

    def wait_ready(self, processes: Sequence[Process], within: float) -> None:
        deadline = time.monotonic() + within
        waiting = list(processes)
        with httpx.Client(timeout=1.0) as http:
            while waiting:
                for process in waiting:
                    code = process.child.exit_code()
                    if code is not None:
                        raise ChaosError(
                            f"{process.name} exited ({code}):\n{process.child.log_tail()}"
                        )
                waiting = [p for p in waiting if not is_ready(http, p.child)]
                if waiting and time.monotonic() > deadline:
                    raise ChaosError(f"not ready: {[p.name for p in waiting]}")
                time.sleep(0.1)

    def kill9(self, process: Process) -> None:
        if process.child.proc is not None and process.child.proc.poll() is None:
            process.child.proc.send_signal(signal.SIGKILL)
            process.child.proc.wait()

    def restart(self, process: Process) -> None:
        process.child.start()
        process.starts += 1

    def stop(self) -> None:
        order = sorted(self.processes, key=lambda p: KINDS.index(p.kind), reverse=True)
        stop_all([p.child for p in order])


# --------------------------------------------------------------------------- recovery


def _id(raw: bytes | str | None) -> tuple[int, int]:
    if raw is None:
        return (0, 0)
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return (int(ms), int(seq or 0))


def group_streams(names: Names, kind: ServiceKind) -> list[tuple[str, str]]:
    """The (stream, group) pairs a service consumes: what it must serve again after a kill."""
    parts = range(names.partitions)
    if kind is LEDGER:
        return [(names.commands(p), Group.LEDGER) for p in parts]
    if kind is SCHEDULER:
        return [(names.events(p), Group.SCHEDULER) for p in parts] + [
            (names.timers_fired(p), Group.SCHEDULER) for p in parts
        ]
    if kind is EXECUTOR:
        return [(names.ticks(p), Group.EXECUTOR) for p in parts]
    return [(names.callbacks, Group.INGRESS)]


async def stream_heads(
    redis: AnyRedis, streams: Sequence[tuple[str, str]]
) -> list[tuple[int, int]]:
    heads = []
    for stream, _ in streams:
        last = await redis.xrevrange(stream, "+", "-", count=1)
        heads.append(_id(last[0][0]) if last else (0, 0))
    return heads


async def served_up_to(
    redis: AnyRedis, streams: Sequence[tuple[str, str]], heads: Sequence[tuple[int, int]]
) -> bool:
    """True when every entry up to `heads` has been delivered to the group and acknowledged."""
    for (stream, group), head in zip(streams, heads, strict=True):
        if head == (0, 0):
            continue
        infos = await redis.xinfo_groups(stream)
        info = next((g for g in infos if _text(g["name"]) == group), None)
        if info is None or _id(info["last-delivered-id"]) < head:
            return False
        summary = await redis.xpending(stream, group)
        if summary["pending"] and _id(summary["min"]) <= head:
            return False
    return True


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# --------------------------------------------------------------------------- the controller


@dataclass
class ChaosLog:
    kills: list[tuple[float, str]] = field(default_factory=list)
    recoveries: dict[str, list[float]] = field(default_factory=dict)
    unrecovered: list[str] = field(default_factory=list)
    redis_restarts: list[float] = field(default_factory=list)
    self_exits: list[str] = field(default_factory=list)
    """Processes that exited without being killed (then restarted): a finding, not a kill."""

    def all_recoveries(self) -> list[float]:
        return sorted(v for values in self.recoveries.values() for v in values)

    def p99(self) -> float | None:
        values = self.all_recoveries()
        return values[min(len(values) - 1, round(0.99 * (len(values) - 1)))] if values else None


@dataclass
class Controller:
    """Every `kill_every` seconds (jittered), kill -9 a random service process and restart it;
    at `redis_restart_at` seconds, kill -9 the Redis too. Restarts anything that died alone."""

    stack: ChaosStack
    redis: AnyRedis
    aof: AofRedis | None
    kill_every: float = 3.0
    redis_restart_at: Sequence[float] = ()
    down_for: float = 0.5
    """How long a killed process stays dead before its restart."""
    recovery_within: float = 60.0
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(1 << 30))
    log: ChaosLog = field(default_factory=ChaosLog)
    _probes: list[asyncio.Task[None]] = field(default_factory=list)

    async def run(self, duration: float) -> ChaosLog:
        rng = random.Random(self.seed)
        began = time.monotonic()
        redis_due = sorted(self.redis_restart_at)
        next_kill = began + self.kill_every * rng.uniform(0.5, 1.5)
        while (now := time.monotonic()) < began + duration:
            self._restart_dead()
            if redis_due and now - began >= redis_due[0] and self.aof is not None:
                redis_due.pop(0)
                # In this thread: children are forked only while no other thread runs.
                took = self.aof.kill9_and_restart()
                self.log.redis_restarts.append(took)
                self.log.kills.append((now - began, "redis"))
            if now >= next_kill:
                await self._kill_one(rng, now - began)
                next_kill = now + self.kill_every * rng.uniform(0.5, 1.5)
            await asyncio.sleep(0.1)
        return self.log

    def _restart_dead(self) -> None:
        for process in self.stack.processes:
            code = process.child.exit_code()
            if code is not None:
                self.log.self_exits.append(f"{process.name} exited {code}")
                self.stack.restart(process)

    async def _kill_one(self, rng: random.Random, at: float) -> None:
        process = rng.choice(self.stack.processes)
        streams = group_streams(self.stack.names, process.kind)
        heads: list[tuple[int, int]] | None
        try:
            heads = await stream_heads(self.redis, streams)
        except REDIS_DOWN:
            heads = None
        began = time.monotonic()
        self.stack.kill9(process)
        self.log.kills.append((at, process.name))
        await asyncio.sleep(self.down_for)
        self.stack.restart(process)
        if heads is not None:
            self._probes.append(
                asyncio.create_task(self._measure(process.kind, streams, heads, began))
            )

    async def _measure(
        self,
        kind: ServiceKind,
        streams: list[tuple[str, str]],
        heads: list[tuple[int, int]],
        began: float,
    ) -> None:
        while time.monotonic() - began < self.recovery_within:
            with contextlib.suppress(*REDIS_DOWN):
                if await served_up_to(self.redis, streams, heads):
                    self.log.recoveries.setdefault(kind.service, []).append(
                        time.monotonic() - began
                    )
                    return
            await asyncio.sleep(0.1)
        self.log.unrecovered.append(f"{kind.service} killed at +{began:.0f}")

    async def settle(self) -> None:
        """Wait for the recovery probes still running."""
        if self._probes:
            await asyncio.gather(*self._probes)
