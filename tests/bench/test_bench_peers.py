"""Peers side by side: longrun's callback -> ledger -> scheduler -> tick path against Celery and
Taskiq's Redis stream broker on the same workload shape, in one run, on one private Redis.

The shape: an event comes in, a handler records it durably, a follow-up message goes out, and a
reader in this process sees the follow-up. For longrun the event is an entry of
`<prefix>:callbacks` carrying an external wait's capability token; ingress turns it into a
RecordCallback command, the ledger applies it (wait_triggered in the agent's hashed history),
the scheduler decides and publishes a `review_triggered` tick, which the reader takes (and
releases the outstanding-tick marker, as the executor would after its turn). For the peers the
event is a task; the handler counts it, keeps the last id and appends it to the agent's list in
one MULTI, then enqueues a follow-up task on another queue, which the reader takes.

Two phases per system: an open loop at a fixed rate (latency from the producer's enqueue to
the follow-up visible to the reader), and a pre-loaded backlog of one event per agent drained by
freshly started workers (events/s from the first follow-up to the last). Over the drain, the CPU
per event of each process and of Redis, less what they use idle (measured for 3 s before), gives
a ceiling (cores / CPU per event) that a shared machine distorts far less than the rates. Asserts
only that every event was recorded exactly once and produced exactly one follow-up; nothing
about time.

Run by hand: `.venv/bin/python -m pytest tests/bench/test_bench_peers.py -m bench -s`; sizes
from BENCH_PEERS_* variables (see `Config`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis

from shared.store.client import AnyRedis, connect
from tests.bench.caller import tuned_like_a_service
from tests.bench.peers.longrun import Longrun
from tests.bench.peers.measure import Drain, Idle, Runner, System, drain, idle, pct
from tests.bench.peers.queues import Celery, Taskiq
from tests.integration.conftest import free_port

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def _env(name: str, default: str) -> str:
    return os.environ.get(f"BENCH_PEERS_{name}", default)


@dataclass(frozen=True)
class Config:
    agents: int = int(_env("AGENTS", "5000"))
    """Agents, and the backlog's size: one event per agent, so no longrun tick coalesces."""
    rate: float = float(_env("RATE", "500"))
    """Events/s offered in the open-loop phase."""
    seconds: float = float(_env("SECONDS", "10"))
    warmup: int = int(_env("WARMUP", "200"))
    """Events sent (and awaited) before the measured phases, once the workers are up."""
    systems: tuple[str, ...] = tuple(_env("SYSTEMS", "longrun,celery,taskiq").split(","))
    celery_prefetch: int = int(_env("CELERY_PREFETCH", "4"))
    aof: bool = _env("AOF", "0") == "1"
    """Run the private Redis with `appendonly yes`, `appendfsync everysec` (default: none)."""


async def run_system(system: System, redis: AnyRedis, cfg: Config) -> dict[str, Any]:
    agents = [f"agent-{n}" for n in range(cfg.agents)]
    started = time.perf_counter()
    await system.setup(agents)
    setup = time.perf_counter() - started
    await system.start()
    runner = Runner(system, redis, agents)
    reader = asyncio.create_task(runner.read())
    try:
        await runner.produce(cfg.warmup / 2, 2.0)
        await runner.settle()
        runner.reset()
        offered = await runner.produce(cfg.rate, cfg.seconds)
        await runner.settle()
        latency = (offered, pct(runner.latencies, 0.5), pct(runner.latencies, 0.99))
        quiet = await idle(system, redis)
        drained = await drain(runner, quiet)
    finally:
        runner.stopping = True  # cancelling a blocked read would leak its connection
        await reader
        await system.stop()
    await system.verify(runner.sent)
    assert runner.unexpected == [], runner.unexpected[:10]
    print(
        f"{system.name}: set-up {setup:.1f} s; {cfg.rate:.0f}/s offered: {offered} sent, "
        f"p50 {latency[1]:.1f} ms, p99 {latency[2]:.1f} ms; backlog {drained.events}: "
        f"{drained.rate:,.0f}/s; CPU per event {_breakdown(drained)}, "
        f"Redis {drained.redis_us:,.0f} us; {drained.net_us:,.0f} us net of idle "
        f"(idle: {_idle(quiet)}); load average {os.getloadavg()[0]:.1f}"
    )
    for note in system.notes:
        print(f"{system.name}: {note}")
    return {"latency": latency, "drain": drained, "idle": quiet, "sent": len(runner.sent)}


def _breakdown(found: Drain) -> str:
    parts = " + ".join(f"{role} {us:,.0f}" for role, us in found.cpu_us.items())
    return f"{found.total_us:,.0f} us ({parts})" if len(found.cpu_us) > 1 else parts


# ---------------------------------------------------------------- the run


@pytest.fixture
def private_redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server on a free loopback port, shared by the three systems one after
    the other; stopped at the end. No persistence unless BENCH_PEERS_AOF=1."""
    binary = shutil.which("redis-server")
    assert binary is not None, "the peers benchmark needs redis-server on PATH"
    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    server = subprocess.Popen(  # noqa: S603 - the installed redis-server, fixed arguments
        [*args, *_persistence(Config()), "--dir", str(tmp_path)], stdout=subprocess.DEVNULL
    )
    client = sync_redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except sync_redis.ConnectionError:
            time.sleep(0.05)
    client.close()
    yield f"redis://127.0.0.1:{port}/0"
    server.terminate()
    server.wait(timeout=10)


def _persistence(cfg: Config) -> list[str]:
    if cfg.aof:
        return ["--appendonly", "yes", "--appendfsync", "everysec"]
    return ["--appendonly", "no"]


def build(kind: str, redis_url: str, tmp: Path, redis: AnyRedis, cfg: Config) -> System:
    if kind == "longrun":
        return Longrun(redis_url, tmp, redis)
    if kind == "celery":
        return Celery(redis_url, tmp, redis, cfg.celery_prefetch)
    if kind == "taskiq":
        return Taskiq(redis_url, tmp, redis)
    raise ValueError(f"unknown system {kind!r}: longrun, celery or taskiq")


async def test_bench_peers(private_redis_url: str, tmp_path: Path) -> None:
    cfg = Config()
    redis = connect(private_redis_url)
    version = (await redis.info("server"))["redis_version"]
    print(
        f"\npeers benchmark: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"Redis {version} (private, {' '.join(_persistence(cfg))}); {cfg}; "
        f"load average {os.getloadavg()[0]:.1f} at the start"
    )
    results: dict[str, dict[str, Any]] = {}
    systems: dict[str, System] = {}
    try:
        for kind in cfg.systems:
            systems[kind] = build(kind, private_redis_url, tmp_path, redis, cfg)
            with tuned_like_a_service():
                results[kind] = await run_system(systems[kind], redis, cfg)
    finally:
        await redis.aclose()
    _report(cfg, systems, results)


def _idle(quiet: Idle) -> str:
    shares = [f"{role} {100 * used:.0f}%" for role, used in quiet.cpu.items()]
    return ", ".join([*shares, f"Redis {100 * quiet.redis:.0f}%"]) + " of a core"


def _report(cfg: Config, systems: dict[str, System], results: dict[str, dict[str, Any]]) -> None:
    """The table, then longrun's ratios to each peer: measured rates, and the CPU-bound
    ceilings (all cores divided by the CPU one event costs the system and Redis, net of what
    they use idle), which say what the rates would be with the machine to themselves."""
    cores = os.cpu_count() or 1
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    print(
        f"| system | processes | sent at {cfg.rate:.0f}/s | p50 ms | p99 ms | backlog events/s "
        "| CPU µs/event: system | Redis | idle | net of idle, all | "
        f"CPU ceiling on {cores} cores |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, res in results.items():
        offered, p50, p99 = res["latency"]
        found: Drain = res["drain"]
        print(
            f"| {kind} | {systems[kind].processes} | {offered} | {p50:.1f} | {p99:.1f} | "
            f"{found.rate:,.0f} | {_breakdown(found)} | {found.redis_us:,.0f} | "
            f"{_idle(res['idle'])} | {found.net_us:,.0f} | {_ceiling(found, cores):,.0f}/s |"
        )
    if "longrun" not in results:
        return
    ours: Drain = results["longrun"]["drain"]
    for kind in results.keys() - {"longrun"}:
        theirs: Drain = results[kind]["drain"]
        ceilings = _ceiling(ours, cores) / _ceiling(theirs, cores)
        print(
            f"longrun / {kind}: backlog events/s {ours.rate / theirs.rate:.2f}x, "
            f"CPU ceiling {ceilings:.2f}x"
        )


def _ceiling(found: Drain, cores: int) -> float:
    return cores * 1e6 / found.net_us
