"""Lightweight wake-feed clients for the wakes benchmark, run as their own process:
`python -m tests.bench.wake_watchers URL SECONDS AGENT=TOKEN...` opens one
`/v1/agents/{AGENT}/wakes` stream per argument with that agent's own token, reads for SECONDS,
and prints one JSON line: `{"received": n, "foreign": n, "delays_ms": [...], "errors": [...],
"cpu_s": ..., "wall_s": ...}`. A delay is the arrival time minus the send time the producer put
in the tick id (`bench-<seq>-<epoch ns>`); `foreign` counts ticks of another agent (must be 0)."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict, dataclass, field

import httpx
import orjson


@dataclass
class Tally:
    received: int = 0
    foreign: int = 0
    delays_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def watch(
    http: httpx.AsyncClient, agent_id: str, token: str, until: float, tally: Tally
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    try:
        url = f"/v1/agents/{agent_id}/wakes"
        async with http.stream("GET", url, headers=headers) as answer:
            async for line in answer.aiter_lines():
                if line.startswith("data: "):
                    arrived_ms = time.time() * 1000
                    tick = orjson.loads(line[6:])
                    tally.received += 1
                    tally.foreign += tick["agent_id"] != agent_id
                    sent_ns = int(tick["tick_id"].rsplit("-", 1)[1])
                    tally.delays_ms.append(arrived_ms - sent_ns / 1e6)
                if time.time() > until:
                    break
    except httpx.HTTPError as exc:
        tally.errors.append(repr(exc))


async def main(url: str, seconds: float, pairs: list[str]) -> None:
    tally = Tally()
    limits = httpx.Limits(max_connections=len(pairs) + 10)
    timeout = httpx.Timeout(30, read=60)
    cpu, wall = time.process_time(), time.monotonic()
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as http:
        until = time.time() + seconds
        agents = [pair.split("=", 1) for pair in pairs]
        await asyncio.gather(*(watch(http, a, t, until, tally) for a, t in agents))
    result = {
        **asdict(tally),
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - wall,
    }
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    url, seconds, *pairs = sys.argv[1:]
    asyncio.run(main(url, float(seconds), pairs))
