"""Wake-feed benchmark: what 100 external agents, each reading its own wake feed with its own
token, cost one ingress per delivered tick, beside the console's live feed in the same run.

A producer XADDs ticks to `<prefix>:wakes` at BENCH_WAKES_RATE a second (default 500, spread
over BENCH_WAKES_AGENTS external agents, default 100, each tick stamped with its send time in
its tick id), as the scheduler would. Phases of BENCH_WAKES_SECONDS (default 15), same ingress
process:

1. the wake flow with no feed open (baseline);
2. the wake flow with one SSE feed per agent (tests/bench/wake_watchers.py, split over
   BENCH_WAKES_CLIENT_PROCS processes, default 4): every tick is delivered once, to its agent;
3. the console benchmark's flow (ledger-event entries at the same rate over 10 agents) with no
   watcher, then with 100 console watchers spread over those agents (every entry delivered to
   10 watchers), as in test_bench_console.py.

Printed: ingress CPU per phase, what the feeds or watchers add over their baseline, that per
delivery (µs of ingress CPU), and the delays. Asserted: every feed heard ticks, none heard
another agent's tick, no client failed. Nothing about timing is asserted.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as sync_redis

from services.ingress.console.session import ConsoleKeys
from shared.wire.names import Names
from tests.bench.test_bench_console import (
    Bench,
    Config,
    cpu_seconds,
    distinct_partitions,
    finish_watchers,
    measure_flow,
    percentiles,
    start_watchers,
)
from tests.integration.conftest import ServiceProcess, free_port

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

OPERATOR = "bench-operator-" + secrets.token_hex(8)
PARTITIONS = 16
ROOT = Path(__file__).resolve().parents[2]


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"BENCH_WAKES_{name}", default))


RATE = int(_env("RATE", 500))
SECONDS = _env("SECONDS", 15)
AGENTS = int(_env("AGENTS", 100))
CLIENT_PROCS = int(_env("CLIENT_PROCS", 4))


@dataclass
class Stack:
    url: str
    ingress: ServiceProcess
    names: Names
    redis_url: str
    tokens: dict[str, str]
    console: Bench


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prefix = "bw" + secrets.token_hex(4)
    logs = tmp_path_factory.mktemp("logs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(REDIS_URL=redis_url, LONGRUN_PREFIX=prefix, LONGRUN_PARTITIONS=str(PARTITIONS),
               LONGRUN_AGENT_HOME=str(tmp_path_factory.mktemp("home")),
               LONGRUN_OPERATOR_TOKEN=OPERATOR, LONGRUN_LOG_LEVEL="WARNING")  # fmt: skip
    ledger_port, http_port = free_port(), free_port()
    ledger = ServiceProcess("services.ledger", {**env, "LONGRUN_LEDGER_PORT": str(ledger_port)},
                            ledger_port, logs / "ledger.log")  # fmt: skip
    ingress = ServiceProcess("services.ingress", {**env, "LONGRUN_HTTP_PORT": str(http_port)},
                             http_port, logs / "ingress.log")  # fmt: skip
    ledger.start()
    ingress.start()
    asyncio.run(ledger.wait_ready())
    asyncio.run(ingress.wait_ready())
    names = Names(prefix=prefix, partitions=PARTITIONS)
    url = f"http://127.0.0.1:{http_port}"
    tokens: dict[str, str] = {}
    console_agents = distinct_partitions(names, Config().agents)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {OPERATOR}"}) as http:
        for n in range(AGENTS):
            agent = f"ext-{n}"
            answer = http.put(f"/v1/agents/{agent}", json={"loop": "external"})
            assert answer.status_code == 201, answer.text
            tokens[agent] = answer.json()["agent_token"]
        for agent in console_agents:
            assert http.put(f"/v1/agents/{agent}", json={"loop": "external"}).status_code == 201
    ledger.stop()  # the flows are synthetic: only ingress works from here on
    cookie = ConsoleKeys(OPERATOR).new_session(time.time())
    console = Bench(url, ingress, names, redis_url, console_agents, cookie)
    yield Stack(url, ingress, names, redis_url, tokens, console)
    ingress.stop()
    client = sync_redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


async def produce_wakes(stack: Stack, rate: int, seconds: float) -> int:
    """Paced XADDs of ticks to the wakes stream every 10 ms; how many were sent."""
    client = sync_redis.Redis.from_url(stack.redis_url)
    agents = list(stack.tokens)
    sent = 0
    start = time.monotonic()
    try:
        while (elapsed := time.monotonic() - start) < seconds:
            due = max(int(elapsed * rate) - sent, 0)
            pipe = client.pipeline(transaction=False)
            for n in range(sent, sent + due):
                fields = {"agent_id": agents[n % len(agents)], "kind": "input",
                          "work_item_id": "", "candidates": "[]",
                          "tick_id": f"bench-{n}-{time.time_ns()}"}  # fmt: skip
                pipe.xadd(stack.names.wakes, fields, maxlen=100_000, approximate=True)
            pipe.execute()
            sent += due
            await asyncio.sleep(0.01)
    finally:
        client.close()
    return sent


def wake_flow(stack: Stack) -> tuple[float, int]:
    pid = stack.ingress.proc.pid if stack.ingress.proc else 0
    before, started = cpu_seconds(pid), time.monotonic()
    sent = asyncio.run(produce_wakes(stack, RATE, SECONDS))
    return (cpu_seconds(pid) - before) / (time.monotonic() - started), sent


def start_feeds(stack: Stack, seconds: float) -> list[subprocess.Popen[str]]:
    pairs = [f"{agent}={token}" for agent, token in stack.tokens.items()]
    module = [sys.executable, "-m", "tests.bench.wake_watchers", stack.url, str(seconds)]
    return [
        subprocess.Popen(  # noqa: S603 - our own module
            [*module, *pairs[n::CLIENT_PROCS]], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for n in range(CLIENT_PROCS)
    ]


def finish_feeds(procs: list[subprocess.Popen[str]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"received": 0, "foreign": 0, "delays_ms": [], "errors": []}
    merged["cpu"] = 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        result = orjson.loads(out.strip().splitlines()[-1])
        for key in ("received", "foreign", "delays_ms", "errors"):
            merged[key] += result[key]
        merged["cpu"] = max(merged["cpu"], result["cpu_s"] / result["wall_s"])
    return merged


def per_delivery_us(added_share: float, deliveries: int, seconds: float) -> float:
    return added_share * seconds / max(deliveries, 1) * 1e6


def test_wake_feeds_cost_per_tick_beside_the_console(stack: Stack) -> None:
    print(f"\nwakes bench: {AGENTS} agents, {RATE}/s for {SECONDS:.0f} s, {CLIENT_PROCS} procs")
    base, sent = wake_flow(stack)
    print(f"1. wake flow, no feed: {sent} ticks; ingress CPU {base:.1%}")

    feeds = start_feeds(stack, SECONDS + 8)
    time.sleep(4)  # every feed open before the flow starts
    cpu, sent = wake_flow(stack)
    heard = finish_feeds(feeds)
    assert heard["errors"] == []
    assert heard["foreign"] == 0, "a feed heard another agent's tick"
    assert heard["received"] > 0
    wake_us = per_delivery_us(cpu - base, heard["received"], SECONDS)
    delay = percentiles(heard["delays_ms"])
    print(f"2. {AGENTS} wake feeds: {sent} ticks sent, {heard['received']} delivered, "
          f"0 foreign; ingress CPU {cpu:.1%} (+{cpu - base:.1%}), {wake_us:.0f} µs per delivery; "
          f"busiest client process {heard['cpu']:.0%}; delay {delay}")  # fmt: skip

    config = Config(rate=RATE, seconds=SECONDS, watchers=AGENTS)
    console_base, _ = measure_flow(stack.console, config)
    watchers = start_watchers(stack.console, config.watchers, SECONDS + 8, CLIENT_PROCS)
    time.sleep(4)
    console_cpu, _ = measure_flow(stack.console, config)
    seen = finish_watchers(watchers)
    assert seen["errors"] == []
    console_us = per_delivery_us(console_cpu - console_base, seen["received"], SECONDS)
    print(f"3. console flow, no watcher: ingress CPU {console_base:.1%}; {config.watchers} "
          f"console watchers: {seen['received']} delivered; ingress CPU {console_cpu:.1%} "
          f"(+{console_cpu - console_base:.1%}), {console_us:.0f} µs per delivery; "
          f"delay {percentiles(seen['delays_ms'])}")  # fmt: skip
