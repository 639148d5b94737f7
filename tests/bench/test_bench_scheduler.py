"""Scheduler benchmark: event -> tick latency at a fixed event rate, and events/s per process,
for `python -m services.scheduler` and for a hand-written redis-py loop in the same run.

The hand-written loop is the floor of what the protocol costs: XREADGROUP the event streams,
read each touched agent's state (six plain reads), decide with a few comparisons, SET NX the
marker and XADD the tick, XACK. The scheduler does the same job with the full decision (ranked
candidates, budget, rechecks, timers, commands) through faststream.

Run by hand: `.venv/bin/python -m pytest tests/bench/test_bench_scheduler.py -m bench -s`.
Prints figures; asserts nothing about time. Knobs for shorter runs (defaults in brackets):
`BENCH_SCHEDULER_KINDS` (scheduler,raw), `BENCH_SCHEDULER_RATES` (1000,5000),
`BENCH_SCHEDULER_SECONDS` (10), `BENCH_SCHEDULER_WARMUP` (10 s of untimed events at the first
rate, for both implementations), `BENCH_SCHEDULER_BACKLOG` (40000; 0 skips the drains);
`BENCH_SCHEDULER_LONGRUN_<SETTING>` passes `LONGRUN_<SETTING>` to the scheduler;
`BENCH_SCHEDULER_DUMP=<path>` writes each rate's (sent at, latency) pairs to `<path>.<rate>.json`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as sync_redis
from prometheus_client import CollectorRegistry

from services.ledger.service import LedgerService
from shared.domain.index import INDEX_NAMES
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis, connect
from shared.store.functions import load_functions
from shared.wire.codec import Envelope, encode
from shared.wire.events import LedgerEvents
from shared.wire.names import Group, Names
from tests.bench.caller import tuned_like_a_service
from tests.bench.settings import passed_settings
from tests.integration.scheduler_driver import create, ensure

pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 16
RAW_GROUP = "raw-scheduler"
AGENTS_SPREAD = 2000
AGENTS_HOT = 20
KINDS = tuple(os.environ.get("BENCH_SCHEDULER_KINDS", "scheduler,raw").split(","))
RATES = tuple(int(r) for r in os.environ.get("BENCH_SCHEDULER_RATES", "1000,5000").split(","))
SECONDS_PER_RATE = float(os.environ.get("BENCH_SCHEDULER_SECONDS", "10"))
WARMUP_SECONDS = float(os.environ.get("BENCH_SCHEDULER_WARMUP", "10"))
"""Untimed events at the first rate before the timed rates, for both implementations: the
scheduler's first sight of each agent fills its caches (snapshot facts, tick-counter
children), which in a 10 s window made the first seconds' tail the run's p99 (docs/benchmarks.md,
"Scheduler")."""
BACKLOG = int(os.environ.get("BENCH_SCHEDULER_BACKLOG", "40000"))


# ---------------------------------------------------------------- the hand-written baseline


async def raw_loop(redis_url: str, prefix: str, partitions: int) -> None:
    """XREADGROUP events, read state, decide, SET NX + XADD ticks, XACK: nothing else."""
    redis = connect(redis_url)
    names = Names(prefix=prefix, partitions=partitions)
    streams = {names.events(p): ">" for p in range(partitions)}
    await redis.set(f"{prefix}:raw-ready", "1")
    while True:
        got = await redis.xreadgroup(RAW_GROUP, "raw-1", streams, count=100, block=1000)
        for stream, entries in got or []:
            agents = list(dict.fromkeys(f[b"k"].decode() for _, f in entries))
            await _raw_decide(redis, names, agents)
            await redis.xack(stream, RAW_GROUP, *[i for i, _ in entries])


async def _raw_decide(redis: AnyRedis, names: Names, agents: list[str]) -> None:
    pipe = redis.pipeline(transaction=False)
    for a in agents:
        pipe.hget(names.agent(a), "doc")
        pipe.get(names.outstanding_tick(a))
        pipe.exists(names.lease(a))
        pipe.llen(names.inbox(a))
        pipe.zcard(names.class_index(a, INDEX_NAMES[0]))
        pipe.zcard(names.class_index(a, "queued_runnable"))
    state = await pipe.execute()
    pipe = redis.pipeline(transaction=False)
    for n, a in enumerate(agents):
        doc, marker, lease, inbox, current, queued = state[6 * n : 6 * n + 6]
        if doc is None or marker or lease or not (inbox or current or queued):
            continue
        kind = "input" if inbox else "continue_current" if current else "pick_queued"
        seq = orjson.loads(doc)["history_seq"]
        tick_id = f"{a}:{kind}:s{seq}"
        tick = {"tick_id": tick_id, "agent_id": a, "kind": kind, "issued_at": time.time()}
        pipe.set(names.outstanding_tick(a), tick_id, nx=True, px=300_000)
        pipe.xadd(names.ticks(names.partition(a)), {"m": orjson.dumps(tick), "k": a})
    if len(pipe):
        await pipe.execute()


def raw_main() -> None:
    asyncio.run(
        raw_loop(os.environ["REDIS_URL"], os.environ["BENCH_PREFIX"], int(os.environ["BENCH_P"]))
    )


# ---------------------------------------------------------------- processes


@dataclass
class Proc:
    process: asyncio.subprocess.Process
    log: Path
    port: int | None = None
    """The HTTP port a scheduler answers /readyz on; None for the raw loop."""

    async def ready(self, redis: AnyRedis, prefix: str) -> None:
        for _ in range(400):
            if self.port is not None and await _http_ok(self.port):
                return
            if self.port is None and await redis.getdel(f"{prefix}:raw-ready"):
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(self.log.read_text()[-2000:])

    def cpu_seconds(self) -> float:
        """User + system CPU the process has used (Linux /proc)."""
        stat = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")

    async def stop(self) -> None:
        self.process.kill()
        await self.process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _http_ok(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return b" 200 " in line


async def spawn_scheduler(redis_url: str, prefix: str, tmp: Path) -> Proc:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(PARTITIONS),
        LONGRUN_SCHEDULER_PORT=str(port),
        LONGRUN_LOG_LEVEL="WARNING",
        # Bench agents are always owed a tick between events: no watchdog repairs here.
        LONGRUN_WATCHDOG_GRACE_MS=str(3_600_000),
    )
    env.update(passed_settings("scheduler"))
    log = tmp / f"scheduler-{port}.log"
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.scheduler", env=env, cwd=ROOT, stdout=out, stderr=out
        )
    return Proc(process, log, port)


async def spawn_raw(redis_url: str, prefix: str, tmp: Path) -> Proc:
    env = {**os.environ, "REDIS_URL": redis_url, "BENCH_PREFIX": prefix, "BENCH_P": str(PARTITIONS)}
    log = tmp / "raw.log"
    code = "from tests.bench.test_bench_scheduler import raw_main; raw_main()"
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, env=env, cwd=ROOT, stdout=out, stderr=out
        )
    return Proc(process, log)


# ---------------------------------------------------------------- load and measurement


@dataclass
class Bench:
    redis: AnyRedis
    names: Names
    agents: list[str]
    payload: dict[str, bytes] = field(default_factory=dict)
    sent_at: dict[str, float] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    sent_times: list[float] = field(default_factory=list)
    ticks_seen: int = 0

    def event(self, agent: str) -> bytes:
        """One `ledger_events` entry for the agent (the scheduler decides from state, so any
        event kind wakes it); built once per agent, so the producer stays cheap."""
        if agent not in self.payload:
            body = LedgerEvents(agent_id=agent, command_id="bench", events=())
            self.payload[agent] = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=body))
        return self.payload[agent]

    def cycle(self) -> Iterator[str]:
        while True:
            yield from self.agents

    async def produce(self, rate: int, seconds: float) -> int:
        """Events at `rate`, round robin, each to an agent with no tick pending: every event
        then causes exactly one tick, and its latency is never a coalesced neighbour's."""
        agents, sent, started = self.cycle(), 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            due = min(int(rate * elapsed) - sent, len(self.agents) - len(self.sent_at))
            if due > 0:
                pipe = self.redis.pipeline(transaction=False)
                now = time.perf_counter()
                for _ in range(due):
                    agent = next(agents)
                    while agent in self.sent_at:
                        agent = next(agents)
                    self.sent_at[agent] = now
                    stream = self.names.events(self.names.partition(agent))
                    pipe.xadd(stream, {"m": self.event(agent), "k": agent})
                await pipe.execute()
                sent += due
            await asyncio.sleep(0.002)
        return sent

    async def prefill(self, count: int) -> None:
        agents = self.cycle()
        for start in range(0, count, 2000):
            pipe = self.redis.pipeline(transaction=False)
            for _ in range(min(2000, count - start)):
                agent = next(agents)
                stream = self.names.events(self.names.partition(agent))
                pipe.xadd(stream, {"m": self.event(agent), "k": agent})
            await pipe.execute()

    stopping: bool = False

    async def read_ticks(self) -> None:
        """Time each tick against its agent's event; clear the marker (as a turn would) before
        the agent can get its next event."""
        last = {}
        for p in range(PARTITIONS):
            newest = await self.redis.xrevrange(self.names.ticks(p), count=1)
            last[self.names.ticks(p)] = newest[0][0].decode() if newest else "0-0"
        while not self.stopping:
            got = await self.redis.xread(last, count=1000, block=100)
            now = time.perf_counter()
            agents = []
            for stream, entries in got or []:
                last[stream.decode()] = entries[-1][0].decode()
                agents += [fields[b"k"].decode() for _, fields in entries]
            if not agents:
                continue
            self.ticks_seen += len(agents)
            await self.redis.delete(*(self.names.outstanding_tick(a) for a in agents))
            for agent in agents:
                if (sent := self.sent_at.pop(agent, None)) is not None:
                    self.latencies.append(now - sent)
                    self.sent_times.append(sent)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] * 1000 if ordered else float("nan")


async def group_position(redis: AnyRedis, names: Names, group: str) -> tuple[list[bytes], bool]:
    """Each partition's last delivered id for the group, and whether every entry is done
    (delivered up to the stream's last id and acknowledged). Ids, not `entries-read`, which
    Redis forgets after XGROUP SETID."""
    delivered: list[bytes] = []
    done = True
    for p in range(PARTITIONS):
        stream = names.events(p)
        info = await redis.xinfo_stream(stream)
        group_info = next(
            g for g in await redis.xinfo_groups(stream) if g["name"].decode() == group
        )
        delivered.append(group_info["last-delivered-id"])
        done = done and group_info["pending"] == 0
        done = done and group_info["last-delivered-id"] == info["last-generated-id"]
    return delivered, done


@dataclass(frozen=True)
class Drain:
    rate: float
    """Events/s from the first entry the process read until the backlog was done."""
    cpu_us: float
    """CPU the process used per event over the same span (user + system, microseconds)."""


async def drain(redis: AnyRedis, names: Names, group: str, total: int, proc: Proc) -> Drain:
    before, _ = await group_position(redis, names, group)
    while True:
        position, _ = await group_position(redis, names, group)
        if position != before:
            started, cpu = time.perf_counter(), proc.cpu_seconds()
            break
        await asyncio.sleep(0.002)
    while True:
        _, done = await group_position(redis, names, group)
        if done:
            seconds, used = time.perf_counter() - started, proc.cpu_seconds() - cpu
            return Drain(rate=total / seconds, cpu_us=used / total * 1e6)
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------- the run


async def prepare(redis: AnyRedis, names: Names, agents: list[str]) -> None:
    ledger = LedgerService(
        redis,
        names,
        build_metrics(CollectorRegistry()),
        clock=utc_now,
        new_id=new_id,
        wake_limit=25,
    )
    for start in range(0, len(agents), 200):
        chunk = agents[start : start + 200]
        await ledger.apply_batch([ensure(a) for a in chunk])
        await ledger.apply_batch([create(a, new_id("wi_")) for a in chunk])
    for p in range(PARTITIONS):
        for group in (Group.SCHEDULER, RAW_GROUP):
            await redis.xgroup_create(names.events(p), group, id="$", mkstream=True)


async def fresh_start(redis: AnyRedis, names: Names, agents: list[str]) -> None:
    """Groups recreated at `$` (a killed run's pending entries go with them) and no marker
    left from the previous run."""
    pipe = redis.pipeline(transaction=False)
    for p in range(PARTITIONS):
        for group in (Group.SCHEDULER, RAW_GROUP):
            pipe.xgroup_destroy(names.events(p), group)
            pipe.xgroup_create(names.events(p), group, id="$")
    for agent in agents:
        pipe.delete(names.outstanding_tick(agent))
    await pipe.execute()


def _dump(rate: int, pairs: list[tuple[float, float]]) -> None:
    if dump := os.environ.get("BENCH_SCHEDULER_DUMP"):
        Path(f"{dump}.{rate}.json").write_bytes(orjson.dumps(pairs))


async def latency_runs(bench: Bench) -> dict[int, tuple[float, float, int, int]]:
    out = {}
    if WARMUP_SECONDS > 0:
        await bench.produce(RATES[0], WARMUP_SECONDS)
        await asyncio.sleep(0.5)
    for rate in RATES:
        bench.latencies.clear()
        bench.sent_times.clear()
        bench.sent_at.clear()
        sent = await bench.produce(rate, SECONDS_PER_RATE)
        await asyncio.sleep(0.5)
        _dump(rate, list(zip(bench.sent_times, bench.latencies, strict=True)))
        out[rate] = (
            pct(bench.latencies, 0.5),
            pct(bench.latencies, 0.99),
            sent,
            len(bench.latencies),
        )
    return out


async def run_one(kind: str, bench: Bench, redis_url: str, tmp: Path) -> dict[str, Any]:
    names, redis = bench.names, bench.redis
    group = Group.SCHEDULER if kind == "scheduler" else RAW_GROUP
    spawn = spawn_scheduler if kind == "scheduler" else spawn_raw

    await fresh_start(redis, names, bench.agents)
    proc = await spawn(redis_url, names.prefix, tmp)
    try:
        await proc.ready(redis, names.prefix)
        latency = await latency_runs(bench)
    finally:
        await proc.stop()
    for rate, (p50, p99, sent, timed) in latency.items():
        timing = f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
        print(f"{kind}: {rate}/s offered, {sent} sent, {timed} timed: {timing}")
    drains = {}
    for label, count in (("spread", AGENTS_SPREAD), ("hot", AGENTS_HOT)) if BACKLOG else ():
        await fresh_start(redis, names, bench.agents)
        hot = Bench(redis, names, bench.agents[:count], payload=bench.payload)
        await hot.prefill(BACKLOG)
        proc = await spawn(redis_url, names.prefix, tmp)
        try:
            drains[label] = await drain(redis, names, group, BACKLOG, proc)
        finally:
            await proc.stop()
        found = drains[label]
        print(
            f"{kind}: {BACKLOG} events over {count} agents: {found.rate:,.0f}/s, "
            f"{found.cpu_us:,.0f} us CPU per event"
        )
    return {"latency": latency, "drains": drains}


@pytest.fixture
def bench_redis_url(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """A private redis-server (no persistence) when one is installed, so the figures do not
    depend on whoever else uses the shared server; `BENCH_SHARED_REDIS=1` uses REDIS_URL."""
    binary = shutil.which("redis-server")
    if binary is None or os.environ.get("BENCH_SHARED_REDIS") == "1":
        yield redis_url
        return
    port = _free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
    server = subprocess.Popen(  # noqa: S603 - the installed redis-server, fixed arguments
        [*args, "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL
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


@pytest.fixture
def bench_prefix(bench_redis_url: str) -> Iterator[str]:
    value = "bench" + secrets.token_hex(3)
    yield value
    client = sync_redis.Redis.from_url(bench_redis_url)
    keys = list(client.scan_iter(match=f"{value}:*", count=5000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    client.close()


@pytest.mark.timeout(1200)
async def test_bench_event_to_tick(bench_redis_url: str, bench_prefix: str, tmp_path: Path) -> None:
    redis_url = bench_redis_url
    redis = connect(redis_url)
    await load_functions(redis)
    names = Names(prefix=bench_prefix, partitions=PARTITIONS)
    agents = [f"bench-{n}" for n in range(AGENTS_SPREAD)]
    await prepare(redis, names, agents)
    bench = Bench(redis, names, agents)
    reader = asyncio.create_task(bench.read_ticks())
    results = {}
    try:
        with tuned_like_a_service():
            for kind in KINDS:
                results[kind] = await run_one(kind, bench, redis_url, tmp_path)
    finally:
        bench.stopping = True  # cancelling a blocked read would leak its connection
        await reader
        await redis.aclose()
    _report(results)


def _report(results: dict[str, dict[str, Any]]) -> None:
    print(
        f"\nscheduler benchmark ({os.getloadavg()[0]:.1f} load average at the end): "
        f"{PARTITIONS} partitions, {AGENTS_SPREAD} agents, "
        f"{os.cpu_count()} CPUs, {SECONDS_PER_RATE:.0f} s per rate, backlog {BACKLOG}"
    )
    print("| implementation | events/s offered | ticks timed | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for kind, res in results.items():
        for rate, (p50, p99, sent, timed) in res["latency"].items():
            print(f"| {kind} | {rate} ({sent} sent) | {timed} | {p50:.2f} | {p99:.2f} |")
    print("| implementation | agents | backlog events/s | CPU µs per event |")
    print("|---|---|---|---|")
    for kind, res in results.items():
        for label, count in (("spread", AGENTS_SPREAD), ("hot", AGENTS_HOT)) if BACKLOG else ():
            found = res["drains"][label]
            print(f"| {kind} | {count:,} | {found.rate:,.0f} | {found.cpu_us:,.0f} |")
