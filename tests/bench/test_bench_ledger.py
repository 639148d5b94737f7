"""Ledger benchmark: the figures of the "Ledger" section of docs/benchmarks.md, in one run.

1. Commands applied per second on a pre-loaded backlog by
   a. one ledger process (`python -m services.ledger`: faststream batch subscribers);
   b. the baseline: a hand-written redis-py loop (XREADGROUP COUNT batch, the same
      `CommandConsumer.stream.consume` -> `LedgerService.apply_batch` -> lr_load / decide /
      lr_commit, XACK per batch) in this process, without faststream;
   c. the lr_commit calls of (b), recorded and replayed alone (pipelined, per partition): what
      Redis costs without any Python decision work.
2. The tool-call round trip (`ToolGateway.call`, call to envelope) of GetWorkItem (answered from
   the read model) and UpdateWorkItem (sent through the ledger: XADD, ledger, reply), open loop
   at each paced rate of BENCH_LEDGER_RATES, against the same ledger process.
3. Redis memory per WorkItem with todos (with an empty plan and with a full plan preview),
   created for one agent through the ledger process by `LedgerClient.send`, 16 calls in flight.

Every phase uses its own key prefix, deleted at the end (never FLUSHDB). Sizes come from
BENCH_LEDGER_* environment variables (see `Config`). Nothing about timing is asserted; what is
asserted is that every command applied exactly once, nothing stayed pending and nothing was
dead-lettered.

Optional: BENCH_LEDGER_CPROFILE=1 prints a cProfile of the baseline drain;
BENCH_LEDGER_LONGRUN_<SETTING>=value passes LONGRUN_<SETTING> to the ledger process (for
example LEDGER_ROUNDS);
BENCH_LEDGER_PYSPY=/path/to/py-spy records the ledger process during phases 1a and 2 (raw
collapsed stacks, paths printed; BENCH_LEDGER_PYSPY_RATE samples per second, default 250).
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as sync_redis
from prometheus_client import CollectorRegistry

from services.ledger.handlers import CommandConsumer
from services.ledger.service import LedgerService
from shared.agent_home import describe_plan
from shared.domain.index import INDEX_NAMES
from shared.domain.records import PlanArtifact, TodoState
from shared.domain.tools import (
    CreateWorkItemInput,
    TodoInput,
)
from shared.ledger_client import LedgerClient
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis, connect
from shared.store.functions import load_functions
from shared.streams import ensure_groups
from shared.tool_gateway import ToolGateway
from shared.wire import commands as c
from shared.wire.codec import Envelope, encode
from shared.wire.names import Group, Names
from shared.wire.replies import CommandOutcome
from tests.bench.caller import tuned_like_a_service
from tests.bench.settings import passed_settings
from tests.integration.ledger_driver import token_hash

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TIMED_EVENTS = frozenset({"operator_message_received", "work_item_created"})
"""The one history event each benchmark command appends (its `at` is when it was decided)."""


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"BENCH_LEDGER_{name}", default))


@dataclass(frozen=True)
class Config:
    commands: int
    agents: int
    partitions: int
    batch: int
    rates: list[int]
    seconds: float
    call_timeout: float
    items: int
    todos: int
    plan_chars: int
    cprofile: bool
    pyspy: str

    @classmethod
    def from_env(cls) -> Config:
        return cls(
            commands=int(_env("COMMANDS", 20_000)),
            agents=int(_env("AGENTS", 200)),
            partitions=int(_env("PARTITIONS", 16)),
            batch=int(_env("BATCH", 100)),
            rates=[int(x) for x in os.environ.get("BENCH_LEDGER_RATES", "100,250,1000").split(",")],
            seconds=_env("SECONDS", 10),
            call_timeout=_env("CALL_TIMEOUT", 30),
            items=int(_env("ITEMS", 2_000)),
            todos=int(_env("TODOS", 5)),
            plan_chars=int(_env("PLAN_CHARS", 1_600)),
            cprofile=os.environ.get("BENCH_LEDGER_CPROFILE", "") == "1",
            pyspy=os.environ.get("BENCH_LEDGER_PYSPY", ""),
        )


# ------------------------------------------------------------------------------------ workload


def ensure(agent_id: str) -> c.EnsureAgent:
    return c.EnsureAgent(
        command_id=f"ensure-{agent_id}",
        agent_id=agent_id,
        agent_token_hash=token_hash(f"a-{agent_id}"),
        callback_token_hash=token_hash(f"cb-{agent_id}"),
    )


def plan_artifact(work_item_id: str, text: str) -> PlanArtifact:
    rel = f"work-items/{work_item_id}/plan.md"
    return describe_plan(Path(f"/home/agent/{rel}"), rel, text.encode(), utc_now())


def todos(count: int, done: int = 0) -> tuple[TodoInput, ...]:
    return tuple(
        TodoInput(
            text=f"step {n + 1}: check the inputs and write down what changed",
            state=TodoState.COMPLETED if n < done else TodoState.PENDING,
        )
        for n in range(count)
    )


def create(agent_id: str, seq: int, todo_count: int, plan: str = "") -> c.CreateWorkItem:
    wid = new_id("wi_")
    return c.CreateWorkItem(
        command_id=f"create-{agent_id}-{seq}",
        agent_id=agent_id,
        work_item_id=wid,
        plan_artifact=plan_artifact(wid, plan),
        args=CreateWorkItemInput(
            objective=f"Reconcile invoice batch {seq} for {agent_id} and report the differences",
            plan=plan or None,
            todo_list=todos(todo_count),
        ),
    )


def message(agent_id: str, seq: int) -> c.AppendOperatorMessage:
    return c.AppendOperatorMessage(
        command_id=f"msg-{agent_id}-{seq}",
        agent_id=agent_id,
        message_id=f"m-{agent_id}-{seq}",
        text=f"Operator note {seq}: the supplier resent the March invoices, please re-check.",
    )


@dataclass
class Workload:
    """Commands spread round-robin over the agents; each agent alternates message and create."""

    agents: list[str]
    commands: list[c.Command]
    encoded: list[tuple[str, bytes]] = field(default_factory=list)

    @classmethod
    def build(cls, agents: int, total: int, todo_count: int) -> Workload:
        names = [f"bench-agent-{i:04d}" for i in range(agents)]
        commands: list[c.Command] = []
        for k in range(total):
            agent, seq = names[k % agents], k // agents
            commands.append(message(agent, seq) if seq % 2 == 0 else create(agent, seq, todo_count))
        work = cls(names, commands)
        work.encoded = [(cmd.agent_id, envelope(cmd)) for cmd in commands]
        return work

    @property
    def messages(self) -> int:
        return sum(isinstance(cmd, c.AppendOperatorMessage) for cmd in self.commands)

    @property
    def creates(self) -> int:
        return sum(isinstance(cmd, c.CreateWorkItem) for cmd in self.commands)

    def per_partition(self, names: Names) -> Counter[int]:
        return Counter(names.partition(cmd.agent_id) for cmd in self.commands)

    def first_items(self, limit: int) -> list[tuple[str, str]]:
        """(agent, WorkItem id) of the first item created for each of `limit` agents."""
        seen: dict[str, str] = {}
        for cmd in self.commands:
            if isinstance(cmd, c.CreateWorkItem) and cmd.agent_id not in seen:
                seen[cmd.agent_id] = cmd.work_item_id
        return list(seen.items())[:limit]


def envelope(cmd: c.Command) -> bytes:
    return encode(Envelope(id=new_id("msg_"), at=utc_now(), body=cmd))


# ------------------------------------------------------------------------------- redis helpers


async def push(redis: AnyRedis, names: Names, encoded: Sequence[tuple[str, bytes]]) -> None:
    """XADD to the partition command streams, pipelined by 1,000, as a producer would."""
    for start in range(0, len(encoded), 1000):
        pipe = redis.pipeline(transaction=False)
        for agent_id, body in encoded[start : start + 1000]:
            pipe.xadd(names.commands(names.partition(agent_id)), {"m": body})
        await pipe.execute()


async def backlog(redis: AnyRedis, names: Names) -> int | None:
    """Entries the ledger group has not acked yet (lag + pending); None until every group exists."""
    pipe = redis.pipeline(transaction=False)
    for p in range(names.partitions):
        pipe.xinfo_groups(names.commands(p))
    total = 0
    for groups in await pipe.execute():
        mine = [g for g in groups if _text(g["name"]) == Group.LEDGER]
        if not mine or mine[0]["lag"] is None:
            return None
        total += int(mine[0]["lag"]) + int(mine[0]["pending"])
    return total


async def applied_counts(redis: AnyRedis, names: Names, agents: Sequence[str]) -> tuple[int, int]:
    """(inbox messages, WorkItems) over the agents."""
    pipe = redis.pipeline(transaction=False)
    for agent in agents:
        pipe.llen(names.inbox(agent))
        pipe.hlen(names.items(agent))
    counts = await pipe.execute()
    return sum(counts[0::2]), sum(counts[1::2])


async def history_span(redis: AnyRedis, names: Names, agents: Sequence[str]) -> tuple[int, float]:
    """How many benchmark commands the histories record, and seconds from first to last."""
    pipe = redis.pipeline(transaction=False)
    for agent in agents:
        pipe.lrange(names.history(agent), 0, -1)
    stamps = [
        datetime.fromisoformat(doc["at"].replace("Z", "+00:00"))
        for docs in await pipe.execute()
        for doc in map(orjson.loads, docs)
        if doc["type"] in TIMED_EVENTS
    ]
    return len(stamps), (max(stamps) - min(stamps)).total_seconds()


async def check_all_applied(redis: AnyRedis, names: Names, work: Workload) -> tuple[int, float]:
    """Every command applied once, nothing pending, nothing dead-lettered; returns the span."""
    assert await applied_counts(redis, names, work.agents) == (work.messages, work.creates)
    assert await backlog(redis, names) == 0
    assert await redis.xlen(names.dead_letter) == 0
    count, span = await history_span(redis, names, work.agents)
    assert count == len(work.commands)
    return count, span


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def drop_prefix(redis_url: str, prefix: str) -> None:
    client = sync_redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


def new_service(redis: AnyRedis, names: Names) -> LedgerService:
    return LedgerService(
        redis,
        names,
        build_metrics(CollectorRegistry()),
        clock=utc_now,
        new_id=new_id,
        wake_limit=25,
    )


async def ensure_agents(service: LedgerService, agents: Sequence[str]) -> None:
    for start in range(0, len(agents), 100):
        applied = await service.apply_batch([ensure(a) for a in agents[start : start + 100]])
        assert {a.reply.outcome for a in applied} == {CommandOutcome.APPLIED}


# ------------------------------------------------------------------------------------ metering


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of a process; this one when pid is None."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def redis_cpu(redis: AnyRedis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def fcall_stats(redis: AnyRedis) -> dict[str, tuple[int, int]]:
    """(calls, usec) of FCALL and FCALL_RO, server-wide (take differences)."""
    info = await redis.info("commandstats")
    out = {}
    for name in ("fcall", "fcall_ro"):
        stat = info.get(f"cmdstat_{name}", {"calls": 0, "usec": 0})
        out[name] = (int(stat["calls"]), int(stat["usec"]))
    return out


@dataclass
class Usage:
    wall: float = 0.0
    client_cpu: float = 0.0
    redis_cpu: float = 0.0
    fcall: dict[str, tuple[int, int]] = field(default_factory=dict)

    def pct(self, cpu: float) -> str:
        return f"{100 * cpu / self.wall:.0f}%" if self.wall else "-"

    def usec_per_call(self, name: str) -> str:
        calls, usec = self.fcall.get(name, (0, 0))
        return f"{usec / calls:.0f}" if calls else "-"


class Meter:
    """Wall time, CPU of one client process, Redis CPU and Function-call stats over a phase."""

    def __init__(self, redis: AnyRedis, pid: int | None) -> None:
        self.redis, self.pid = redis, pid
        self.started = Usage()

    async def start(self) -> None:
        self.started = Usage(
            time.perf_counter(),
            process_cpu(self.pid),
            await redis_cpu(self.redis),
            await fcall_stats(self.redis),
        )

    async def stop(self) -> Usage:
        end = await fcall_stats(self.redis)
        s = self.started
        return Usage(
            time.perf_counter() - s.wall,
            process_cpu(self.pid) - s.client_cpu,
            await redis_cpu(self.redis) - s.redis_cpu,
            {k: (end[k][0] - s.fcall[k][0], end[k][1] - s.fcall[k][1]) for k in end},
        )


# ------------------------------------------------------------------------------ ledger process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LedgerProcess:
    """`python -m services.ledger` as a real OS process."""

    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        env = {**self.env, "LONGRUN_LEDGER_PORT": str(self.port)}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.ledger"],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def alive(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, self.log_path.read_text()[-3000:]

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.alive()
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
                status = (await reader.readline()).decode()
                writer.close()
                if " 200 " in status:
                    return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"ledger not ready: {self.log_path.read_text()[-2000:]}")


@contextlib.contextmanager
def pyspy(cfg: Config, pid: int, name: str) -> Iterator[None]:
    """Sample the process with py-spy while the block runs (only if BENCH_LEDGER_PYSPY is set)."""
    if not cfg.pyspy:
        yield
        return
    out = Path(tempfile.gettempdir()) / f"bench-ledger-{name}-{pid}.txt"
    spy = subprocess.Popen(  # noqa: S603 - a profiler the operator named
        [
            cfg.pyspy,
            "record",
            "--pid",
            str(pid),
            "--rate",
            os.environ.get("BENCH_LEDGER_PYSPY_RATE", "250"),
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=30)
        print(f"py-spy {name}: {out}")


# ----------------------------------------------------------------------- phase 1: throughput


@dataclass
class Throughput:
    label: str
    commands: int
    span: float
    usage: Usage

    @property
    def rate(self) -> float:
        return self.commands / self.span

    def cpu_per_command(self, cpu_seconds: float) -> float:
        """µs of CPU per command over the metered window (about `rate` commands a second)."""
        return 1e6 * cpu_seconds / (self.rate * self.usage.wall)


async def wait_drained(redis: AnyRedis, names: Names, ledger: LedgerProcess, meter: Meter) -> Usage:
    """Start the meter at the first applied entry (process start-up excluded), stop at zero."""
    total = None
    while total is None:  # the ledger creates its groups at start-up
        ledger.alive()
        total = await backlog(redis, names)
        await asyncio.sleep(0.005)
    while await backlog(redis, names) == total:  # lag + pending drops at the first XACK
        ledger.alive()
        await asyncio.sleep(0.005)
    await meter.start()
    deadline = time.monotonic() + 600
    while await backlog(redis, names) != 0:
        ledger.alive()
        assert time.monotonic() < deadline, "the ledger did not drain the backlog in 10 minutes"
        await asyncio.sleep(0.05)
    return await meter.stop()


async def phase_process(
    cfg: Config, redis: AnyRedis, names: Names, work: Workload, ledger: LedgerProcess
) -> Throughput:
    """Pre-load the backlog, start the ledger process, wait until it has applied all of it."""
    await ensure_agents(new_service(redis, names), work.agents)
    await push(redis, names, work.encoded)
    ledger.start()
    with pyspy(cfg, ledger.pid, "drain"):
        usage = await wait_drained(redis, names, ledger, Meter(redis, ledger.pid))
    count, span = await check_all_applied(redis, names, work)
    await ledger.wait_ready()
    return Throughput("ledger process (faststream)", count, span, usage)


class RecordingLedger(LedgerService):
    """The real service, keeping every lr_commit it made (partition, KEYS, ARGV, commands) for
    phase 1c. One call commits a run of one agent's commands."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        metrics = build_metrics(CollectorRegistry())
        super().__init__(redis, names, metrics, clock=utc_now, new_id=new_id, wake_limit=25)
        self.recorded: list[tuple[int, list[str], list[Any], int]] = []

    async def _commit(self, runs: Any, done: Any) -> Any:
        retry, deferred = await super()._commit(runs, done)
        unapplied = {i for i, _ in [*retry, *deferred]}
        for run in runs:
            if run.plan is None or any(p.index in unapplied for p in run.planned):
                continue
            partition = self.names.partition(run.agent_id)
            self.recorded.append((partition, run.plan.keys, run.plan.sealed(), run.plan.commands))
        return retry, deferred


async def drain(
    redis: AnyRedis, consumer: CommandConsumer, stream: str, expected: int, batch: int
) -> None:
    """The hand-written consumer: XREADGROUP COUNT batch and the same handler, which XACKs the
    batch with its replies."""
    done = 0
    while done < expected:
        found = await redis.xreadgroup(
            Group.LEDGER, "bench-raw", {stream: ">"}, count=batch, block=1000
        )
        for _stream, entries in found or ():
            ids = [entry_id for entry_id, _ in entries]
            bodies = [{_text(k): v for k, v in fields.items()} for _, fields in entries]
            await consumer.stream.consume(stream, [_text(i) for i in ids], bodies)
            done += len(ids)


async def phase_baseline(
    cfg: Config, redis: AnyRedis, names: Names, work: Workload
) -> tuple[Throughput, RecordingLedger, int]:
    service = RecordingLedger(redis, names)
    await ensure_agents(service, work.agents)
    ensures = len(service.recorded)
    streams = [names.commands(p) for p in range(names.partitions)]
    await ensure_groups(redis, streams, Group.LEDGER)
    await push(redis, names, work.encoded)
    consumer = CommandConsumer(service, redis, names)
    expected = work.per_partition(names)
    meter = Meter(redis, None)
    profile = cProfile.Profile() if cfg.cprofile else None
    await meter.start()
    if profile:
        profile.enable()
    await asyncio.gather(
        *(drain(redis, consumer, s, expected[p], cfg.batch) for p, s in enumerate(streams))
    )
    if profile:
        profile.disable()
    usage = await meter.stop()
    if profile:
        print_profile(profile)
    count, span = await check_all_applied(redis, names, work)
    return Throughput("raw redis-py loop, same handler", count, span, usage), service, ensures


def print_profile(profile: cProfile.Profile) -> None:
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(35)
        print(f"\n--- cProfile of the baseline drain, by {order} ---\n{out.getvalue()}")


async def commit_chunks(
    redis: AnyRedis, calls: Sequence[tuple[list[str], list[Any], int]], batch: int
) -> None:
    for start in range(0, len(calls), batch):
        pipe = redis.pipeline(transaction=False)
        chunk = calls[start : start + batch]
        for keys, args, _ in chunk:
            pipe.fcall("lr_commit", len(keys), *keys, *args)
        results = await pipe.execute()
        assert [list(r) for r in results] == [[n] for _, _, n in chunk], results[:3]


async def phase_replay(
    cfg: Config, redis: AnyRedis, recorded: RecordingLedger, ensures: int, target: Names
) -> Throughput:
    """Replay the baseline's lr_commit calls, in order per partition, under another prefix."""
    source = recorded.names.prefix + ":"

    def moved(keys: list[str]) -> list[str]:
        assert all(k.startswith(source) for k in keys)
        return [target.prefix + ":" + k[len(source) :] for k in keys]

    calls = [(p, moved(keys), args, n) for p, keys, args, n in recorded.recorded]
    await commit_chunks(redis, [(k, a, n) for _, k, a, n in calls[:ensures]], cfg.batch)
    by_partition: dict[int, list[tuple[list[str], list[Any], int]]] = defaultdict(list)
    for p, keys, args, n in calls[ensures:]:
        by_partition[p].append((keys, args, n))
    meter = Meter(redis, None)
    await meter.start()
    await asyncio.gather(*(commit_chunks(redis, part, cfg.batch) for part in by_partition.values()))
    usage = await meter.stop()
    timed = sum(n for _, _, _, n in calls[ensures:])
    return Throughput("lr_commit alone, recorded plans replayed", timed, usage.wall, usage)


# ------------------------------------------------------------------------ phase 2: round trip


@dataclass
class RoundTrip:
    rate: int
    latencies: dict[str, list[float]]
    failures: Counter[str]
    answered_rate: float
    usage: Usage
    generator_cpu: float

    @property
    def answered(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def pct(self, q: float, kind: str | None = None) -> float:
        values = sorted(
            self.latencies[kind] if kind else [x for v in self.latencies.values() for x in v]
        )
        return 1000 * values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


@dataclass(frozen=True)
class ToolCall:
    kind: str
    """The row it is reported under: get_work_item or update_work_item."""
    agent_id: str
    tool: str
    args: dict[str, Any]
    command_id: str


def tool_call(i: int, target: tuple[str, str], run: str, todo_count: int) -> ToolCall:
    """Even calls read a WorkItem (GetWorkItem), odd calls replace its todo list."""
    agent, wid = target
    command_id = f"rt-{run}-{i}"
    if i % 2 == 0:
        args = {"work_item_id": wid, "include_todo_list": True}
        return ToolCall("get_work_item", agent, "GetWorkItem", args, command_id)
    listed = [t.model_dump(mode="json") for t in todos(todo_count, done=i % todo_count)]
    args = {"work_item_id": wid, "todo_list": listed}
    return ToolCall("update_work_item", agent, "UpdateWorkItem", args, command_id)


async def timed_call(gateway: ToolGateway, call: ToolCall) -> tuple[str, float | str]:
    """(call type, seconds from the call to its envelope) or (call type, why it failed)."""
    started = time.perf_counter()
    try:
        envelope = await gateway.call(
            call.agent_id, call.tool, call.args, command_id=call.command_id
        )
    except Exception as exc:  # the failure is the figure: counted, not raised
        return call.kind, type(exc).__name__
    elapsed = time.perf_counter() - started
    assert envelope.status == "success", envelope
    return call.kind, elapsed


async def paced(
    gateway: ToolGateway, calls: Sequence[ToolCall], rate: float
) -> list[tuple[str, float | str]]:
    """Open loop: call i starts at t0 + i/rate whatever the earlier calls are doing."""
    tasks = []
    t0 = time.perf_counter()
    for i, call in enumerate(calls):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(timed_call(gateway, call)))
    return list(await asyncio.gather(*tasks))


@contextlib.asynccontextmanager
async def ledger_client(
    redis_url: str, names: Names, reply_timeout: float
) -> AsyncIterator[LedgerClient]:
    """A LedgerClient as services build one (its own `connect()` pool), sending each call once."""
    redis = connect(redis_url)
    client = LedgerClient(
        redis, names, clock=utc_now, new_id=new_id, timeout=reply_timeout, attempts=1
    )
    await client.start()
    try:
        yield client
    finally:
        await client.stop()
        await redis.aclose()


@contextlib.asynccontextmanager
async def tool_gateway(
    redis_url: str, names: Names, reply_timeout: float, home: Path
) -> AsyncIterator[ToolGateway]:
    """The tool-call library as the executor and the HTTP tools route build it: writes go
    through the ledger (the client above), reads are answered from the read model."""
    async with ledger_client(redis_url, names, reply_timeout) as client:
        yield ToolGateway(
            client,
            agent_home=home,
            callback_base_url="http://127.0.0.1:8080",
            clock=utc_now,
            new_id=new_id,
        )


async def round_trip_at(
    cfg: Config,
    gateway: ToolGateway,
    rate: int,
    targets: list[tuple[str, str]],
    ledger: LedgerProcess,
) -> RoundTrip:
    run = secrets.token_hex(3)
    calls = [
        tool_call(i, targets[i % len(targets)], run, cfg.todos)
        for i in range(int(rate * cfg.seconds))
    ]
    meter = Meter(gateway.client.redis, ledger.pid)
    await meter.start()
    generator_cpu = time.process_time()
    with pyspy(cfg, ledger.pid, f"round-trip-{rate}"):
        results = await paced(gateway, calls, rate)
    generator_cpu = time.process_time() - generator_cpu
    usage = await meter.stop()
    latencies: dict[str, list[float]] = defaultdict(list)
    failures: Counter[str] = Counter()
    for kind, outcome in results:
        if isinstance(outcome, float):
            latencies[kind].append(outcome)
        else:
            failures[outcome] += 1
    answered = sum(len(v) for v in latencies.values())
    return RoundTrip(rate, latencies, failures, answered / usage.wall, usage, generator_cpu)


async def phase_round_trip(
    cfg: Config,
    redis_url: str,
    names: Names,
    work: Workload,
    ledger: LedgerProcess,
    *,
    home: Path,
) -> list[RoundTrip]:
    """Each rate in turn (lowest first), after a warm-up; the ledger drains between rates."""
    targets = work.first_items(100)
    trips = []
    async with tool_gateway(redis_url, names, cfg.call_timeout, home) as gateway:
        warm = [tool_call(i, targets[i % len(targets)], "warm", cfg.todos) for i in range(300)]
        await paced(gateway, warm, min(cfg.rates))
        for rate in sorted(cfg.rates):
            trips.append(await round_trip_at(cfg, gateway, rate, targets, ledger))
            await wait_idle(gateway.client.redis, names, ledger)
    return trips


async def wait_idle(redis: AnyRedis, names: Names, ledger: LedgerProcess) -> None:
    deadline = time.monotonic() + 300
    while await backlog(redis, names):
        ledger.alive()
        assert time.monotonic() < deadline, "the ledger did not catch up in 5 minutes"
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------- phase 3: memory


@dataclass
class Memory:
    label: str
    items: int
    records: int
    history: int
    replies: int
    events: int
    json_bytes: int
    create_rate: float

    def per_item(self, total: int) -> float:
        return total / self.items


async def memory_usage(redis: AnyRedis, keys: Sequence[str]) -> int:
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    return sum(x or 0 for x in await pipe.execute())


async def event_bytes(redis: AnyRedis, names: Names, agent: str) -> int:
    """Payload bytes of the agent's entries in its partition's event stream (shared stream)."""
    entries = await redis.xrange(names.events(names.partition(agent)))
    return sum(len(f[b"m"]) for _, f in entries if f[b"k"] == agent.encode())


async def send_all(client: LedgerClient, cmds: Sequence[c.Command], in_flight: int) -> None:
    """Tool calls as an agent's executor makes them: at most `in_flight` awaiting a reply."""
    gate = asyncio.Semaphore(in_flight)

    async def one(cmd: c.Command) -> None:
        async with gate:
            reply = await client.send(cmd)
        assert reply.outcome is CommandOutcome.APPLIED, reply

    await asyncio.gather(*(one(cmd) for cmd in cmds))


async def phase_memory(
    cfg: Config, redis_url: str, names: Names, *, agent: str, plan: str
) -> Memory:
    """Create `items` WorkItems for one agent through the ledger process, then weigh the keys."""
    creates = [create(agent, seq, cfg.todos, plan) for seq in range(cfg.items)]
    async with ledger_client(redis_url, names, reply_timeout=cfg.call_timeout) as client:
        assert (await client.send(ensure(agent))).outcome is CommandOutcome.APPLIED
        started = time.perf_counter()
        await send_all(client, creates, in_flight=16)
        elapsed = time.perf_counter() - started
        redis = client.redis
        assert await redis.hlen(names.items(agent)) == cfg.items
        records = [names.items(agent), *(names.class_index(agent, n) for n in INDEX_NAMES)]
        replies = [names.idempotency(agent, cmd.command_id) for cmd in creates]
        json_bytes = sum(len(doc) for doc in await redis.hvals(names.items(agent)))
        return Memory(
            label=f"{cfg.todos} todos, {len(plan):,}-char plan",
            items=cfg.items,
            records=await memory_usage(redis, records),
            history=await memory_usage(redis, [names.history(agent)]),
            replies=await memory_usage(redis, replies),
            events=await event_bytes(redis, names, agent),
            json_bytes=json_bytes,
            create_rate=cfg.items / elapsed,
        )


def plan_text(chars: int) -> str:
    line = "- Fetch the supplier statement, match each invoice, list mismatches with amounts.\n"
    return (line * (chars // len(line) + 1))[:chars]


# ------------------------------------------------------------------------------------- report


def met(ok: bool) -> str:
    return "yes" if ok else "**no**"


@dataclass
class Results:
    cfg: Config
    runs: list[Throughput]
    trips: list[RoundTrip]
    memory: list[Memory]
    redis_version: str
    load: tuple[tuple[float, ...], tuple[float, ...]]


def summary(r: Results) -> list[str]:
    process, raw, replay = r.runs
    ratio = process.rate / raw.rate
    lines = [
        "| measure | result | target | met |",
        "|---|---|---|---|",
        f"| 1a. one ledger process (faststream), commands applied/s | {process.rate:,.0f} "
        f"| ≥ 10,000 | {met(process.rate >= 10_000)} |",
        f"| 1b. baseline: raw redis-py loop, same handler, commands/s | {raw.rate:,.0f} | | |",
        f"| 1a / 1b | {ratio:.2f} | ≥ 0.50 | {met(ratio >= 0.5)} |",
        f"| 1c. lr_commit alone (recorded plans replayed), commands/s | {replay.rate:,.0f} | | |",
    ]
    for t in r.trips:
        p50, p99 = t.pct(0.5), t.pct(0.99)
        failed = sum(t.failures.values())
        lines.append(
            f"| 2. tool call at {t.rate:,}/s offered: p50 / p99 ms ({t.answered_rate:,.0f}/s "
            f"answered, {failed:,} failed) | {p50:.1f} / {p99:.1f} | ≤ 2 / ≤ 10 "
            f"| {met(p50 <= 2 and not failed)} / {met(p99 <= 10 and not failed)} |"
        )
    for m in r.memory:
        per = m.per_item(m.records)
        lines.append(
            f"| 3. Redis bytes per WorkItem ({m.label}): items hash + class indexes "
            f"| {per:,.0f} | ≤ 2,048 | {met(per <= 2048)} |"
        )
        lines.append(
            f"| 3. history bytes per WorkItem ({m.label}) | {m.per_item(m.history):,.0f} | | |"
        )
    return lines


def throughput_details(runs: list[Throughput]) -> list[str]:
    out = [
        "| phase | commands | seconds | client CPU | client CPU µs/cmd | Redis CPU "
        "| Redis CPU µs/cmd | FCALL µs/call (lr_commit) | FCALL_RO µs/call (lr_load) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        u = run.usage
        out.append(
            f"| {run.label} | {run.commands:,} | {run.span:.2f} | {u.pct(u.client_cpu)} "
            f"| {run.cpu_per_command(u.client_cpu):,.0f} | {u.pct(u.redis_cpu)} "
            f"| {run.cpu_per_command(u.redis_cpu):,.0f} "
            f"| {u.usec_per_call('fcall')} | {u.usec_per_call('fcall_ro')} |"
        )
    return out


def trip_details(trips: list[RoundTrip]) -> list[str]:
    out = [
        "| offered/s | call | answered | failed | p50 ms | p90 ms | p99 ms | max ms "
        "| ledger CPU | generator CPU | Redis CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in trips:
        u = t.usage
        failed = ", ".join(f"{n:,} {why}" for why, n in t.failures.items()) or "0"
        for kind in [None, *sorted(t.latencies)]:
            n = t.answered if kind is None else len(t.latencies[kind])
            per_call = 1e6 * u.client_cpu / max(t.answered, 1)
            cpu = (
                f"| {u.pct(u.client_cpu)} ({per_call:,.0f} µs/call) | {u.pct(t.generator_cpu)} "
                f"| {u.pct(u.redis_cpu)} |"
                if kind is None
                else "| | | |"
            )
            out.append(
                f"| {t.rate:,} | {kind or 'all'} | {n:,} | {failed if kind is None else ''} "
                f"| {t.pct(0.5, kind):.2f} | {t.pct(0.9, kind):.2f} | {t.pct(0.99, kind):.2f} "
                f"| {t.pct(1.0, kind):.2f} {cpu}"
            )
    return out


def memory_details(memory: list[Memory]) -> list[str]:
    out = [
        "| WorkItems of one agent | n | WorkItem JSON B | items hash + indexes B/item "
        "| history B/item | stored replies B/item (7-day TTL) | event stream payload B/item "
        "| creates/s (one agent, 16 in flight) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in memory:
        out.append(
            f"| {m.label} | {m.items:,} | {m.per_item(m.json_bytes):,.0f} "
            f"| {m.per_item(m.records):,.0f} | {m.per_item(m.history):,.0f} "
            f"| {m.per_item(m.replies):,.0f} | {m.per_item(m.events):,.0f} "
            f"| {m.create_rate:,.0f} |"
        )
    return out


def revision() -> str:
    """The commit measured, with `+dirty` when the work tree has changes."""
    git = ["git", "-C", str(ROOT)]
    try:
        head = subprocess.run(  # noqa: S603 - fixed arguments
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(  # noqa: S603 - fixed arguments
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def report(r: Results) -> str:
    cfg = r.cfg
    before, after = (", ".join(f"{x:.2f}" for x in load) for load in r.load)
    head = (
        f"Ledger benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {revision()}, "
        f"Redis {r.redis_version}, "
        f"{os.cpu_count()} CPUs, load average {before} before / {after} after; "
        f"{cfg.commands:,} commands (half AppendOperatorMessage, half CreateWorkItem with "
        f"{cfg.todos} todos) over {cfg.agents} agents, {cfg.partitions} partitions, "
        f"batch {cfg.batch}"
    )
    parts = [
        [head],
        summary(r),
        throughput_details(r.runs),
        trip_details(r.trips),
        memory_details(r.memory),
    ]
    return "\n\n".join("\n".join(part) for part in parts)


# --------------------------------------------------------------------------------------- test


@pytest.fixture
def prefixes(redis_url: str) -> Iterator[dict[str, str]]:
    """One key prefix per phase (same length), all deleted afterwards."""
    run = secrets.token_hex(3)
    values = {"process": f"blp{run}", "baseline": f"blb{run}", "replay": f"blr{run}"}
    yield values
    for prefix in values.values():
        drop_prefix(redis_url, prefix)


def ledger_env(cfg: Config, redis_url: str, prefix: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(cfg.partitions),
        LONGRUN_AGENT_HOME=str(home),
        LONGRUN_LOG_LEVEL="WARNING",
        LONGRUN_LEDGER_BATCH_SIZE=str(cfg.batch),
    )
    env.update(passed_settings("ledger"))
    return env


async def test_ledger_benchmark(redis_url: str, prefixes: dict[str, str], tmp_path: Path) -> None:
    cfg = Config.from_env()
    names = {k: Names(prefix=v, partitions=cfg.partitions) for k, v in prefixes.items()}
    redis = connect(redis_url)
    await load_functions(redis)
    env = ledger_env(cfg, redis_url, prefixes["process"], tmp_path / "home")
    ledger = LedgerProcess(env, tmp_path / "ledger.log")
    work = Workload.build(cfg.agents, cfg.commands, cfg.todos)
    load_before = os.getloadavg()
    try:
        with tuned_like_a_service():
            process = await phase_process(cfg, redis, names["process"], work, ledger)
            raw, recorded, ensures = await phase_baseline(cfg, redis, names["baseline"], work)
            replay = await phase_replay(cfg, redis, recorded, ensures, names["replay"])
            trips = await phase_round_trip(
                cfg, redis_url, names["process"], work, ledger, home=tmp_path / "home"
            )
        memory = [
            await phase_memory(
                cfg, redis_url, names["process"], agent=f"bench-mem-{chars}", plan=plan_text(chars)
            )
            for chars in (0, cfg.plan_chars)
        ]
        ledger.alive()
        version = _text((await redis.info("server"))["redis_version"])
    finally:
        ledger.stop()
        await redis.aclose()
    results = Results(
        cfg, [process, raw, replay], trips, memory, version, (load_before, os.getloadavg())
    )
    print("\n" + report(results))
