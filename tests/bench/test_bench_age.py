"""Age benchmark: does an agent slow down, or grow without end, as it ages?

Two agents on one stack (ledger, scheduler and executor as processes, the scripted provider at
`BENCH_AGE_LATENCY_MS` per round): a young one, new, and an old one that first finished
`BENCH_AGE_FINISHED` WorkItems (10,000; each created with three todos and a plan, picked and
completed with a 300-character report, sent to the ledger process as an executor sends them),
and which the archiver then brought down to LONGRUN_HOT_FINISHED in Redis (the steady state).
Then both work the same scripted requests, interleaved, one cycle of one agent at a time
(`BENCH_AGE_CYCLES` each): an operator message asks for a review, a wait for the callback and a
close; once the agent waits and is idle, the test delivers the callback (RecordCallback, as
ingress does) and times it to the scheduler's tick on the partition's tick stream; the cycle
ends when the WorkItem is completed and the agent idle again.

Figures, old against young, same run:
- turn overhead: each turn's wall time minus its model time, from the executor's
  `turn_finished` log line (`overhead_ms`), p50 and p90;
- callback -> tick latency, p50 and p90, split at the `wait_triggered` event the ledger's commit
  publishes (callback -> event: ingress's command through the ledger; event -> tick: the
  scheduler's decision);
- what a turn's opening reads (WorkItem documents and bytes) and the scheduler's snapshot;
- Redis bytes per agent (MEMORY USAGE of every key of the agent, by kind) after the run.

Nothing about time is asserted: every cycle must complete, every callback be ticked.

    .venv/bin/python -m pytest tests/bench/test_bench_age.py -m bench -s -p no:cacheprovider
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import secrets
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from services.turn_executor.opening import Opening, queue_reads
from shared.domain.tools import CreateWorkItemInput
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store import snapshots
from shared.store.client import AnyRedis, connect
from shared.store.functions import load_functions
from shared.wire import commands as c
from shared.wire.codec import decode
from shared.wire.events import LedgerEvents
from shared.wire.names import Group, Names
from shared.wire.ticks import Tick
from tests.bench.settings import passed_settings
from tests.bench.test_bench_executor import cleanup, spawn
from tests.integration.ledger_driver import plan_artifact, token_hash
from tests.integration.test_executor_process import ensure

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

FINISHED = int(os.environ.get("BENCH_AGE_FINISHED", "10000"))
CYCLES = int(os.environ.get("BENCH_AGE_CYCLES", "20"))
LATENCY_MS = int(os.environ.get("BENCH_AGE_LATENCY_MS", "20"))
PARTITIONS = 16
WITHIN = 120.0
"""Longest a step of a cycle may take before the run fails (never expected)."""
HOT_FINISHED = 200
"""The scheduler's default LONGRUN_HOT_FINISHED: finished WorkItems an agent keeps in Redis."""
CHUNK = 200
"""Finished WorkItems sent per round trip while the old agent ages."""
REPORT = (
    "Reconciled the batch: 42 invoices matched, 3 differed by rounding (under 0.05 EUR each), "
    "1 was a duplicate of March's and was voided. Filed FIN-1123 for the supplier's VAT id "
    "mismatch; nothing else is open. The figures are in the plan file under Progress."
)


@dataclass
class Stack:
    redis: AnyRedis
    names: Names
    client: LedgerClient
    executor_log: Path
    archive: Path
    start_executor: Callable[[], Any]


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = "ba" + secrets.token_hex(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(PARTITIONS),
        LONGRUN_AGENT_HOME=str(tmp_path / "home"),
        LONGRUN_ARCHIVE_DIR=str(tmp_path / "archive"),
        LONGRUN_LOG_LEVEL="WARNING",
        LONGRUN_SCRIPTED_LATENCY_MS=str(LATENCY_MS),
        **passed_settings("age"),
    )
    redis = connect(url)
    await load_functions(redis)
    names = Names(prefix=prefix, partitions=PARTITIONS)
    procs = [spawn("services.ledger", "LONGRUN_LEDGER_PORT", env, tmp_path / "ledger.log")]
    await procs[0].wait_ready()
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id, timeout=30.0)
    await client.start()
    executor_log = tmp_path / "executor.log"

    async def start_executor() -> None:
        """The scheduler and the executor, once the old agent has aged (neither works on the
        aging: no tick is owed for a WorkItem that is created, picked and completed at once)."""
        more = [
            spawn("services.scheduler", "LONGRUN_SCHEDULER_PORT", env, tmp_path / "sched.log"),
            spawn(
                "services.turn_executor",
                "LONGRUN_EXECUTOR_PORT",
                {**env, "LONGRUN_LOG_LEVEL": "INFO"},
                executor_log,
            ),
        ]
        procs.extend(more)
        for proc in more:
            await proc.wait_ready()

    yield Stack(redis, names, client, executor_log, tmp_path / "archive", start_executor)
    await client.stop()
    await redis.aclose()
    for proc in procs:
        proc.stop()
    cleanup(url, prefix)


# ---------------------------------------------------------------- aging


def _tool(cls: type[c.ToolCommand], agent: str, args: dict[str, Any], **extra: Any) -> c.Command:
    body = {"command_id": new_id("cmd_"), "agent_id": agent, "args": args, **extra}
    return cls.model_validate(body)


def finished_item(agent: str, n: int) -> list[c.Command]:
    """Create (three todos, a plan), pick and complete with a report: one finished WorkItem."""
    wid = new_id("wi_")
    plan = f"# Reconcile invoice batch {n}\n\nApproach:\n1. Match\n2. Explain\n3. Report\n"
    create = c.CreateWorkItem(
        command_id=new_id("cmd_"),
        agent_id=agent,
        work_item_id=wid,
        plan_artifact=plan_artifact(wid),
        args=CreateWorkItemInput.model_validate(
            {
                "objective": f"Reconcile invoice batch {n} and report the differences",
                "plan": plan,
                "todo_list": [
                    {"text": "Match the invoices against the ledger"},
                    {"text": "Explain every difference"},
                    {"text": "Report the totals"},
                ],
            }
        ),
    )
    return [
        create,
        _tool(c.PickWorkItem, agent, {"work_item_id": wid}),
        _tool(c.CompleteWorkItem, agent, {"work_item_id": wid}, report_text=REPORT),
    ]


async def age(client: LedgerClient, agent: str, count: int) -> float:
    """Seconds to finish `count` WorkItems for the agent."""
    started = time.perf_counter()
    for first in range(0, count, CHUNK):
        batch = [
            cmd for n in range(first, min(count, first + CHUNK)) for cmd in finished_item(agent, n)
        ]
        for reply in await client.send_all(batch):
            assert reply.error is None, reply.error
    return time.perf_counter() - started


async def caught_up(redis: AnyRedis, names: Names, within: float = 600.0) -> None:
    """Until the scheduler has read every event (the aging's backlog decided)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        lag = 0
        for p in range(names.partitions):
            for group in await redis.xinfo_groups(names.events(p)):
                if group["name"] in (Group.SCHEDULER, Group.SCHEDULER.encode()):
                    lag += int(group.get("lag") or 0) + int(group["pending"])
        if lag == 0:
            return
        await asyncio.sleep(0.5)
    raise AssertionError("the scheduler did not catch up with the aging's events")


async def archived(redis: AnyRedis, names: Names, agent: str, within: float = 900.0) -> float:
    """Seconds until the archiver has left the agent at most LONGRUN_HOT_FINISHED finished
    WorkItems in Redis (the steady state of an old agent), or `within` has passed."""
    hot = int(passed_settings("age").get("LONGRUN_HOT_FINISHED", HOT_FINISHED))
    started = time.monotonic()
    while time.monotonic() - started < within:
        if await redis.zcard(names.finished_index(agent)) <= hot:
            break
        await asyncio.sleep(0.5)
    return time.monotonic() - started


# ---------------------------------------------------------------- following the run


@dataclass
class Seen:
    at: float
    kind: str
    """An event type, or `tick:<kind>`."""
    data: dict[str, Any]


@dataclass
class Follower:
    """Every event and tick of the agents, as they come (XREAD: consumes nothing)."""

    redis: AnyRedis
    names: Names
    seen: dict[str, list[Seen]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stop: bool = False

    async def run(self) -> None:
        last = {}
        for p in range(self.names.partitions):
            last[self.names.events(p)] = "$"
            last[self.names.ticks(p)] = "$"
        while not self.stop:
            found = await self.redis.xread(last, count=500, block=200)  # type: ignore[arg-type]
            now = time.monotonic()
            for stream, entries in found or []:
                last[stream.decode()] = entries[-1][0].decode()
                for _, fields in entries:
                    body = decode(fields[b"m"]).body
                    if isinstance(body, Tick):
                        self._add(body.agent_id, Seen(now, f"tick:{body.kind}", {}))
                        continue
                    assert isinstance(body, LedgerEvents)
                    for event in body.events:
                        self._add(body.agent_id, Seen(now, event.type, event.data))
            self.changed.set()

    def _add(self, agent: str, seen: Seen) -> None:
        self.seen.setdefault(agent, []).append(seen)

    def mark(self, agent: str) -> int:
        return len(self.seen.get(agent, []))

    async def until(self, agent: str, start: int, wanted: Callable[[Seen], bool]) -> int:
        """The position of the first entry from `start` that is `wanted`, waiting for it."""
        deadline = time.monotonic() + WITHIN
        while time.monotonic() < deadline:
            entries = self.seen.get(agent, [])
            for pos in range(start, len(entries)):
                if wanted(entries[pos]):
                    return pos
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)
        raise AssertionError(f"{agent}: nothing wanted after entry {start}: {self.seen.get(agent)}")


async def idle(redis: AnyRedis, names: Names, agent: str) -> None:
    """No lease, no outstanding tick: nothing runs or is about to."""
    deadline = time.monotonic() + WITHIN
    while await redis.exists(names.lease(agent), names.outstanding_tick(agent)):
        assert time.monotonic() < deadline, f"{agent} never went idle"
        await asyncio.sleep(0.01)


def callback(agent: str) -> c.RecordCallback:
    delivery = new_id("d_")
    return c.RecordCallback(
        command_id=delivery,
        agent_id=agent,
        token_hash=token_hash(f"callback-{agent}"),
        delivery_id=delivery,
        content_type="text/plain",
        body="approved",
        source=c.CallbackSource.STREAM,
    )


async def cycle(stack: Stack, follower: Follower, agent: str, n: int) -> tuple[float, float]:
    """One scripted request worked to completion; callback -> tick and callback -> the
    `wait_triggered` event, in ms."""
    mark = follower.mark(agent)
    ask = f"Review incident {n} of {agent}. Then wait for the callback. Then close ticket {n}."
    message_id = f"ask-{agent}-{n}"
    command = c.AppendOperatorMessage(
        command_id=message_id, agent_id=agent, message_id=message_id, text=ask
    )
    assert (await stack.client.send(command)).error is None
    waited = await follower.until(
        agent, mark, lambda s: s.kind == "wait_created" and s.data["wait"]["wake"] == "external"
    )
    await follower.until(agent, waited, lambda s: s.kind == "turn_finished")
    await idle(stack.redis, stack.names, agent)
    mark = follower.mark(agent)
    sent = time.monotonic()
    answered = stack.client.queue_all([callback(agent)])
    ticked = await follower.until(agent, mark, lambda s: s.kind.startswith("tick:"))
    latency = (follower.seen[agent][ticked].at - sent) * 1000
    triggered = await follower.until(agent, mark, lambda s: s.kind == "wait_triggered")
    ledger = (follower.seen[agent][triggered].at - sent) * 1000
    (reply,) = await answered
    assert reply.error is None, reply.error
    done = await follower.until(agent, mark, lambda s: s.kind == "work_item_completed")
    await follower.until(agent, done, lambda s: s.kind == "turn_finished")
    await idle(stack.redis, stack.names, agent)
    return latency, ledger


# ---------------------------------------------------------------- figures


def turns_of(log: Path, since: datetime) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in log.read_text().splitlines():
        if not line.startswith("{") or '"turn_finished"' not in line:
            continue
        doc = orjson.loads(line)
        if datetime.fromisoformat(doc["timestamp"].replace("Z", "+00:00")) >= since:
            out.setdefault(doc["agent_id"], []).append(doc)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def agent_bytes(redis: AnyRedis, names: Names, agent: str) -> Counter[str]:
    """MEMORY USAGE of every key of the agent, by kind (its keys' suffix; `cmd` for the
    command replies kept for dedup)."""
    base = names.agent(agent)
    tag = names.tag(names.partition(agent))
    sizes: Counter[str] = Counter()
    for pattern, kind_of in (
        (f"{base}*", lambda key: key[len(base) + 1 :].split(":")[0] or "agent"),
        (f"{names.prefix}:{tag}:cmd:{agent}:*", lambda key: "cmd"),
    ):
        keys = [k.decode() async for k in redis.scan_iter(match=pattern, count=1000)]
        pipe = redis.pipeline(transaction=False)
        for key in keys:
            pipe.memory_usage(key, samples=0)
        for key, size in zip(keys, await pipe.execute(), strict=True):
            sizes[kind_of(key) if key != base else "agent"] += int(size or 0)
    return sizes


async def opening_read(redis: AnyRedis, names: Names, agent: str) -> tuple[int, int]:
    """WorkItems a turn opens with, and their JSON bytes (decoded as the executor does)."""
    pipe = redis.pipeline(transaction=False)
    queue_reads(names, agent)(pipe)
    items = Opening.decode(await pipe.execute()).items
    return len(items), sum(len(item.model_dump_json()) for item in items)


async def snapshot_read(redis: AnyRedis, names: Names, agent: str) -> int:
    views = await snapshots.SnapshotReader(redis, names).load([agent])
    return len(views[agent].items)


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607 - git on PATH, as run by hand
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "?"


async def test_an_old_agent_works_like_a_new_one(stack: Stack) -> None:
    tag = secrets.token_hex(3)
    old, young = f"old-{tag}", f"young-{tag}"
    for reply in await stack.client.send_all([ensure(old)]):
        assert reply.error is None, reply.error
    aging = await age(stack.client, old, FINISHED)
    for reply in await stack.client.send_all([ensure(young)]):
        assert reply.error is None, reply.error
    await stack.start_executor()
    await caught_up(stack.redis, stack.names)
    settling = await archived(stack.redis, stack.names, old)
    follower = Follower(stack.redis, stack.names)
    following = asyncio.create_task(follower.run())
    since = datetime.now(UTC)
    latency: dict[str, list[float]] = {old: [], young: []}
    ledger: dict[str, list[float]] = {old: [], young: []}
    began = time.monotonic()
    try:
        for n in range(CYCLES):
            for agent in (young, old) if n % 2 else (old, young):
                total, part = await cycle(stack, follower, agent, n)
                latency[agent].append(total)
                ledger[agent].append(part)
    finally:
        follower.stop = True
        await following
    elapsed = time.monotonic() - began
    turns = turns_of(stack.executor_log, since)
    overhead = {a: [float(t["overhead_ms"]) for t in turns.get(a, [])] for a in (old, young)}
    assert all(overhead.values()), "no turn_finished lines"
    assert all(len(v) == CYCLES for v in latency.values())
    sizes = {a: await agent_bytes(stack.redis, stack.names, a) for a in (old, young)}
    reads = {a: await opening_read(stack.redis, stack.names, a) for a in (old, young)}
    snaps = {a: await snapshot_read(stack.redis, stack.names, a) for a in (old, young)}

    def row(label: str, values: dict[str, list[float]]) -> str:
        o50, y50 = pct(values[old], 0.5), pct(values[young], 0.5)
        o90, y90 = pct(values[old], 0.9), pct(values[young], 0.9)
        return (
            f"| {label} | {o50:.1f} / {o90:.1f} | {y50:.1f} / {y90:.1f} | "
            f"{o50 / y50:.2f}x / {o90 / y90:.2f}x |"
        )

    print()
    print(
        f"age benchmark {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, "
        f"{platform.python_version()}, load {os.getloadavg()}"
    )
    print(
        f"old agent aged with {FINISHED:,} finished WorkItems in {aging:.1f} s, "
        f"{await stack.redis.zcard(stack.names.finished_index(old)):,} of them left in Redis "
        f"{settling:.1f} s after the scheduler caught up; "
        f"{CYCLES} cycles per agent interleaved in {elapsed:.1f} s, model {LATENCY_MS} ms/round; "
        f"turns old {len(overhead[old])}, young {len(overhead[young])}"
    )
    print("| figure (ms) | old p50 / p90 | young p50 / p90 | old / young |")
    print("|---|---|---|---|")
    print(row("turn overhead", overhead))
    print(row("callback -> tick", latency))
    print(row("callback -> wait_triggered event", ledger))
    scheduler = {a: [t - p for t, p in zip(latency[a], ledger[a], strict=True)] for a in latency}
    print(row("wait_triggered event -> tick", scheduler))
    mean = {a: statistics.fmean(v) for a, v in overhead.items()}
    print(f"turn overhead mean: old {mean[old]:.1f}, young {mean[young]:.1f} ms")
    disk = sum(f.stat().st_size for f in (stack.archive / old).rglob("*") if f.is_file())
    print(f"old agent's archive on disk: {disk:,} B")
    for agent, label in ((old, "old"), (young, "young")):
        docs, size = reads[agent]
        print(
            f"{label}: a turn's opening reads {docs} WorkItems ({size:,} B); the scheduler's "
            f"snapshot {snaps[agent]}; Redis {sum(sizes[agent].values()):,} B: "
            + ", ".join(f"{k} {v:,}" for k, v in sizes[agent].most_common())
        )
