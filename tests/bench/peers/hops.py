"""Where a callback's time goes on longrun's path, hop by hop: run the peers benchmark's longrun
system (ingress, ledger and scheduler, one process each) at a paced rate, then line each event
up across the streams it crossed. A stream entry's id carries the millisecond it was added, so

- callback -> command: the callback's entry on `<prefix>:callbacks` to its `RecordCallback` on
  the partition's command stream (ingress: read, checks, command XADD);
- command -> event: to the ledger's event entry for that command (ledger: read, decide, commit);
- event -> tick: to the agent's tick (scheduler: read, snapshot, decide, publish);

with the CPU share of each process and of Redis over the paced window. Resolution is one
millisecond per hop. Run by hand (not a test):

    .venv/bin/python -m tests.bench.peers.hops [events/s, default 500] [seconds, default 10]

`REDIS_URL` names the Redis (default the local one); keys go under a fresh prefix, deleted after.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from shared.store.client import AnyRedis, connect
from shared.wire.codec import decode
from shared.wire.commands import RecordCallback
from tests.bench.caller import tuned_like_a_service
from tests.bench.peers.longrun import Longrun
from tests.bench.peers.measure import Runner, pct, redis_cpu, tree_cpu

AGENTS = 5000
HOPS = ("callback -> command (ingress)", "command -> event (ledger)", "event -> tick (scheduler)")


def _ms(entry_id: bytes) -> int:
    return int(entry_id.split(b"-")[0])


@dataclass
class Timeline:
    """Per delivery id: when its callback, command and event entries were added."""

    since_ms: float
    callback: dict[str, tuple[int, str]] = field(default_factory=dict)
    command: dict[str, int] = field(default_factory=dict)
    event: dict[str, int] = field(default_factory=dict)
    ticks: dict[str, list[int]] = field(default_factory=dict)

    async def read(self, redis: AnyRedis, system: Longrun) -> None:
        n = system.names
        agent_of = {token: agent for agent, token in system.tokens.items()}
        for entry_id, fields in await redis.xrange(n.callbacks):
            if _ms(entry_id) >= self.since_ms:
                agent = agent_of[fields[b"token"].decode()]
                self.callback[fields[b"delivery_id"].decode()] = (_ms(entry_id), agent)
        delivery_of: dict[str, str] = {}
        for p in range(n.partitions):
            for entry_id, fields in await redis.xrange(n.commands(p)):
                cmd = decode(fields[b"m"]).body
                if isinstance(cmd, RecordCallback) and cmd.delivery_id in self.callback:
                    self.command[cmd.delivery_id] = _ms(entry_id)
                    delivery_of[cmd.command_id] = cmd.delivery_id
            for entry_id, fields in await redis.xrange(n.events(p)):
                command_id = orjson.loads(fields[b"m"])["body"]["command_id"]
                if command_id in delivery_of:
                    self.event[delivery_of[command_id]] = _ms(entry_id)
            for entry_id, fields in await redis.xrange(n.ticks(p)):
                self.ticks.setdefault(fields[b"k"].decode(), []).append(_ms(entry_id))

    def hops(self) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {name: [] for name in (*HOPS, "total")}
        for delivery, (sent, agent) in self.callback.items():
            command, event = self.command.get(delivery), self.event.get(delivery)
            if command is None or event is None:
                continue
            tick = next((t for t in sorted(self.ticks.get(agent, [])) if t >= event), None)
            if tick is None:
                continue
            for name, value in zip(
                found, (command - sent, event - command, tick - event, tick - sent), strict=True
            ):
                found[name].append(value / 1000)  # seconds, as `pct` expects
        return found


async def measure(redis_url: str, rate: float, seconds: float) -> None:
    redis = connect(redis_url)
    system = Longrun(redis_url, Path(tempfile.mkdtemp()), redis)
    agents = [f"hop-{i}" for i in range(AGENTS)]
    try:
        await system.setup(agents)
        await system.start()
        runner = Runner(system, redis, agents)
        reader = asyncio.create_task(runner.read())
        await runner.produce(100, 2.0)  # warm-up
        await runner.settle()
        runner.reset()
        since = time.time() * 1000
        pids = system.pids()
        cpu_before = {role: tree_cpu([pid]) for role, pid in pids.items()}
        redis_before, started = await redis_cpu(redis), time.perf_counter()
        offered = await runner.produce(rate, seconds)
        await runner.settle()
        wall = time.perf_counter() - started
        shares = {role: (tree_cpu([pid]) - cpu_before[role]) / wall for role, pid in pids.items()}
        shares["redis"] = (await redis_cpu(redis) - redis_before) / wall
        runner.stopping = True
        await reader
        timeline = Timeline(since)
        await timeline.read(redis, system)
        report(rate, offered, runner, timeline.hops(), shares)
    finally:
        await system.stop()
        keys = [k async for k in redis.scan_iter(match=f"{system.names.prefix}*", count=1000)]
        for start in range(0, len(keys), 500):
            await redis.delete(*keys[start : start + 500])
        await redis.aclose()


def report(
    rate: float,
    offered: int,
    runner: Runner,
    hops: dict[str, list[float]],
    shares: dict[str, float],
) -> None:
    cpu = ", ".join(f"{role} {share * 100:.0f}%" for role, share in shares.items())
    print(f"{rate:.0f} events/s offered ({offered} sent); CPU share of one core: {cpu}")
    latencies = runner.latencies
    print(f"  callback -> tick as the reader saw it: p50 {pct(latencies, 0.5):.1f} ms, ", end="")
    print(f"p99 {pct(latencies, 0.99):.1f} ms (n={len(latencies)})")
    print("| hop | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for name, values in hops.items():
        cells = " | ".join(f"{pct(values, q):.0f}" for q in (0.5, 0.9, 0.99, 1.0))
        print(f"| {name} | {cells} |")


def main() -> None:
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 500.0
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    with tuned_like_a_service():
        asyncio.run(measure(redis_url, rate, seconds))


if __name__ == "__main__":
    main()
