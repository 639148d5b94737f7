"""Delegation benchmark: delegations at a fixed rate through the ledger and the scheduler as
processes, timing each child's completion to its parent's tick, beside the callback to tick
latency of agents called back in the same run (a delegation's result should cost about one
callback: one more ledger command, the result, sent through the outbox).

One delegation: the parent delegates its current root WorkItem (created and picked before the
clock runs, and the ticks that caused read, so that no earlier tick's marker can hold back the
one timed); once the child's WorkItem exists, the child completes it (the clock starts); the
result reaches the parent's partition, triggers its wait, and the scheduler ticks the parent
(an `input` tick, for the result's inbox message; the clock stops when the tick is read). The
parent then completes its root. Each callback triggers its agent's external wait
(`review_triggered`). Parent and child are always in different partitions. No executor runs: a
reader takes every tick and clears the agent's tick marker at once, as a turn would (but with
no turn's end to make the scheduler look again, a tick the marker held back would come only
from the watchdog).

Run by hand: `.venv/bin/python -m pytest tests/bench/test_bench_delegation.py -m bench -s`.
Knobs: `BENCH_DELEGATION_RATE` (100 delegations/s), `BENCH_DELEGATION_SECONDS` (20),
`BENCH_DELEGATION_CALLBACK_RATE` (20 callbacks/s). Asserts only that every delegation and
callback was timed, never about time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis as sync_redis

from shared.domain.errors import ErrorKind
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis, connect
from shared.wire import commands as c
from shared.wire.codec import decode
from shared.wire.names import Names
from shared.wire.ticks import Tick
from tests.bench.settings import passed_settings
from tests.integration.conftest import ServiceProcess, free_port
from tests.integration.ledger_driver import plan_artifact, token_hash
from tests.integration.scheduler_driver import create, ensure

pytestmark = pytest.mark.bench

RATE = float(os.environ.get("BENCH_DELEGATION_RATE", "100"))
SECONDS = float(os.environ.get("BENCH_DELEGATION_SECONDS", "20"))
CALLBACK_RATE = float(os.environ.get("BENCH_DELEGATION_CALLBACK_RATE", "20"))
PAIRS = int(RATE * SECONDS) + 1
"""A fresh parent/child pair per delegation: a parent's first `input` tick is its result's (a
result is an inbox message, and no turn here takes the inbox, so a reused parent would be owed
an input tick for the previous one)."""
CALLERS = max(1, int(CALLBACK_RATE))
PARTITIONS = 16
WITHIN = 30.0
TICK_OF = {"delegation": "input", "callback": "review_triggered"}
"""How long one delegation or callback may take before it counts as lost (never expected)."""


@pytest.fixture
async def stack(
    tmp_path: Path,
) -> AsyncIterator[tuple[AnyRedis, Names, list[ServiceProcess]]]:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = "bd" + secrets.token_hex(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(PARTITIONS),
        LONGRUN_AGENT_HOME=str(tmp_path / "home"),
        LONGRUN_LOG_LEVEL="WARNING",
        **passed_settings("delegation"),
    )
    procs = []
    for module, port_env in (
        ("services.ledger", "LONGRUN_LEDGER_PORT"),
        ("services.scheduler", "LONGRUN_SCHEDULER_PORT"),
    ):
        port = free_port()
        proc = ServiceProcess(
            module, {**env, port_env: str(port)}, port, tmp_path / f"{module}.log"
        )
        proc.start()
        procs.append(proc)
    for proc in procs:
        await proc.wait_ready()
    redis = connect(url)
    yield redis, Names(prefix=prefix, partitions=PARTITIONS), procs
    await redis.aclose()
    for proc in procs:
        proc.stop()
    client = sync_redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


def pairs(names: Names, tag: str, count: int) -> list[tuple[str, str]]:
    """(parent, child) agent ids, the two always in different partitions."""
    out = []
    for n in range(count):
        parent = f"p-{tag}-{n}"
        child = next(
            f"c-{tag}-{n}-{k}"
            for k in itertools.count()
            if names.partition(f"c-{tag}-{n}-{k}") != names.partition(parent)
        )
        out.append((parent, child))
    return out


def _tool(
    cls: type[c.ToolCommand], agent: str, args: dict[str, object], **extra: object
) -> c.Command:
    body = {"command_id": new_id("cmd_"), "agent_id": agent, "args": args, **extra}
    return cls.model_validate(body)


@dataclass
class Bench:
    redis: AnyRedis
    names: Names
    client: LedgerClient
    sent: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Agent -> (what it waits for, when the command that should tick it was sent)."""
    ticked: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(
        default_factory=lambda: {"delegation": [], "callback": []}
    )
    counts: Counter[str] = field(default_factory=Counter)
    roots: dict[str, str] = field(default_factory=dict)
    """Each parent's root WorkItem, created and picked before the clock runs."""
    last_tick: float = 0.0
    stopped: bool = False

    async def send(self, command: c.Command) -> None:
        reply = await self.client.send(command)
        assert reply.error is None, reply.error

    async def read_ticks(self) -> None:
        """Time the first tick of the awaited kind after each timed command; clear every
        marker at once, as a turn would, so the next trigger is ticked too."""
        # From the start of each (fresh) stream: "$" would skip what arrives in a stream
        # while the previous read's answer, for another stream, is being handled.
        streams = {self.names.ticks(p): "0-0" for p in range(self.names.partitions)}
        while not self.stopped:
            found = await self.redis.xread(streams, count=1000, block=200)  # type: ignore[arg-type]
            now = time.monotonic()
            ticks = []
            for stream, entries in found or []:
                for entry_id, fields in entries:
                    streams[stream.decode()] = entry_id
                    tick = decode(fields[b"m"]).body
                    assert isinstance(tick, Tick)
                    ticks.append(tick)
            if not ticks:
                continue
            self.last_tick = now
            # Markers first: a timed agent's next trigger may be sent as soon as it is timed.
            await self.redis.delete(*{self.names.outstanding_tick(t.agent_id) for t in ticks})
            for tick in ticks:
                self._timed(tick, now)

    async def quiet(self, seconds: float, within: float = 120.0) -> None:
        """Until no tick has come for `seconds`: the setup's ticks are read, markers cleared."""
        deadline = time.monotonic() + within
        while time.monotonic() - self.last_tick < seconds:
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.1)

    def _timed(self, tick: Tick, now: float) -> None:
        self.counts[f"ticks {tick.kind}"] += 1
        waiting = self.sent.get(tick.agent_id)
        if waiting is None or tick.kind != TICK_OF[waiting[0]]:
            return
        kind, began = self.sent.pop(tick.agent_id)
        self.latency[kind].append(now - began)
        future = self.ticked.pop(tick.agent_id, None)
        if future is not None and not future.done():
            future.set_result(None)

    def expect(self, agent: str, kind: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ticked[agent] = future
        self.sent[agent] = (kind, time.monotonic())
        return future

    async def delegation(self, parent: str, child: str) -> None:
        root, item = self.roots[parent], new_id("wi_")
        args = {"to_agent": child, "objective": "Check the figures", "reason": "bench"}
        delegate = _tool(
            c.DelegateWorkItem,
            parent,
            args,
            delegation_id=new_id("dlg_"),
            child_work_item_id=item,
            child_plan_artifact=plan_artifact(item),
        )
        await self.send(delegate)
        await self._child_completes(parent, child, item)
        await self.send(
            _tool(c.CompleteWorkItem, parent, {"work_item_id": root}, report_text="done")
        )
        self.counts["delegations"] += 1

    async def _child_completes(self, parent: str, child: str, item: str) -> None:
        """Complete the child's item once it exists (the outbox's send may still travel)."""
        done = _tool(c.CompleteWorkItem, child, {"work_item_id": item}, report_text="figures ok")
        while True:
            ticked = self.expect(parent, "delegation")
            reply = await self.client.send(done)
            if reply.error is None:
                await asyncio.wait_for(ticked, WITHIN)
                return
            assert reply.error.kind is ErrorKind.WORK_ITEM_NOT_FOUND, reply.error
            self.sent.pop(parent, None)
            self.counts["child completions sent before the item existed"] += 1
            done = done.model_copy(update={"command_id": new_id("cmd_")})
            await asyncio.sleep(0.02)

    async def callback(self, caller: str) -> None:
        delivery = new_id("d_")
        ticked = self.expect(caller, "callback")
        await self.send(
            c.RecordCallback(
                command_id=delivery,
                agent_id=caller,
                token_hash=token_hash(f"cb-{caller}"),
                delivery_id=delivery,
                content_type="text/plain",
                body="approved",
                source=c.CallbackSource.STREAM,
            )
        )
        await asyncio.wait_for(ticked, WITHIN)
        self.counts["callbacks"] += 1


async def _paced(
    rate: float, seconds: float, start: Callable[[int], Awaitable[None]]
) -> list[asyncio.Task[None]]:
    """Start `start(n)` at `rate` per second for `seconds`; the tasks started."""
    tasks = []
    began = time.monotonic()
    for n in itertools.count():
        due = began + n / rate
        if due - began >= seconds:
            return tasks
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        tasks.append(asyncio.create_task(start(n)))
    return tasks


async def _setup(bench: Bench, tag: str) -> tuple[list[tuple[str, str]], list[str]]:
    agents = pairs(bench.names, tag, PAIRS)
    callers = [f"k-{tag}-{n}" for n in range(CALLERS)]
    everyone = [a for pair in agents for a in pair] + callers
    for reply in await bench.client.send_all([ensure(a) for a in everyone]):
        assert reply.error is None, reply.error
    waits = []
    for parent, _ in agents:
        bench.roots[parent] = new_id("wi_")
        waits += [
            create(parent, bench.roots[parent]),
            _tool(c.PickWorkItem, parent, {"work_item_id": bench.roots[parent]}),
        ]
    for caller in callers:
        wi = new_id("wi_")
        waits += [
            create(caller, wi),
            _tool(c.PickWorkItem, caller, {"work_item_id": wi}),
            _tool(c.WaitFor, caller, {"reason": "approval", "wake": "external"}),
        ]
    for reply in await bench.client.send_all(waits):
        assert reply.error is None, reply.error
    return agents, callers


def _cpu_seconds(proc: ServiceProcess) -> float:
    assert proc.proc is not None
    fields = Path(f"/proc/{proc.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(
    bench: Bench, agents: list[tuple[str, str]], callers: list[str], procs: list[ServiceProcess]
) -> tuple[int, int, float]:
    """Delegations and callbacks at their rates; how many of each started, and the seconds
    until the last was ticked."""
    locks = {caller: asyncio.Lock() for caller in callers}

    async def one_delegation(n: int) -> None:
        await bench.delegation(*agents[n])

    async def one_callback(n: int) -> None:
        caller = callers[n % len(callers)]
        if locks[caller].locked():
            bench.counts["callbacks started while their agent was busy"] += 1
        async with locks[caller]:
            await bench.callback(caller)

    cpu = [_cpu_seconds(p) for p in procs]
    mine = time.process_time()
    began = time.monotonic()
    delegating, calling = await asyncio.gather(
        _paced(RATE, SECONDS, one_delegation), _paced(CALLBACK_RATE, SECONDS, one_callback)
    )
    await asyncio.gather(*delegating, *calling)
    elapsed = time.monotonic() - began
    ledger, scheduler = (_cpu_seconds(p) - before for p, before in zip(procs, cpu, strict=True))
    print(
        f"\nCPU while measured: ledger {ledger:.1f} s, scheduler {scheduler:.1f} s, "
        f"this test (the driver) {time.process_time() - mine:.1f} s"
    )
    return len(delegating), len(calling), elapsed


async def test_bench_delegation_result_to_parent_tick(
    stack: tuple[AnyRedis, Names, list[ServiceProcess]],
) -> None:
    redis, names, procs = stack
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id, timeout=30.0)
    await client.start()
    bench = Bench(redis, names, client)
    reader = asyncio.create_task(bench.read_ticks())
    try:
        agents, callers = await _setup(bench, secrets.token_hex(3))
        await bench.quiet(2.0)
        delegations, callbacks, elapsed = await _measure(bench, agents, callers, procs)
    finally:
        bench.stopped = True
        await reader
        await client.stop()
    _report(bench, elapsed)
    assert len(bench.latency["delegation"]) == delegations
    assert len(bench.latency["callback"]) == callbacks


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _report(bench: Bench, elapsed: float) -> None:
    done = bench.counts["delegations"]
    print(
        f"\n{done} delegations in {elapsed:.1f} s ({done / elapsed:.1f}/s offered {RATE:.0f}/s), "
        f"{bench.counts['callbacks']} callbacks ({CALLBACK_RATE:.0f}/s); load {os.getloadavg()}"
    )
    print("| path | n | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for name, label in (
        ("delegation", "child completes -> parent's tick"),
        ("callback", "callback -> tick (same run)"),
    ):
        values = bench.latency[name]
        print(
            f"| {label} | {len(values)} | {_q(values, 0.5):.1f} | {_q(values, 0.99):.1f} | "
            f"{1000 * max(values):.1f} |"
        )
    print(dict(bench.counts))
