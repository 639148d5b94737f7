"""Acceptance webhooks benchmark: 1,000 WorkItems verifying at once against a webhook that
answers in 200 ms, with the ledger and the scheduler as processes. Prints the time from the
CompleteWorkItem commands to the last verdict and the CPU seconds each process spent, beside a
same-run baseline: the same 1,000 items completed without a gate.

Run by hand: `.venv/bin/python -m pytest tests/bench/test_bench_webhooks.py -m bench -s`.
Knobs: `BENCH_WEBHOOK_ITEMS` (1000), `BENCH_WEBHOOK_DELAY_MS` (200). Asserts only that every
item ended as expected, never about time.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis

from shared.domain.records import WorkItemOutcome
from shared.runtime import new_id
from shared.store.client import AnyRedis, connect
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from tests.integration.conftest import ServiceProcess, free_port
from tests.integration.ledger_driver import plan_artifact
from tests.integration.scheduler_driver import ensure, push
from tests.integration.webhook_server import WebhookServer

pytestmark = pytest.mark.bench

ITEMS = int(os.environ.get("BENCH_WEBHOOK_ITEMS", "1000"))
DELAY_MS = int(os.environ.get("BENCH_WEBHOOK_DELAY_MS", "200"))
PER_AGENT = 20
PARTITIONS = 16


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[AnyRedis, Names, list[ServiceProcess]]]:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = "bw" + secrets.token_hex(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(PARTITIONS),
        LONGRUN_AGENT_HOME=str(tmp_path / "home"),
        LONGRUN_LOG_LEVEL="WARNING",
        LONGRUN_WEBHOOK_SECRET="bench-secret",
        LONGRUN_WEBHOOK_ALLOW="127.0.0.1",  # the agents' checks call the local server
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


def _create(agent: str, wi: str, url: str | None) -> c.CreateWorkItem:
    checks = [{"kind": "webhook", "url": url, "timeout_s": 30}] if url else []
    return c.CreateWorkItem.model_validate(
        {
            "command_id": f"create-{wi}",
            "agent_id": agent,
            "args": {"objective": "bench", "acceptance": checks},
            "work_item_id": wi,
            "plan_artifact": plan_artifact(wi),
        }
    )


def _complete(agent: str, wi: str) -> c.CompleteWorkItem:
    return c.CompleteWorkItem.model_validate(
        {
            "command_id": f"complete-{wi}",
            "agent_id": agent,
            "args": {"work_item_id": wi},
            "report_text": "done",
        }
    )


async def _until(count: Any, wanted: int) -> None:
    """Poll a count until it reaches `wanted` (the figures come from Redis, not an event)."""
    while await count() < wanted:  # noqa: ASYNC110 - Redis holds the state
        await asyncio.sleep(0.05)


async def _round(
    redis: AnyRedis, names: Names, procs: list[ServiceProcess], url: str | None
) -> dict[str, Any]:
    tag = secrets.token_hex(3)
    agents = [f"bench-{tag}-{n}" for n in range(max(1, ITEMS // PER_AGENT))]
    plan = {a: [new_id("wi_") for _ in range(PER_AGENT)] for a in agents}
    reads = ReadModel(redis, names)
    await push(redis, names, [ensure(a) for a in agents])
    await push(redis, names, [_create(a, wi, url) for a in agents for wi in plan[a]])

    async def count_done() -> int:
        done = 0
        for agent in agents:
            items = await reads.all_items(agent)
            done += sum(1 for i in items if i.outcome is WorkItemOutcome.DONE)
        return done

    async def created() -> int:
        return sum([len(await reads.all_items(a)) for a in agents])

    await _until(created, len(agents) * PER_AGENT)
    cpu = [_cpu_seconds(p.proc.pid) for p in procs if p.proc is not None]
    started = time.monotonic()
    await push(redis, names, [_complete(a, wi) for a in agents for wi in plan[a]])
    await _until(count_done, len(agents) * PER_AGENT)
    elapsed = time.monotonic() - started
    spent = [
        _cpu_seconds(p.proc.pid) - before
        for p, before in zip(procs, cpu, strict=True)
        if p.proc is not None
    ]
    return {"items": len(agents) * PER_AGENT, "seconds": elapsed, "cpu": spent}


async def test_a_thousand_items_verifying_at_once(
    stack: tuple[AnyRedis, Names, list[ServiceProcess]],
) -> None:
    redis, names, procs = stack
    server = await WebhookServer().start()
    try:
        baseline = await _round(redis, names, procs, None)
        gated = await _round(redis, names, procs, server.url(f"/delay/{DELAY_MS}/check"))
    finally:
        await server.stop()
    for name, got in (("no gate (baseline)", baseline), (f"webhook {DELAY_MS} ms", gated)):
        ledger_cpu, scheduler_cpu = got["cpu"]
        print(
            f"{name}: {got['items']} items, last outcome after {got['seconds']:.2f} s; "
            f"CPU ledger {ledger_cpu:.2f} s, scheduler {scheduler_cpu:.2f} s"
        )
    assert len(server.received) >= gated["items"]
