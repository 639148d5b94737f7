"""Ingress benchmark: the figures of the "Ingress" section of docs/benchmarks.md, in one run.

1. Accepted callbacks per second over HTTP for one ingress process (`python -m services.ingress`,
   a ledger process behind it), driven by a raw-socket keep-alive load generator on loopback:
   C connections, each sending its next POST /v1/callbacks/{token} when the answer arrives.
2. Callback -> tick latency at a paced rate, through HTTP and through `<prefix>:callbacks`:
   from just before the client sends (or XADDs) to the `<prefix>:wakes` entry the scheduler
   publishes for the agent (`loop: external`), whose entry id carries the Redis clock in ms.
   Without the scheduler service the end point is the `wait_triggered` history event instead.

Each phase uses its own key prefix, deleted at the end (never FLUSHDB). Sizes come from
BENCH_INGRESS_* variables (see `Config`); `BENCH_INGRESS_LONGRUN_<SETTING>` passes
`LONGRUN_<SETTING>` to the services it starts. Nothing about timing is asserted; what is asserted
is that every callback was accepted and counted exactly once.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import platform
import secrets
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as sync_redis

from shared.domain.records import WaitingIntent
from shared.store.client import AnyRedis, connect
from shared.wire.names import Names
from tests.bench.caller import tuned_like_a_service
from tests.bench.settings import passed_settings
from tests.integration.conftest import ServiceProcess, free_port

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

OPERATOR = "bench-operator-" + secrets.token_hex(8)
PARTITIONS = 16


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"BENCH_INGRESS_{name}", default))


@dataclass(frozen=True)
class Config:
    agents: int = int(_env("AGENTS", 200))
    """Capabilities the throughput phase spreads its callbacks over."""
    callbacks: int = int(_env("CALLBACKS", 30_000))
    connections: int = int(_env("CONNECTIONS", 64))
    rates: tuple[float, ...] = tuple(
        float(r) for r in os.environ.get("BENCH_INGRESS_RATES", "100,500").split(",")
    )
    """Callbacks per second offered in the latency phase, one run per rate and path."""
    spacing: float = _env("SPACING", 2.0)
    """Seconds between two callbacks to the same agent (rate x spacing agents per run)."""
    rounds: int = int(_env("ROUNDS", 3))
    """Callbacks per agent and path in each latency run."""
    phases: str = os.environ.get("BENCH_INGRESS_PHASES", "throughput,latency")
    workers: int = int(_env("WORKERS", 1))
    """LONGRUN_INGRESS_WORKERS of the ingress process (HTTP worker processes on one port)."""
    ingress_path: str = os.environ.get("BENCH_INGRESS_PYTHONPATH", "")
    """Extra PYTHONPATH for the ingress process only (to try other packages in it alone)."""


# ------------------------------------------------------------------------------ the stack


def stack_env(redis_url: str, prefix: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(PARTITIONS),
        LONGRUN_AGENT_HOME=str(home),
        LONGRUN_OPERATOR_TOKEN=OPERATOR,
        LONGRUN_CALLBACK_RATE="0",
        LONGRUN_LOG_LEVEL="WARNING",
    )
    env.update(passed_settings("ingress"))
    return env


def has_scheduler() -> bool:
    return importlib.util.find_spec("services.scheduler.app") is not None


@asynccontextmanager
async def stack(
    redis_url: str, tmp: Path, cfg: Config, *, scheduler: bool
) -> AsyncIterator[tuple[Names, dict[str, ServiceProcess]]]:
    prefix = "bi" + secrets.token_hex(4)
    env = stack_env(redis_url, prefix, tmp / prefix)
    wanted = [("ledger", "LONGRUN_LEDGER_PORT"), ("ingress", "LONGRUN_HTTP_PORT")]
    if scheduler:
        wanted.append(("scheduler", "LONGRUN_SCHEDULER_PORT"))
    procs: dict[str, ServiceProcess] = {}
    try:
        for name, port_env in wanted:
            port = free_port()
            own = {**env, port_env: str(port)}
            if name == "ingress":
                own["LONGRUN_INGRESS_WORKERS"] = str(cfg.workers)
                if cfg.ingress_path:
                    own["PYTHONPATH"] = cfg.ingress_path
            log = tmp / f"{prefix}-{name}.log"
            procs[name] = ServiceProcess(f"services.{name}", own, port, log)
            procs[name].start()
        for proc in procs.values():
            await proc.wait_ready(60)
        yield Names(prefix=prefix, partitions=PARTITIONS), procs
    finally:
        for proc in procs.values():
            proc.stop()
        drop_prefix(redis_url, prefix)


def drop_prefix(redis_url: str, prefix: str) -> None:
    client = sync_redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


async def external_waits(port: int, count: int) -> list[tuple[str, str, str]]:
    """(agent id, wait id, capability token) of `count` new external-loop agents."""
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    run = secrets.token_hex(3)
    gate = asyncio.Semaphore(32)

    async def one(http: httpx.AsyncClient, n: int) -> tuple[str, str, str]:
        agent_id = f"bench-{run}-{n}"
        async with gate:
            await http.put(f"/v1/agents/{agent_id}", json={"loop": "external"}, headers=auth)
            answer = await http.post(
                f"/v1/agents/{agent_id}/tools/WaitFor",
                json={"args": {"reason": "waiting for the deploy", "wake": "external"}},
                headers=auth,
            )
        wait = answer.json()["result"]["wait"]
        return agent_id, wait["id"], wait["callback_url"].rsplit("/", 1)[1]

    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        return list(await asyncio.gather(*(one(http, n) for n in range(count))))


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of a process and its live descendants (ingress workers);
    this process alone when pid is None."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return own + sum(process_cpu(int(child)) for child in children)


async def redis_cpu(redis: AnyRedis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


# ----------------------------------------------------------------------- load generator


class Connection:
    """One HTTP/1.1 keep-alive connection that sends a request and reads its answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, path: str, body: bytes) -> int:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


async def flood(port: int, paths: Sequence[str], total: int, connections: int) -> dict[int, int]:
    """Send `total` callbacks as fast as `connections` keep-alive connections allow."""
    statuses: dict[int, int] = defaultdict(int)
    counter = iter(range(total))

    async def worker() -> None:
        conn = await Connection.open(port)
        for n in counter:
            statuses[await conn.post(paths[n % len(paths)], b'{"n":%d}' % n)] += 1
        conn.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return dict(statuses)


async def paced(count: int, rate: float, send: Callable[[int], Any]) -> None:
    """Start send(i) at start + i / rate, without waiting for earlier sends to finish."""
    start = time.perf_counter()
    tasks = []
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(i)))
    await asyncio.gather(*tasks)


# ---------------------------------------------------------------------------- measuring


def percentiles(values: Sequence[float]) -> str:
    if not values:
        return "no samples"
    ms = sorted(v * 1000 for v in values)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return f"p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, max {ms[-1]:.1f} ms (n={len(ms)})"


async def arrivals(redis: AnyRedis, names: Names, scheduler: bool) -> dict[str, list[float]]:
    """Per agent, the wall-clock times its wakes (or wait_triggered events) appeared."""
    found: dict[str, list[float]] = defaultdict(list)
    if scheduler:
        for entry_id, fields in await redis.xrange(names.wakes):
            found[fields[b"agent_id"].decode()].append(int(entry_id.split(b"-")[0]) / 1000)
        return found
    for p in range(names.partitions):
        for _, fields in await redis.xrange(names.events(p)):
            batch = orjson.loads(fields[b"m"])["body"]
            for event in batch["events"]:
                if event["type"] == "wait_triggered":
                    at = event["at"].replace("Z", "+00:00")
                    found[batch["agent_id"]].append(_epoch(at))
    return found


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def latencies(sent: dict[str, list[float]], seen: dict[str, list[float]]) -> list[float]:
    """Match each callback to the first arrival for its agent after it (sent in order)."""
    out = []
    for agent_id, times in sent.items():
        later = sorted(seen.get(agent_id, []))
        for t in sorted(times):
            after = [a for a in later if a >= t - 0.001]
            if after:
                out.append(max(after[0] - t, 0.0))
                later.remove(after[0])
    return out


async def total_triggers(
    redis: AnyRedis, names: Names, waits: Sequence[tuple[str, str, str]]
) -> int:
    pipe = redis.pipeline(transaction=False)
    for agent_id, wait_id, _ in waits:
        pipe.hget(names.waits(agent_id), wait_id)
    docs = await pipe.execute()
    return sum(WaitingIntent.model_validate_json(d).trigger_count for d in docs)


async def settle(redis: AnyRedis, names: Names, waits: Sequence[Any], expected: int) -> None:
    for _ in range(600):
        if await total_triggers(redis, names, waits) >= expected:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # let the scheduler publish the last wakes


# ------------------------------------------------------------------------------- phases


async def phase_throughput(cfg: Config, redis_url: str, tmp: Path) -> None:
    async with stack(redis_url, tmp, cfg, scheduler=False) as (names, procs):
        port = procs["ingress"].port
        waits = await external_waits(port, cfg.agents)
        paths = [f"/v1/callbacks/{token}" for _, _, token in waits]
        redis = connect(redis_url)
        warm = await flood(port, paths, 2000, cfg.connections)
        pids = {name: proc.proc.pid for name, proc in procs.items() if proc.proc}
        before = {name: process_cpu(pid) for name, pid in pids.items()}
        client, server = process_cpu(None), await redis_cpu(redis)
        started = time.perf_counter()
        statuses = await flood(port, paths, cfg.callbacks, cfg.connections)
        wall = time.perf_counter() - started
        cpu = {name: process_cpu(pid) - before[name] for name, pid in pids.items()}
        cpu["load generator"] = process_cpu(None) - client
        cpu["redis"] = await redis_cpu(redis) - server
        print(
            f"\n[1] HTTP callbacks: {statuses.get(202, 0) / wall:,.0f} accepted/s "
            f"({cfg.callbacks} callbacks, {cfg.connections} connections, {cfg.agents} "
            f"capabilities, {wall:.1f} s); statuses {statuses}"
        )
        print(
            "    CPU (share of one core; per callback): "
            + ", ".join(
                f"{k} {100 * v / wall:.0f}%, {1e6 * v / cfg.callbacks:.0f} us"
                for k, v in cpu.items()
            )
        )
        assert statuses == {202: cfg.callbacks}
        assert warm == {202: 2000}
        await settle(redis, names, waits, cfg.callbacks + 2000)
        assert await total_triggers(redis, names, waits) == cfg.callbacks + 2000
        await redis.aclose()


async def timed_http(
    port: int, waits: Sequence[tuple[str, str, str]], cfg: Config, rate: float
) -> tuple[dict[str, list[float]], list[float]]:
    pool: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(32):
        pool.put_nowait(await Connection.open(port))
    sent: dict[str, list[float]] = defaultdict(list)
    acks: list[float] = []

    async def send(i: int) -> None:
        agent_id, _, token = waits[i % len(waits)]
        conn = await pool.get()
        sent[agent_id].append(time.time())
        started = time.perf_counter()
        assert await conn.post(f"/v1/callbacks/{token}", b"{}") == 202
        acks.append(time.perf_counter() - started)
        pool.put_nowait(conn)

    await paced(len(waits) * cfg.rounds, rate, send)
    while not pool.empty():
        pool.get_nowait().close()
    return sent, acks


async def timed_stream(
    redis: AnyRedis, names: Names, waits: Sequence[tuple[str, str, str]], cfg: Config, rate: float
) -> dict[str, list[float]]:
    sent: dict[str, list[float]] = defaultdict(list)

    start = time.perf_counter()
    for i in range(len(waits) * cfg.rounds):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        agent_id, _, token = waits[i % len(waits)]
        entry = {"token": token, "body": b"{}", "content_type": "application/json"}
        sent[agent_id].append(time.time())
        await redis.xadd(names.callbacks, {**entry, "delivery_id": f"s-{i}"})
    return sent


async def phase_latency(cfg: Config, redis_url: str, tmp: Path) -> None:
    scheduler = has_scheduler()
    end = "the scheduler's wake" if scheduler else "the wait_triggered event (no scheduler)"
    async with stack(redis_url, tmp, cfg, scheduler=scheduler) as (names, procs):
        redis = connect(redis_url)
        for rate in cfg.rates:
            await latency_run(cfg, rate, redis, names, port=procs["ingress"].port, end=end)
        await redis.aclose()


async def latency_run(
    cfg: Config, rate: float, redis: AnyRedis, names: Names, *, port: int, end: str
) -> None:
    agents = max(10, int(rate * cfg.spacing))
    http_waits = await external_waits(port, agents)
    stream_waits = await external_waits(port, agents)
    await asyncio.sleep(3)  # let the scheduler digest the set-up events
    count = agents * cfg.rounds
    sent_http, acks = await timed_http(port, http_waits, cfg, rate)
    await settle(redis, names, http_waits, count)
    sent_stream = await timed_stream(redis, names, stream_waits, cfg, rate)
    await settle(redis, names, stream_waits, count)
    seen = await arrivals(redis, names, end.startswith("the scheduler"))
    print(f"\n[2] callback -> {end} at {rate:.0f} callbacks/s, {count} per path:")
    print(f"    HTTP:   {percentiles(latencies(sent_http, seen))}")
    print(f"    stream: {percentiles(latencies(sent_stream, seen))}")
    print(f"    HTTP 202 answer: {percentiles(acks)}")
    assert await total_triggers(redis, names, http_waits) == count
    assert await total_triggers(redis, names, stream_waits) == count


async def test_bench_ingress(redis_url: str, tmp_path: Path) -> None:
    cfg = Config()
    redis = connect(redis_url)
    version = (await redis.info("server"))["redis_version"]
    await redis.aclose()
    print(
        f"\nmachine: {os.cpu_count()} CPUs, {platform.platform()}, Python "
        f"{sys.version.split()[0]}, Redis {version} on loopback; {cfg}"
    )
    print(
        f"ingress HTTP server: uvicorn with {server_stack(cfg.ingress_path)}, "
        f"{cfg.workers} worker process(es)"
    )
    with tuned_like_a_service():
        if "throughput" in cfg.phases:
            await phase_throughput(cfg, redis_url, tmp_path)
        if "latency" in cfg.phases:
            await phase_latency(cfg, redis_url, tmp_path)


def server_stack(extra_path: str) -> str:
    """What uvicorn's `auto` loop and HTTP parser resolve to in the ingress process."""
    found = {
        m: (Path(extra_path) / m).exists() or importlib.util.find_spec(m) is not None
        for m in ("uvloop", "httptools")
    }
    loop = "uvloop" if found["uvloop"] else "asyncio"
    parser = "httptools" if found["httptools"] else "h11"
    return f"{loop} event loop, {parser} HTTP parser"
