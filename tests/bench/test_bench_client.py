"""Client benchmark: what one Redis round trip costs the calling process, by client.

Every longrun service pays a fixed cost per wake-up at low rates (a stream read, a few Function
calls or pipelines, an ack), and most of it is the client's per-call machinery, not the bytes.
This measures one `XADD ... MAXLEN ~ 1000` answered before the next is sent, `CALLS` times, as

- the project's client (`shared.store.client.connect`: a BoundedPool of hiredis packing
  connections with a health check), which every service uses;
- redis-py with its blocking pool of the same connections (the project's client before
  BoundedPool);
- redis-py with a plain (non-blocking) pool of the same connections;
- redis-py with one dedicated connection (`single_connection_client`);
- the baseline: the same command bytes written on an asyncio stream and its reply read back,
  with no client library at all.

It prints the wall time and this process's CPU time per call; it asserts only that every call
was answered. Run by hand:
`.venv/bin/python -m pytest tests/bench/test_bench_client.py -m bench -s -p no:cacheprovider`
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlparse

import pytest
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis

from shared.store.client import (
    MAX_CONNECTIONS,
    POOL_WAIT_SECONDS,
    AnyRedis,
    HiredisPackingConnection,
    connect,
)
from tests.bench.caller import tuned_like_a_service

pytestmark = [pytest.mark.bench, pytest.mark.timeout(600)]

CALLS = int(os.environ.get("BENCH_CLIENT_CALLS", "20000"))
ROUNDS = int(os.environ.get("BENCH_CLIENT_ROUNDS", "3"))
BODY = b"x" * 200


def _resp(*parts: bytes) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


async def _timed(call: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Microseconds of wall and of this process's CPU per call, after a warm-up."""
    for _ in range(1000):
        await call()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(CALLS):
        await call()
    return (
        (time.perf_counter() - wall) / CALLS * 1e6,
        (time.process_time() - cpu) / CALLS * 1e6,
    )


async def _with_client(client: AnyRedis, stream: str) -> tuple[float, float]:
    async def call() -> object:
        return await client.xadd(stream, {"m": BODY}, maxlen=1000, approximate=True)

    try:
        await client.ping()
        return await _timed(call)
    finally:
        await client.aclose()


async def _raw(url: str, stream: str) -> tuple[float, float]:
    """The command's bytes on an asyncio stream; the reply (a bulk string) read whole."""
    where = urlparse(url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port or 6379)
    command = _resp(b"XADD", stream.encode(), b"MAXLEN", b"~", b"1000", b"*", b"m", BODY)

    async def call() -> bytes:
        writer.write(command)
        header = await reader.readline()
        assert header.startswith(b"$"), header
        return await reader.readexactly(int(header[1:]) + 2)

    try:
        return await _timed(call)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_bench_client_round_trip(redis_url: str) -> None:
    stream = f"bench-client-{os.getpid()}"
    kinds: dict[str, Callable[[], Awaitable[tuple[float, float]]]] = {
        "longrun client (BoundedPool)": lambda: _with_client(connect(redis_url), stream),
        "redis-py, blocking pool": lambda: _with_client(
            Redis.from_pool(
                BlockingConnectionPool.from_url(
                    redis_url,
                    max_connections=MAX_CONNECTIONS,
                    timeout=POOL_WAIT_SECONDS,
                    health_check_interval=30,
                    connection_class=HiredisPackingConnection,
                )
            ),
            stream,
        ),
        "redis-py, plain pool": lambda: _with_client(
            Redis.from_pool(
                ConnectionPool.from_url(redis_url, connection_class=HiredisPackingConnection)
            ),
            stream,
        ),
        "redis-py, one connection": lambda: _with_client(
            Redis.from_url(redis_url, single_connection_client=True), stream
        ),
        "raw asyncio stream (baseline)": lambda: _raw(redis_url, stream),
    }
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    try:
        with tuned_like_a_service():
            for _ in range(ROUNDS):  # interleaved, so drift hits every kind alike
                for kind, run in kinds.items():
                    results[kind].append(await run())
    finally:
        cleanup = connect(redis_url)
        await cleanup.delete(stream)
        await cleanup.aclose()
    print(f"\none XADD answered before the next, {CALLS} calls x {ROUNDS} rounds, {redis_url}")
    print("| client | wall µs/call | client CPU µs/call | CPU over the baseline |")
    print("|---|---|---|---|")
    base = min(cpu for _, cpu in results["raw asyncio stream (baseline)"])
    for kind, runs in results.items():
        wall = " / ".join(f"{w:.0f}" for w, _ in runs)
        cpu = " / ".join(f"{c:.0f}" for _, c in runs)
        extra = min(c for _, c in runs) - base
        print(f"| {kind} | {wall} | {cpu} | +{extra:.0f} |")
    assert all(len(runs) == ROUNDS for runs in results.values())
