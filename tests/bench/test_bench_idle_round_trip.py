"""Idle round-trip benchmark: what one ledger round trip costs when the processes have been idle.

A turn spends its overhead in a few ledger round trips separated by model calls, so every
process on the path (the caller, Redis, the ledger) has usually gone idle before each one. This
measures, one call at a time with a pause of GAP between calls, for each gap in
BENCH_IDLE_GAPS_MS:

- the baseline: a raw redis-py ping-pong between this process and an echo process (XADD, the
  echo's blocking XREAD wakes it, it XADDs the answer, this process's blocking XREAD wakes): the
  same four wake-ups as a ledger round trip, with no work in between;
- the ledger: `LedgerClient.send` of an AppendOperatorMessage to a ledger process
  (`python -m services.ledger`).

Nothing about timing is asserted; every call must be answered. Run by hand:

    .venv/bin/python -m pytest tests/bench/test_bench_idle_round_trip.py -m bench -s \
        -p no:cacheprovider
"""

from __future__ import annotations

import asyncio
import os
import platform
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import connect
from shared.store.functions import load_functions
from shared.wire import commands as c
from shared.wire.names import Names
from tests.bench.test_bench_executor import cleanup, spawn
from tests.integration.test_executor_process import ensure

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

GAPS_MS = [float(x) for x in os.environ.get("BENCH_IDLE_GAPS_MS", "0,2,20,200").split(",")]
SECONDS = float(os.environ.get("BENCH_IDLE_SECONDS", "8"))
"""Time per gap and path (at most 2,000 calls)."""

ECHO = """
import asyncio, sys
import redis.asyncio as aioredis

async def main(url, ask, answer):
    r = aioredis.Redis.from_url(url)
    last = "$"
    while True:
        found = await r.xread({ask: last}, block=1000, count=100)
        for _, entries in found or []:
            for entry_id, fields in entries:
                last = entry_id
                await r.xadd(answer, fields, maxlen=1000, approximate=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def timed(call: Callable[[], Awaitable[object]], gap_s: float) -> list[float]:
    """Milliseconds per call, one at a time, `gap_s` apart; the first 10% left out as warm-up."""
    calls = max(50, min(2000, int(SECONDS / max(gap_s, 0.002))))
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        out.append((time.perf_counter() - started) * 1000)
        if gap_s:
            await asyncio.sleep(gap_s)
    return sorted(out[calls // 10 :])


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


async def test_idle_round_trip(redis_url: str, tmp_path: Path) -> None:
    prefix = "bi" + secrets.token_hex(4)
    ask, answer = f"{prefix}:echo:ask", f"{prefix}:echo:answer"
    echo = await asyncio.create_subprocess_exec(sys.executable, "-c", ECHO, redis_url, ask, answer)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(REDIS_URL=redis_url, LONGRUN_PREFIX=prefix, LONGRUN_LOG_LEVEL="WARNING")
    ledger = spawn("services.ledger", "LONGRUN_LEDGER_PORT", env, tmp_path / "ledger.log")
    redis = connect(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    client = LedgerClient(redis, Names(prefix=prefix), clock=utc_now, new_id=new_id)
    rows = []
    try:
        await load_functions(redis)
        await ledger.wait_ready()
        await client.start()
        assert (await client.send(ensure("idle-agent"))).error is None
        cursor = b"$"

        async def ping() -> None:
            nonlocal cursor
            await raw.xadd(ask, {"m": b"x" * 200}, maxlen=1000, approximate=True)
            while True:
                found = await raw.xread({answer: cursor}, block=5000, count=1)
                if found:
                    cursor = found[0][1][0][0]
                    return

        async def send() -> None:
            n = new_id("m_")
            cmd = c.AppendOperatorMessage(
                command_id=n, agent_id="idle-agent", message_id=n, text="hello"
            )
            assert (await client.send(cmd)).error is None

        await asyncio.sleep(1)  # the echo's first read is blocked
        for gap in GAPS_MS:
            for name, call in (("raw redis-py ping-pong", ping), ("ledger round trip", send)):
                lat = await timed(call, gap / 1000)
                rows.append((gap, name, len(lat), pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0.99)))
    finally:
        await client.stop()
        echo.kill()
        await echo.wait()
        ledger.stop()
        await raw.aclose()
        await redis.aclose()
        cleanup(redis_url, prefix)
    print(f"\nmachine: {platform.machine()} {os.cpu_count()} CPU, load {os.getloadavg()}")
    print("| gap between calls ms | path | calls | p50 ms | p90 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for gap, name, n, p50, p90, p99 in rows:
        print(f"| {gap:g} | {name} | {n} | {p50:.2f} | {p90:.2f} | {p99:.2f} |")
    assert len(rows) == 2 * len(GAPS_MS)
