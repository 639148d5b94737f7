"""The acceptance gate survives a crash of every service: the four services as processes,
scripted agents working operator-created WorkItems gated by a webhook (half pass, half fail
their first attempt and pass the next). While 100 items verify, with the webhook holding every
answer, ingress, ledger, scheduler and executor are each killed with SIGKILL and started again;
the executor and the ledger once more while the failed items are being worked again. Every item
ends done exactly once, its report promoted exactly once, and a failed attempt left no result."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from shared.domain.acceptance import VerificationStatus
from shared.domain.records import BriefKind, WorkItem, WorkItemOutcome
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire.names import Names
from tests.integration.scheduler_driver import WATCHED, history, wait_until
from tests.integration.stack import Stack
from tests.integration.webhook_server import WebhookServer

SECRET = "gate-crash-secret"
AGENTS = 20
PER_AGENT = 5
"""Few items per agent: each costs it two wakes (pick, complete), three more for a retry, and
the default wake budget (25) must not park it."""
WITHIN = 180.0
"""An upper bound on recovery, not a latency assertion."""
CHECK_TIMEOUT_S = 120
"""The longest a webhook check may take: the server holds the first calls until all 100 items
verify, about 18 s at load 9 to 14, where a /pass check of 10 s timed out and failed."""
HOLD_AT_MOST = CHECK_TIMEOUT_S - 20.0
"""How long the test may hold calls, leaving room for the kills before the checks time out: a
held call that times out fails its check, as it must, and would read as a product fault."""


@pytest.fixture
async def server() -> AsyncIterator[WebhookServer]:
    started = await WebhookServer().start()
    yield started
    started.hold.set()
    await started.stop()


async def gated_items(http: httpx.AsyncClient, server: WebhookServer) -> dict[str, str]:
    """Agents with gated items created by the operator: WorkItem id → the webhook path."""
    paths: dict[str, str] = {}
    for n in range(AGENTS):
        agent = f"gate-{n}"
        put = await http.put(f"/v1/agents/{agent}", json={"spec": {}})
        assert put.status_code == 201, put.text
        for k in range(PER_AGENT):
            path = "/pass" if k % 2 else f"/second-attempt-passes/{agent}/{k}"
            check = {"kind": "webhook", "url": server.url(path), "timeout_s": CHECK_TIMEOUT_S}
            args = {
                "objective": f"Ship change {k} of {agent}",
                "plan_status": "ready",
                "todo_list": [{"text": f"Ship change {k}", "state": "pending"}],
                "acceptance": [check],
            }
            made = await http.post(f"/v1/agents/{agent}/tools/CreateWorkItem", json={"args": args})
            assert made.status_code == 200, made.text
            paths[made.json()["result"]["work_item"]["id"]] = path
    return paths


async def every_item(reads: ReadModel) -> list[WorkItem]:
    return [i for n in range(AGENTS) for i in await reads.all_items(f"gate-{n}")]


@pytest.mark.timeout(360)
async def test_every_service_killed_while_100_items_verify(
    spawn: Any, redis: AnyRedis, names: Names, reads: ReadModel, server: WebhookServer
) -> None:
    stack = Stack(spawn, env={"LONGRUN_WEBHOOK_SECRET": SECRET})
    await stack.start()
    assert stack.ingress is not None
    every = [stack.ingress, *stack.services, *stack.executors]
    WATCHED.clear()
    WATCHED.extend(lambda p=p: f"{p.module}: {p.log_path.read_text()[-1500:]}" for p in every)
    server.hold.clear()
    held_since = time.monotonic()
    async with stack.http() as http:
        paths = await gated_items(http, server)

    async def all_verifying() -> bool:
        items = await every_item(reads)
        return len(items) == len(paths) and all(i.is_verifying for i in items)

    await wait_until(
        all_verifying,
        max(1.0, HOLD_AT_MOST - (time.monotonic() - held_since)),
        f"all 100 items to verify within {HOLD_AT_MOST:g} s of the first held webhook call",
    )
    for process in every:
        process.kill9()
    server.hold.set()
    for process in every:
        process.start()
    for process in every:
        await process.wait_ready()

    async def some_failed() -> bool:
        return any(i.verification and i.verification.attempt == 2 for i in await every_item(reads))

    await wait_until(some_failed, WITHIN, "a failed item completed again")
    for process in (*stack.executors, stack.services[0]):
        process.kill9()
        process.start()
        await process.wait_ready()

    async def all_done() -> bool:
        items = await every_item(reads)
        return all(i.outcome is WorkItemOutcome.DONE for i in items)

    await wait_until(all_done, WITHIN, "every item done")
    await _each_done_once(redis, names, reads, paths)


async def _each_done_once(
    redis: AnyRedis, names: Names, reads: ReadModel, paths: dict[str, str]
) -> None:
    for n in range(AGENTS):
        agent = f"gate-{n}"
        events = await history(redis, names, agent)
        counts = Counter((e.get("work_item_id"), e["type"]) for e in events)
        briefs, summaries = await reads.briefs(agent, None)
        results = [b.work_item_id for b in briefs if b.kind is BriefKind.RESULT]
        for item in await reads.all_items(agent):
            retried = paths[item.id] != "/pass"
            assert item.verification is not None
            assert item.verification.status is VerificationStatus.PASSED, item.id
            why = [
                e["data"]["reasons"]
                for e in events
                if e["type"] == "acceptance_failed" and e.get("work_item_id") == item.id
            ]
            assert item.verification.attempt == 1 + retried, (item.id, paths[item.id], why)
            assert counts[(item.id, "acceptance_failed")] == int(retried), (item.id, why)
            assert counts[(item.id, "acceptance_passed")] == 1, item.id
            assert counts[(item.id, "work_item_completed")] == 1, item.id
            # One result for the passing attempt: a failed attempt would have added a second.
            assert results.count(item.id) == 1, item.id
            assert [s.work_item_id for s in summaries].count(item.id) == 1, item.id
            assert item.result_summary == item.verification.report_candidate
