"""The ledger's load and commit against a real Redis: a decision is written once and atomically,
a redelivered command is answered from its stored reply, the fence and the owners are read from
Redis, records move between hashes and indexes, and the history chain verifies. The rules
themselves are tested as pure functions in tests/unit/test_ledger_rules_*.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.ledger.service import LedgerService
from shared.domain.errors import ErrorKind
from shared.domain.tools import CreateWorkItemInput, ListWorkItemsInput
from shared.domain.wake import TickKind
from shared.runtime import new_id
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome, CommandReply
from tests.integration.ledger_driver import Driver, new_ledger, plan_artifact, token_hash

AGENT = "agent-1"


@pytest.fixture
async def d(ledger: LedgerService, reads: ReadModel) -> Driver:
    driver = Driver(ledger, reads, AGENT)
    assert (await driver.ensure()).outcome is CommandOutcome.APPLIED
    return driver


def ok(reply: CommandReply) -> dict[str, Any]:
    assert reply.outcome is CommandOutcome.APPLIED, reply
    assert reply.result is not None
    return reply.result


def refused(reply: CommandReply, kind: ErrorKind) -> None:
    assert reply.outcome is CommandOutcome.REJECTED, reply
    assert reply.error is not None
    assert reply.error.kind is kind, reply.error


async def current_id(d: Driver) -> str | None:
    state = await d.reads.agent_state(d.agent_id)
    assert state is not None
    return state.current_work_item_id


async def history(d: Driver) -> list[dict[str, Any]]:
    return await d.reads.history(d.agent_id, limit=1000)


async def hooked(d: Driver, wid: str) -> dict[str, Any]:
    """An external wait on `wid` whose capability token is "x"."""
    reply = await d.tool(
        "WaitFor",
        work_item_id=wid,
        reason="hook",
        wake="external",
        capability_token_hash=token_hash("x"),
    )
    wait: dict[str, Any] = ok(reply)["wait"]
    return wait


async def callback(d: Driver, token: str, delivery_id: str) -> CommandReply:
    return await d.send(
        c.RecordCallback(
            command_id=d.cid(),
            agent_id=d.agent_id,
            token_hash=token_hash(token),
            delivery_id=delivery_id,
            content_type="text/plain",
            body="hi",
            source=c.CallbackSource.HTTP,
        )
    )


async def begin_turn(d: Driver, turn_id: str, fence: int) -> CommandReply:
    return await d.send(
        c.BeginTurn(
            command_id=d.cid(),
            agent_id=d.agent_id,
            turn_id=turn_id,
            fencing_token=fence,
            tick_id=f"tick-{turn_id}",
            tick_kind=TickKind.INPUT,
        )
    )


# ---------------------------------------------------------------- exactly once


async def test_a_redelivered_command_gets_the_first_result_and_writes_nothing(d: Driver) -> None:
    wid = await d.create()
    first = await d.tool("UpdateWorkItem", work_item_id=wid, objective="v2", command_id="same-1")
    seen = len(await history(d))
    again = await d.tool("UpdateWorkItem", work_item_id=wid, objective="v2", command_id="same-1")
    assert (first.outcome, again.outcome) == (CommandOutcome.APPLIED, CommandOutcome.DUPLICATE)
    assert again.result == first.result
    assert len(await history(d)) == seen
    assert (await d.view(wid))["revision"] == 2


async def test_a_rejected_command_stays_rejected_after_its_cause_goes_away(d: Driver) -> None:
    wid = new_id("wi_")
    first = await d.tool("PickWorkItem", work_item_id=wid, command_id="pick-1")
    refused(first, ErrorKind.WORK_ITEM_NOT_FOUND)
    create = c.CreateWorkItem(
        command_id=d.cid(),
        agent_id=AGENT,
        args=CreateWorkItemInput(objective="now it exists"),
        work_item_id=wid,
        plan_artifact=plan_artifact(wid),
    )
    ok(await d.send(create))
    seen = len(await history(d))
    again = await d.tool("PickWorkItem", work_item_id=wid, command_id="pick-1")
    refused(again, ErrorKind.WORK_ITEM_NOT_FOUND)
    assert again.error == first.error
    assert len(await history(d)) == seen
    assert await current_id(d) is None


async def test_a_callback_delivery_counts_once(d: Driver) -> None:
    await hooked(d, await d.create())
    assert ok(await callback(d, "x", "d1"))["disposition"] == "triggered"
    seen = len(await history(d))
    assert ok(await callback(d, "x", "d1"))["disposition"] == "duplicate"
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [1]
    assert len(await history(d)) == seen
    assert len(await d.reads.evidence(AGENT)) == 1


# ---------------------------------------------------------------- what the load reads


async def test_the_fencing_token_is_checked_against_the_fence_in_redis(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    old = await redis.incr(names.fence(AGENT))
    new = await redis.incr(names.fence(AGENT))
    refused(await begin_turn(d, "turn-old", old), ErrorKind.STALE_TURN)
    assert ok(await begin_turn(d, "turn-new", new))["turn_index"] == 1
    (started,) = [e for e in await history(d) if e["type"] == "turn_started"]
    assert (started["data"]["turn_id"], started["data"]["fencing_token"]) == ("turn-new", new)


async def test_a_write_under_a_superseded_token_changes_nothing_stored(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await d.create()
    ok(await d.tool("PickWorkItem", work_item_id=wid))
    old = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", old))
    await redis.incr(names.fence(AGENT))
    seen = len(await history(d))
    late = await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by="late", fencing_token=old)
    refused(late, ErrorKind.STALE_TURN)
    view = await d.view(wid)
    assert (view["revision"], view["blocked_by"], view["state"]) == (1, None, "open")
    assert await current_id(d) == wid
    assert len(await history(d)) == seen


async def test_another_agents_item_is_refused_as_theirs_not_as_missing(
    d: Driver, ledger: LedgerService, reads: ReadModel
) -> None:
    other = Driver(ledger, reads, "agent-2")
    ok(await other.ensure())
    theirs = await other.create("theirs")
    pick = await d.tool("PickWorkItem", work_item_id=theirs)
    refused(pick, ErrorKind.WORK_ITEM_ACCESS_DENIED)
    assert (await other.view(theirs))["is_current"] is False


# ---------------------------------------------------------------- what the commit writes


async def test_a_cancelled_wait_moves_from_the_active_hash_to_the_done_hash(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await d.create()
    first = await hooked(d, wid)
    second = ok(await d.tool("WaitFor", work_item_id=wid, reason="ask", wake="operator_input"))
    assert await redis.hkeys(names.waits(AGENT)) == [second["wait"]["id"].encode()]
    done = await redis.hget(names.waits_done(AGENT), first["id"])
    assert done is not None
    assert orjson.loads(done)["status"] == "cancelled"
    ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Done."))
    assert await d.reads.active_waits(AGENT) == []
    assert await redis.hlen(names.waits_done(AGENT)) == 2


async def _board(d: Driver) -> dict[str, str]:
    """One item per readiness family, plus a queued one: returns ids by role."""
    ids = {role: await d.create(role) for role in ("current", "queued", "blocked", "operator")}
    ids["done"] = await d.create("done")
    ok(await d.tool("PickWorkItem", work_item_id=ids["current"]))
    ok(await d.tool("UpdateWorkItem", work_item_id=ids["blocked"], blocked_by="vendor"))
    ok(await d.tool("UpdateWorkItem", work_item_id=ids["operator"], plan_status="needs_input"))
    ok(await d.tool("CompleteWorkItem", work_item_id=ids["done"], report_text="Done."))
    return ids


async def _listed(d: Driver, filter_: str, limit: int = 20) -> dict[str, Any]:
    args = ListWorkItemsInput(filter=filter_, limit=limit)  # type: ignore[arg-type]
    return await d.reads.list_work_items(AGENT, args)


async def test_the_class_indexes_list_every_filter_in_ranking_order(d: Driver) -> None:
    ids = await _board(d)
    wanted = {
        "all": ["current", "queued", "operator", "blocked", "done"],
        "open": ["current", "queued", "operator", "blocked"],
        "completed": ["done"],
        "current": ["current"],
        "queued": ["queued"],
        "blocked": ["blocked"],
        "waiting_for_operator": ["operator"],
        "runnable": ["current", "queued"],
    }
    role_of = {v: k for k, v in ids.items()}
    for filter_, roles in wanted.items():
        listed = await _listed(d, filter_)
        assert [role_of[w["id"]] for w in listed["work_items"]] == roles, filter_
        assert (listed["total_matching"], listed["returned"]) == (len(roles), len(roles))
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    counts = state.counts
    assert (counts.runnable, counts.waiting_for_operator, counts.blocked, counts.completed) == (
        2,
        1,
        1,
        1,
    )


async def test_a_limit_cuts_the_page_not_the_total(d: Driver) -> None:
    ids = await _board(d)
    listed = await _listed(d, "all", limit=2)
    assert [w["id"] for w in listed["work_items"]] == [ids["current"], ids["queued"]]
    assert (listed["returned"], listed["total_matching"]) == (2, 5)
    open_page = await _listed(d, "open", limit=1)
    assert [w["id"] for w in open_page["work_items"]] == [ids["current"]]
    assert (open_page["returned"], open_page["total_matching"]) == (1, 4)
    assert (await _listed(d, "blocked", limit=1))["total_matching"] == 1
    ok(await d.tool("PickWorkItem", work_item_id=ids["blocked"]))  # current: no longer "blocked"
    blocked = await _listed(d, "blocked", limit=1)
    assert (blocked["returned"], blocked["total_matching"]) == (0, 0)


async def test_a_triggered_blocked_item_is_refiled_ahead_of_queued_work(d: Driver) -> None:
    queued = await d.create("queued")
    blocked = await d.create("blocked")
    ok(await d.tool("UpdateWorkItem", work_item_id=blocked, blocked_by="vendor"))
    hook = await d.create("hooked")
    await hooked(d, hook)
    ok(await callback(d, "x", "d1"))
    listed = await _listed(d, "all")
    assert [w["id"] for w in listed["work_items"]] == [hook, queued, blocked]
    assert listed["work_items"][0]["candidate_class"] == "triggered_blocked"
    assert [w["id"] for w in (await _listed(d, "blocked"))["work_items"]] == [hook, blocked]


async def test_the_history_chain_verifies_after_a_scenario(d: Driver) -> None:
    ids = await _board(d)
    await hooked(d, ids["queued"])
    ok(await callback(d, "x", "d1"))
    pick = await d.tool("PickWorkItem", work_item_id=ids["queued"], clear_blocker=True, reason="ok")
    ok(pick)
    events = await history(d)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    verified = await d.reads.verify_history(AGENT)
    assert (verified.ok, verified.count, verified.first_bad_index) == (True, len(events), None)
    assert verified.head == events[-1]["hash"]


async def test_a_callback_on_a_cached_slice_reads_only_what_changed_since(
    d: Driver, ledger: LedgerService, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    """A callback for an agent whose slice the ledger holds loads only the capability and the
    delivery mark while the agent is at the cached version; once another replica has moved the
    agent on (here: cancelling the wait), the whole slice is read again and the callback is
    refused, as a fresh ledger would."""
    light: list[bool] = []
    parse = ledger.store.parse_load

    def spy(cmd: c.Command, raw: Any, base: Any = None) -> Any:
        light.append(len(raw) == 10)
        return parse(cmd, raw, base)

    ledger.store.parse_load = spy  # type: ignore[method-assign]
    wid = await d.create()
    await hooked(d, wid)
    assert ok(await callback(d, "x", "d1"))["disposition"] == "triggered"
    assert ok(await callback(d, "x", "d2"))["disposition"] == "triggered"
    assert ok(await callback(d, "x", "d2"))["disposition"] == "duplicate"
    assert light[-3:] == [True, True, True]
    assert [w.trigger_count for w in await reads.active_waits(AGENT)] == [2]
    other = Driver(new_ledger(redis, names), reads, AGENT)
    ok(await other.tool("UpdateWorkItem", work_item_id=wid, blocked_by=None))  # cancels the wait
    refused(await callback(d, "x", "d3"), ErrorKind.ACCESS_DENIED)
    assert light[-1] is False
    assert await reads.active_waits(AGENT) == []
