"""Delegations survive a crash at every step and duplicated deliveries, on a real Redis with
parent and child in different partitions: the ledger dying between its commit and its send,
the relay (a restarted ledger) sending what was owed, copies delivered twice, and ledger
processes killed with kill -9 while delegations run. Every delegation ends in one status, each
result reaches its parent once, and no child is left running under a finished parent."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

import services.ledger.service as ledger_service
from services.ledger.handlers import decode_command
from services.ledger.outbox import OutboxRelay
from shared.domain.delegation import DelegationStatus
from shared.domain.records import MessageOrigin
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.tool_gateway import ToolGateway
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome
from tests.integration.ledger_driver import Driver, new_ledger, plan_artifact

WITHIN = 120.0
"""An upper bound on recovery, not a latency assertion."""


def apart(names: Names, count: int, stem: str) -> list[str]:
    """`count` agent ids spread over every partition, each different from its neighbour's."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        candidate = f"{stem}-{n}"
        n += 1
        if not found or names.partition(candidate) != names.partition(found[-1]):
            found.append(candidate)
    return found


async def stream_commands(redis: AnyRedis, names: Names, agent_id: str) -> list[c.Command]:
    entries = await redis.xrange(names.commands(names.partition(agent_id)))
    commands = [decode_command({k.decode(): v for k, v in f.items()}) for _, f in entries]
    return [cmd for cmd in commands if cmd.agent_id == agent_id]


async def history(redis: AnyRedis, names: Names, agent_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(d) for d in await redis.lrange(names.history(agent_id), 0, -1)]


class Later:
    """A clock that each call reads one retry interval further on: every relay pass finds
    what it sent last time due again."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        return utc_now() + timedelta(seconds=10 * self.calls)


async def test_a_crash_at_each_step_loses_nothing_and_repeats_nothing(
    redis: AnyRedis, names: Names, reads: ReadModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_id, child_id = apart(names, 2, "crash")
    parent, child = Driver(new_ledger(redis, names), reads, parent_id), None
    await parent.ensure()
    child = Driver(parent.ledger, reads, child_id)
    await child.ensure()
    root = await parent.create("Root work")
    await parent.tool("PickWorkItem", work_item_id=root)

    # Step 1 done, step 2 never: the process "dies" right after its commit.
    monkeypatch.setattr(ledger_service, "queue_sends", lambda pipe, outgoing: None)
    child_wi = new_id("wi_")
    delegate = c.DelegateWorkItem(
        command_id="delegate-1",
        agent_id=parent_id,
        args={"to_agent": child_id, "objective": "Count rows", "reason": "specialist"},  # type: ignore[arg-type]
        delegation_id=new_id("dlg_"),
        child_work_item_id=child_wi,
        child_plan_artifact=plan_artifact(child_wi),
    )
    reply = await parent.send(delegate)
    assert reply.outcome is CommandOutcome.APPLIED, reply
    assert await stream_commands(redis, names, child_id) == []
    outbox = names.outbox(names.partition(parent_id))
    assert await redis.hexists(outbox, f"{delegate.delegation_id}:create")

    # A restarted ledger (fresh process state) and its relay: the owed creation goes out.
    monkeypatch.undo()
    restarted = new_ledger(redis, names)
    relay = OutboxRelay(redis, names, clock=Later())
    assert (await relay.pass_once())["sent"] == 1
    sent = await stream_commands(redis, names, child_id)
    assert [cmd.command_id for cmd in sent] == [f"{delegate.delegation_id}:create"]
    # Delivered twice (a second relay pass before the apply, and a redelivered entry).
    assert (await relay.pass_once())["sent"] == 1
    copies = await stream_commands(redis, names, child_id)
    outcomes = [a.reply.outcome for a in await restarted.apply_batch([*copies, copies[0]])]
    assert outcomes.count(CommandOutcome.APPLIED) == 1
    delegated = [i for i in await reads.all_items(child_id) if i.delegated_from is not None]
    assert [i.id for i in delegated] == [child_wi]
    # Settled: the relay finds the command applied and drops it.
    assert (await relay.pass_once())["delivered"] == 1
    assert not await redis.hexists(outbox, f"{delegate.delegation_id}:create")

    # The result: the child's ledger dies after committing the completion, before sending.
    monkeypatch.setattr(ledger_service, "queue_sends", lambda pipe, outgoing: None)
    child = Driver(restarted, reads, child_id)
    await child.tool("CompleteWorkItem", work_item_id=child_wi, report_text="42 rows")
    monkeypatch.undo()
    assert (await relay.pass_once())["sent"] == 1
    assert (await relay.pass_once())["sent"] == 1  # not yet applied: sent again
    results = [
        cmd
        for cmd in await stream_commands(redis, names, parent_id)
        if isinstance(cmd, c.RecordDelegationResult)
    ]
    assert len(results) == 2
    third = new_ledger(redis, names)  # and another restart before the parent applies them
    await third.apply_batch(results)
    await third.apply_batch(results)
    assert (await relay.pass_once())["delivered"] == 1

    events = await history(redis, names, parent_id)
    finished = [e for e in events if e["type"] == "delegation_finished"]
    assert [(e["data"]["status"], e["data"]["report"]) for e in finished] == [
        ("succeeded", "42 rows")
    ]
    assert len([e for e in events if e["type"] == "wait_triggered"]) == 1
    inbox = [m for m in await reads.inbox(parent_id) if m.origin is MessageOrigin.TASK_RESULT]
    assert [m.report for m in inbox] == ["42 rows"]
    assert await redis.hlen(outbox) == 0
    assert await redis.hlen(names.outbox(names.partition(child_id))) == 0


async def wait_until(check: Any) -> Any:
    deadline = time.monotonic() + WITHIN
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, "not settled in time"
        await asyncio.sleep(0.1)


async def test_kill9_of_the_ledger_while_delegations_run(
    redis: AnyRedis,
    names: Names,
    reads: ReadModel,
    *,
    client: LedgerClient,
    spawn: Any,
    tmp_path: Path,
) -> None:
    """Parents and children in different partitions; two ledger processes, each killed with
    kill -9 while creations, results and cancellations are in flight."""
    settings = {"LONGRUN_OUTBOX_RETRY_MS": "300", "LONGRUN_OUTBOX_INTERVAL_MS": "100"}
    ledgers = [spawn("services.ledger", "LONGRUN_LEDGER_PORT", **settings) for _ in range(2)]
    for proc in ledgers:
        await proc.wait_ready()
    parents = apart(names, 8, "parent")
    children = apart(names, 8, "child")
    gateway = ToolGateway(
        client,
        agent_home=tmp_path / "home",
        callback_base_url="http://127.0.0.1:1",
        clock=utc_now,
        new_id=new_id,
    )
    for agent in [*parents, *children]:
        await client.send(
            c.EnsureAgent(
                command_id=f"ensure-{agent}",
                agent_id=agent,
                agent_token_hash="a" * 64,
                callback_token_hash="b" * 64,
            )
        )
    roots: dict[str, str] = {}
    for parent in parents:
        made = await gateway.call(
            parent, "CreateWorkItem", {"objective": "Root"}, command_id=new_id("c")
        )
        roots[parent] = made.result["work_item"]["id"]  # type: ignore[index]
        await gateway.call(
            parent, "PickWorkItem", {"work_item_id": roots[parent]}, command_id=new_id("c")
        )
    sends = [
        gateway.call(
            parent,
            "DelegateWorkItem",
            {"to_agent": child, "objective": f"Work for {parent}", "reason": "help"},
            command_id=f"delegate-{parent}",
        )
        for parent, child in zip(parents, children, strict=True)
    ]
    pending = asyncio.gather(*sends)
    ledgers[0].kill9()  # while the delegations are being applied
    answers = await pending
    assert all(a.status == "success" for a in answers), answers

    async def delegated(child: str) -> Any:
        items = [i for i in await reads.all_items(child) if i.delegated_from is not None]
        return items[0] if items else None

    items = {child: await wait_until(lambda ch=child: delegated(ch)) for child in children}
    ledgers[0].start()
    # Half the children finish, half their parents cancel; the other ledger dies meanwhile.
    finishing = children[::2]
    cancelling = parents[1::2]
    work = [
        gateway.call(
            child,
            "CompleteWorkItem",
            {"work_item_id": items[child].id},
            command_id=f"complete-{child}",
            report_text=f"report of {child}",
        )
        for child in finishing
    ]
    work += [
        gateway.call(
            parent,
            "CancelDelegation",
            {"delegation_id": a.result["delegation"]["id"], "reason": "no longer needed"},  # type: ignore[index]
            command_id=f"cancel-{parent}",
        )
        for parent, a in zip(parents, answers, strict=True)
        if parent in cancelling
    ]
    running = asyncio.gather(*work)
    ledgers[1].kill9()
    await ledgers[0].wait_ready()
    assert all(a.status == "success" for a in await running)
    ledgers[1].start()

    async def settled() -> bool:
        for parent, child in zip(parents, children, strict=True):
            records = await reads.delegations(parent)
            if len(records) != 1 or records[0].running:
                return False
            (mine,) = await reads.delegations(child)
            if mine.status is not records[0].status:
                return False
        outboxes = [await redis.hlen(names.outbox(p)) for p in range(names.partitions)]
        return sum(outboxes) == 0

    await wait_until(settled)
    for parent, child in zip(parents, children, strict=True):
        (record,) = await reads.delegations(parent)
        expected = DelegationStatus.SUCCEEDED if child in finishing else DelegationStatus.CANCELLED
        assert record.status is expected
        events = await history(redis, names, parent)
        finished = Counter(
            e["data"]["status"] for e in events if e["type"] == "delegation_finished"
        )
        assert finished == Counter({expected.value: 1})
        results = [m for m in await reads.inbox(parent) if m.origin is MessageOrigin.TASK_RESULT]
        assert len(results) == (1 if child in finishing else 0)
        child_item = next(i for i in await reads.all_items(child) if i.id == items[child].id)
        assert not child_item.is_open
        created = [
            e for e in await history(redis, names, child) if e["type"] == "work_item_created"
        ]
        assert len(created) == 1
