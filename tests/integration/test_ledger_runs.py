"""Runs: several commands of one agent in one batch are decided in sequence and committed by one
`lr_commit` call, each still applied exactly once, in order, with its own reply and events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry
from redis.exceptions import ResponseError

from services.ledger.service import LedgerService
from shared.domain.tools import PickWorkItemInput
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.streams import ensure_groups
from shared.wire import commands as c
from shared.wire.codec import Envelope, decode, encode
from shared.wire.names import Group, Names
from shared.wire.replies import CommandOutcome
from tests.integration.ledger_driver import Driver, new_ledger, plan_artifact

AGENT = "agent-runs"


def message(n: int, command_id: str | None = None) -> c.AppendOperatorMessage:
    return c.AppendOperatorMessage(
        command_id=command_id or f"msg-{n}",
        agent_id=AGENT,
        message_id=f"m-{n}",
        text=f"note {n}",
    )


class CountingLedger(LedgerService):
    """The real service, counting its lr_commit calls."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        metrics = build_metrics(CollectorRegistry())
        super().__init__(redis, names, metrics, clock=utc_now, new_id=new_id, wake_limit=25)
        self.commits = 0

    async def _commit(self, runs: Any, done: Any) -> Any:
        self.commits += sum(run.plan is not None for run in runs)
        return await super()._commit(runs, done)


@pytest.fixture
async def counting(redis: AnyRedis, names: Names, reads: ReadModel) -> CountingLedger:
    service = CountingLedger(redis, names)
    assert (await Driver(service, reads, AGENT).ensure()).outcome is CommandOutcome.APPLIED
    service.commits = 0
    return service


async def inbox_texts(redis: AnyRedis, names: Names) -> list[str]:
    return [orjson.loads(doc)["text"] for doc in await redis.lrange(names.inbox(AGENT), 0, -1)]


async def test_a_run_of_one_agent_commits_once_in_order(
    counting: CountingLedger, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    applied = await counting.apply_batch([message(n) for n in range(10)])
    assert [a.reply.outcome for a in applied] == [CommandOutcome.APPLIED] * 10
    assert [a.reply.command_id for a in applied] == [f"msg-{n}" for n in range(10)]
    assert counting.commits == 1
    assert await inbox_texts(redis, names) == [f"note {n}" for n in range(10)]
    verified = await reads.verify_history(AGENT)
    assert verified.ok
    assert verified.count == 11  # agent_created + one event per message
    assert await redis.xlen(names.events(names.partition(AGENT))) == 11


async def test_a_repeated_command_id_in_one_batch_applies_once(
    counting: CountingLedger, redis: AnyRedis, names: Names
) -> None:
    batch = [message(1), message(2), message(1), message(3)]
    applied = await counting.apply_batch(batch)
    outcomes = [a.reply.outcome for a in applied]
    assert outcomes == [
        CommandOutcome.APPLIED,
        CommandOutcome.APPLIED,
        CommandOutcome.DUPLICATE,
        CommandOutcome.APPLIED,
    ]
    assert await inbox_texts(redis, names) == ["note 1", "note 2", "note 3"]


async def test_an_already_applied_command_inside_a_run_stops_it_there(
    counting: CountingLedger, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    """The cache does not know command 1 was applied by another replica: the run's call
    applies what precedes it, answers it as a duplicate, and the rest is decided again."""
    other = new_ledger(redis, names)
    await counting.apply_batch([message(0)])  # warms the cache
    (first,) = await other.apply_batch([message(1)])
    assert first.reply.outcome is CommandOutcome.APPLIED
    applied = await counting.apply_batch([message(1), message(2), message(3)])
    assert [a.reply.outcome for a in applied] == [
        CommandOutcome.DUPLICATE,
        CommandOutcome.APPLIED,
        CommandOutcome.APPLIED,
    ]
    assert await inbox_texts(redis, names) == ["note 0", "note 1", "note 2", "note 3"]
    assert (await reads.verify_history(AGENT)).count == 5


async def test_a_run_that_lost_the_version_race_is_decided_again(
    counting: CountingLedger, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    other = new_ledger(redis, names)
    await counting.apply_batch([message(0)])  # the cache now holds version n
    await other.apply_batch([message(1)])  # the stored agent moves to n + 1
    applied = await counting.apply_batch([message(2), message(3), message(4)])
    assert {a.reply.outcome for a in applied} == {CommandOutcome.APPLIED}
    assert counting.commits == 3  # the refused run, then the same run from a fresh load
    assert await inbox_texts(redis, names) == [f"note {n}" for n in range(5)]
    assert (await reads.verify_history(AGENT)).ok


async def test_a_read_sent_to_the_ledger_is_rejected_and_the_run_goes_on(
    counting: CountingLedger, reads: ReadModel
) -> None:
    """Reads are answered from the read model; the ledger applies writes only. A read that
    reaches it anyway gets a clear rejection and the writes around it still apply."""
    driver = Driver(counting, reads, AGENT)
    wid = await driver.create("first")
    get = c.GetWorkItem.model_validate(
        {"command_id": "get-1", "agent_id": AGENT, "args": {"work_item_id": wid}}
    )
    applied = await counting.apply_batch([message(8), get, message(9)])
    assert [a.reply.outcome for a in applied] == [
        CommandOutcome.APPLIED,
        CommandOutcome.REJECTED,
        CommandOutcome.APPLIED,
    ]
    error = applied[1].reply.error
    assert error is not None
    assert "does not apply get_work_item" in str(error)


async def test_lr_commit_checks_every_command_before_the_first_write(
    redis: AnyRedis, names: Names
) -> None:
    """A malformed second command refuses the whole call: the first is not written either."""
    keys = [names.agent(AGENT), names.fence(AGENT), "{x}:idem-1", "{x}:idem-2", "{x}:list"]
    first = [3, "*", "", "", b"reply-1", 3, "rpush", 5, b"a"]
    second = [4, "*", "", "", b"reply-2", 3, "bogus", 5, b"b"]
    prefixed = [names.prefix + ":" + k if k.startswith("{") else k for k in keys]
    with pytest.raises(ResponseError, match="unknown op"):
        await redis.fcall("lr_commit", len(prefixed), *prefixed, 60, 2, *first, *second)  # type: ignore[misc]
    assert await redis.exists(*prefixed[2:]) == 0


async def test_the_history_carries_the_item_as_stored(
    counting: CountingLedger, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    """The item's JSON is made once per commit and reused by its event: both must agree (the
    event leaves the process notes out)."""
    driver = Driver(counting, reads, AGENT)
    wid = await driver.create("first", todo_list=[{"text": "a"}, {"text": "b"}])
    stored = orjson.loads(await redis.hget(names.items(AGENT), wid))
    (created,) = [
        e for e in await reads.history(AGENT, limit=10) if e["type"] == "work_item_created"
    ]
    assert created["data"]["work_item"] == {k: v for k, v in stored.items() if k != "process_notes"}
    assert (await reads.verify_history(AGENT)).ok


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "pipelined"])
async def test_each_entry_is_acked_and_answered_once_whether_inline_or_pipelined(
    redis: AnyRedis, names: Names, reads: ReadModel, inline: bool
) -> None:
    """On a standalone Redis lr_commit itself XACKs each applied command's entry and XADDs its
    reply; on a Cluster the replies follow in a pipeline. Either way: every entry acked once,
    every sender answered once (a duplicate and a rejection included), nothing left pending."""
    service = new_ledger(redis, names, inline_replies=inline)
    assert (await Driver(service, reads, AGENT).ensure()).outcome is CommandOutcome.APPLIED
    stream, reply_to = names.commands(names.partition(AGENT)), names.replies("runs-test")
    await ensure_groups(redis, [stream], Group.LEDGER)
    sent = [
        message(1).model_copy(update={"reply_to": reply_to}),
        message(2).model_copy(update={"reply_to": reply_to}),
        message(1).model_copy(update={"reply_to": reply_to}),  # a duplicate of the first
        c.PickWorkItem(  # rejected: no such item
            command_id="pick-none",
            agent_id=AGENT,
            reply_to=reply_to,
            args=PickWorkItemInput(work_item_id="wi_01JZZZZZZZZZZZZZZZZZZZZZZZ", reason="go"),
        ),
    ]
    for cmd in sent:
        await redis.xadd(stream, {"m": encode(Envelope(id=new_id("m_"), at=utc_now(), body=cmd))})
    entries = (await redis.xreadgroup(Group.LEDGER, "t", {stream: ">"}, count=10))[0][1]
    ids = [entry_id.decode() for entry_id, _ in entries]
    applied = await service.apply_batch(sent, ack=[(stream, i) for i in ids])
    assert [a.reply.outcome for a in applied] == [
        CommandOutcome.APPLIED,
        CommandOutcome.APPLIED,
        CommandOutcome.DUPLICATE,
        CommandOutcome.REJECTED,
    ]
    assert [a.delivered for a in applied] == ([True, True, False, True] if inline else [False] * 4)
    assert (await redis.xpending(stream, Group.LEDGER))["pending"] == 0
    replies = [decode(f[b"m"]).body for _, f in await redis.xrange(reply_to)]
    assert sorted(r.command_id for r in replies) == sorted(cmd.command_id for cmd in sent)
    assert await inbox_texts(redis, names) == ["note 1", "note 2"]


async def test_a_refusal_decided_on_a_stale_cached_slice_is_decided_again(
    counting: CountingLedger, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    """This replica's cache predates the delegation another replica applied: cancelling it
    must not be refused as `delegation_not_found` (a stored refusal would be final)."""
    other = new_ledger(redis, names)
    parent, child = Driver(counting, reads, AGENT), Driver(other, reads, "child-agent")
    await parent.ensure()
    await child.ensure()
    root = await parent.create("root")
    await parent.tool("PickWorkItem", work_item_id=root)  # the cache holds the parent's slice
    delegate = c.DelegateWorkItem.model_validate(
        {
            "command_id": "delegate-1",
            "agent_id": AGENT,
            "args": {"to_agent": "child-agent", "objective": "Sub work", "reason": "help"},
            "delegation_id": "dlg_01JDE1EGAT10N0000000000000",
            "child_work_item_id": "wi_01JCH11D000000000000000000",
            "child_plan_artifact": plan_artifact("wi_01JCH11D000000000000000000"),
        }
    )
    (made,) = await other.apply_batch([delegate])
    assert made.reply.outcome is CommandOutcome.APPLIED, made.reply
    cancel = await parent.tool(
        "CancelDelegation", delegation_id="dlg_01JDE1EGAT10N0000000000000", reason="not needed"
    )
    assert cancel.outcome is CommandOutcome.APPLIED, cancel
    (record,) = await reads.delegations(AGENT)
    assert record.status == "cancelled"
