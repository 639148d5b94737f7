"""Lightweight SSE clients for the console benchmark, run as their own process:
`python -m tests.bench.console_watchers URL COOKIE SECONDS AGENT...` opens one
`/ui/events?agent=ID` stream per AGENT argument (repeat an id for several watchers of it), reads
for SECONDS, and prints one JSON line: `{"received": n, "delays_ms": [...], "errors": [...],
"cpu_s": ..., "wall_s": ...}` where a delay is the arrival time minus the `at` the producer
stamped on the event, and `cpu_s` over `wall_s` tells whether this process kept up (near 1.0: it
is the bottleneck of its own delays; the benchmark can split the clients over processes)."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import datetime

import httpx
import orjson


def _delay_ms(data: bytes, arrived: float) -> float | None:
    doc = orjson.loads(data)
    at = (doc.get("events") or [{}])[0].get("at")
    if not at:
        return None
    return (arrived - datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()) * 1000


async def watch(
    http: httpx.AsyncClient, agent_id: str, until: float, delays: list[float], errors: list[str]
) -> int:
    received = 0
    try:
        async with http.stream("GET", "/ui/events", params={"agent": agent_id}) as answer:
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    delay = _delay_ms(line[6:].encode(), time.time())
                    received += 1
                    if delay is not None:
                        delays.append(delay)
                if time.time() > until:
                    break
    except httpx.HTTPError as exc:
        errors.append(repr(exc))
    return received


async def main(url: str, cookie: str, seconds: float, agents: list[str]) -> None:
    delays: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=len(agents) + 10)
    timeout = httpx.Timeout(30, read=60)
    cpu, wall = time.process_time(), time.monotonic()
    async with httpx.AsyncClient(
        base_url=url, cookies={"longrun_session": cookie}, limits=limits, timeout=timeout
    ) as http:
        until = time.time() + seconds
        counts = await asyncio.gather(*(watch(http, a, until, delays, errors) for a in agents))
    result = {"received": sum(counts), "delays_ms": delays, "errors": errors}
    result |= {"cpu_s": time.process_time() - cpu, "wall_s": time.monotonic() - wall}
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    url, cookie, seconds, *agents = sys.argv[1:]
    asyncio.run(main(url, cookie, float(seconds), agents))
