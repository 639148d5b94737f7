"""Webhook acceptance checks for real: the runner's call against a real HTTP server fails closed
on every answer but a 2xx `{passed: bool, reason: string}`, and signs the body; with the ledger
and scheduler as processes, verifying items end passed (done, report promoted once) or failed
(no result). A crash of every service while 100 items verify: test_gate_crashes.py."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.scheduler.webhooks import PendingCheck, WebhookRunner, pending_checks
from shared.domain.acceptance import VerificationStatus, WebhookCheck
from shared.domain.records import WorkItem, WorkItemOutcome
from shared.domain.webhooks import WebhookAllow
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Group, Names
from tests.builders import make_work_item
from tests.integration.conftest import free_port
from tests.integration.ledger_driver import plan_artifact
from tests.integration.scheduler_driver import (
    LEDGER,
    LEDGER_PORT,
    SCHEDULER,
    SCHEDULER_PORT,
    WATCHED,
    ensure,
    push,
    wait_until,
)
from tests.integration.webhook_server import WebhookServer

SECRET = "webhook-secret-for-tests"
LOCAL = WebhookAllow.parse("127.0.0.1")
"""The agents' checks here call a server on loopback: allowed as an address."""


@pytest.fixture
async def server() -> AsyncIterator[WebhookServer]:
    started = await WebhookServer().start()
    yield started
    started.hold.set()
    await started.stop()


@pytest.fixture
async def runner(redis: AnyRedis, names: Names) -> AsyncIterator[WebhookRunner]:
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id)
    made = WebhookRunner(redis, names, client, secret=SECRET, concurrency=8, allow=LOCAL)
    yield made
    await made.close()


def verifying_item(url: str, timeout_s: float = 5.0) -> PendingCheck:
    item = make_work_item(
        acceptance=(WebhookCheck(url=url, timeout_s=timeout_s),),
        verification={
            "status": "verifying",
            "attempt": 3,
            "checks": [{"kind": "webhook"}],
            "report_candidate": "Shipped the fix.",
            "started_at": utc_now(),
        },
    )
    (pending,) = pending_checks(item)
    return pending


# ---------------------------------------------------------------- one call, every answer


@pytest.mark.parametrize(
    ("path", "passed", "reason"),
    [
        ("/pass", True, "all green"),
        ("/fail", False, "3 tests fail"),
        ("/500", False, "webhook answered HTTP 500"),
        ("/nonjson", False, "without JSON"),
        ("/yes", False, 'the answer is not {"passed": bool, "reason": string}'),
        ("/noreason", False, 'the answer is not {"passed": bool, "reason": string}'),
    ],
    ids=["pass", "fail", "500", "non-json", "passed-yes", "no-reason"],
)
async def test_only_a_proper_answer_counts(
    server: WebhookServer, runner: WebhookRunner, path: str, passed: bool, reason: str
) -> None:
    assert await_pair(await runner.call(verifying_item(server.url(path))), passed, reason)


def await_pair(got: tuple[bool, str], passed: bool, reason: str) -> bool:
    assert got[0] is passed, got
    assert reason in got[1], got
    return True


async def test_a_timeout_fails_the_check(server: WebhookServer, runner: WebhookRunner) -> None:
    got = await runner.call(verifying_item(server.url("/slow"), timeout_s=0.3))
    assert await_pair(got, False, "timed out after 0.3 s")


async def test_a_refused_connection_fails_the_check(runner: WebhookRunner) -> None:
    got = await runner.call(verifying_item(f"http://127.0.0.1:{free_port()}/check"))
    assert await_pair(got, False, "webhook unreachable: ConnectError")


async def test_without_a_secret_nothing_is_sent_and_the_check_fails(
    server: WebhookServer, runner: WebhookRunner
) -> None:
    runner.secret = None
    got = await runner.call(verifying_item(server.url("/pass")))
    assert await_pair(got, False, "LONGRUN_WEBHOOK_SECRET is not set")
    assert server.received == []


async def test_the_body_is_signed_with_the_secret(
    server: WebhookServer, runner: WebhookRunner
) -> None:
    pending = verifying_item(server.url("/pass"))
    await runner.call(pending)
    (got,) = server.received
    digest = hmac.new(SECRET.encode(), got.raw, hashlib.sha256).hexdigest()
    assert got.signature == f"sha256={digest}"
    assert set(got.body) == {"agent_id", "work_item", "report", "attempt"}
    assert (got.body["report"], got.body["attempt"]) == ("Shipped the fix.", 3)
    assert got.body["work_item"]["id"] == pending.item.id


async def test_calls_are_bounded_by_the_concurrency_and_reuse_connections(
    server: WebhookServer, runner: WebhookRunner
) -> None:
    pending = verifying_item(server.url("/delay/100/check"))
    got = await asyncio.gather(*(runner.call(pending) for _ in range(40)))
    assert all(passed for passed, _ in got)
    assert len(server.received) == 40
    assert server.most_busy == 8  # the runner's concurrency, reached and never passed
    assert server.connections <= 8


async def test_closing_cancels_a_running_call_and_sends_no_verdict(
    server: WebhookServer, runner: WebhookRunner, redis: AnyRedis, names: Names
) -> None:
    pending = verifying_item(server.url("/slow"), timeout_s=30)
    running = asyncio.create_task(runner.run([pending]))
    await wait_until(lambda: _true(len(server.received) == 1), 10, "the call to start")
    await runner.close()
    await running
    assert runner.inflight == {}
    stream = names.commands(names.partition(pending.agent_id))
    assert await redis.xlen(stream) == 0  # no verdict: the check is made again by the next


# ---------------------------------------------------------------- the services as processes


def gated(agent_id: str, work_item_id: str, url: str, timeout_s: float = 10) -> c.CreateWorkItem:
    check = {"kind": "webhook", "url": url, "timeout_s": timeout_s}
    return c.CreateWorkItem.model_validate(
        {
            "command_id": f"create-{work_item_id}",
            "agent_id": agent_id,
            "args": {"objective": "ship it", "acceptance": [check]},
            "work_item_id": work_item_id,
            "plan_artifact": plan_artifact(work_item_id),
        }
    )


def complete(agent_id: str, work_item_id: str) -> c.CompleteWorkItem:
    return c.CompleteWorkItem.model_validate(
        {
            "command_id": f"complete-{work_item_id}",
            "agent_id": agent_id,
            "args": {"work_item_id": work_item_id},
            "report_text": f"report of {work_item_id}",
        }
    )


async def start(spawn: Any) -> list[Any]:
    allow = {"LONGRUN_WEBHOOK_ALLOW": "127.0.0.1"}  # the ledger and the scheduler both check
    env = {"LONGRUN_WEBHOOK_SECRET": SECRET, "LONGRUN_WEBHOOK_SWEEP_MS": "60000", **allow}
    procs = [spawn(LEDGER, LEDGER_PORT, **allow), spawn(SCHEDULER, SCHEDULER_PORT, **env)]
    WATCHED.clear()
    for proc in procs:
        WATCHED.append(lambda proc=proc: f"{proc.module}: {proc.log_path.read_text()[-1500:]}")
        await proc.wait_ready()
    return procs


async def items_of(reads: ReadModel, agents: list[str]) -> list[WorkItem]:
    return [item for agent in agents for item in await reads.all_items(agent)]


def settled(items: list[WorkItem], count: int) -> bool:
    ended = [i for i in items if not i.is_verifying and i.verification is not None]
    return len(items) == len(ended) == count


async def test_verdicts_end_verification_passed_or_failed(
    spawn: Any, redis: AnyRedis, names: Names, reads: ReadModel, server: WebhookServer
) -> None:
    await start(spawn)
    agent = "gate-e2e"
    paths = {new_id("wi_"): p for p in ("/pass", "/fail", "/500", "/nonjson", "/yes")}
    commands: list[c.Command] = [ensure(agent)]
    commands += [gated(agent, wi, server.url(p)) for wi, p in paths.items()]
    commands += [complete(agent, wi) for wi in paths]
    await push(redis, names, commands)

    async def done() -> bool:
        return settled(await items_of(reads, [agent]), len(paths))

    await wait_until(done, 60, "every verification to end")
    by_id = {item.id: item for item in await reads.all_items(agent)}
    briefs, _ = await reads.briefs(agent, None)
    for wi, path in paths.items():
        item = by_id[wi]
        assert item.verification is not None
        if path == "/pass":
            assert item.outcome is WorkItemOutcome.DONE
            assert item.verification.status is VerificationStatus.PASSED
        else:
            assert item.outcome is None, path
            assert item.verification.status is VerificationStatus.FAILED, path
    assert [b.work_item_id for b in briefs] == [next(iter(paths))]
    inbox = await reads.inbox(agent)
    assert sorted(m.work_item_id or "" for m in inbox) == sorted(list(paths)[1:])


async def test_a_slow_webhook_holds_up_no_later_check_and_its_entry_stays_pending(
    spawn: Any, redis: AnyRedis, names: Names, reads: ReadModel, server: WebhookServer
) -> None:
    """One agent, so one partition: the slow check's event comes first, the others after it.
    They are decided while it still runs (its webhook answers after 10 s), and its event entry
    is the only one left unacked until its verdict is sent."""
    await start(spawn)
    agent = "gate-slow"
    slow, quick = new_id("wi_"), [new_id("wi_") for _ in range(5)]
    commands: list[c.Command] = [
        ensure(agent),
        gated(agent, slow, server.url("/delay/10000/check"), 30),
    ]
    commands += [gated(agent, wi, server.url("/pass")) for wi in quick]
    await push(redis, names, [*commands, complete(agent, slow)])
    await wait_until(lambda: _true(len(server.received) == 1), 30, "the slow call")
    await push(redis, names, [complete(agent, wi) for wi in quick])
    stream = names.events(names.partition(agent))

    async def quick_done() -> bool:
        items = {i.id: i for i in await reads.all_items(agent)}
        return all(items[wi].outcome is WorkItemOutcome.DONE for wi in quick)

    await wait_until(quick_done, 30, "the quick checks decided")
    (held,) = [i for i in await reads.all_items(agent) if i.id == slow]
    assert held.is_verifying
    assert (await redis.xpending(stream, Group.WEBHOOKS))["pending"] == 1

    async def slow_done() -> bool:
        (item,) = [i for i in await reads.all_items(agent) if i.id == slow]
        return item.outcome is WorkItemOutcome.DONE

    await wait_until(slow_done, 30, "the slow check to pass")
    await wait_until(
        lambda: _pending_is(redis, stream, 0), 10, "the slow entry acked after its verdict"
    )


async def _true(value: bool) -> bool:
    return value


async def _pending_is(redis: AnyRedis, stream: str, count: int) -> bool:
    return bool((await redis.xpending(stream, Group.WEBHOOKS))["pending"] == count)
