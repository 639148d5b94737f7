"""The ledger's rules (docs/contract.md §1-4), one scenario each, against a real Redis."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from services.ledger.service import LedgerService
from shared.domain.errors import ErrorKind
from shared.domain.tools import ListWorkItemsInput
from shared.domain.wake import TickKind
from shared.runtime import new_id
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome, CommandReply
from tests.integration.ledger_driver import Driver, new_ledger, token_hash

AGENT = "agent-1"
HOUR = timedelta(hours=1)
SLACK = timedelta(seconds=2)
"""Clock tolerance: the ledger reads the wall clock between our own two readings."""


@pytest.fixture
async def d(ledger: LedgerService, reads: ReadModel) -> Driver:
    driver = Driver(ledger, reads, AGENT)
    assert (await driver.ensure()).outcome is CommandOutcome.APPLIED
    return driver


# ---------------------------------------------------------------- helpers


def ok(reply: CommandReply) -> dict[str, Any]:
    assert reply.outcome is CommandOutcome.APPLIED, reply
    assert reply.result is not None
    return reply.result


def refused(reply: CommandReply, kind: ErrorKind) -> None:
    assert reply.outcome is CommandOutcome.REJECTED, reply
    assert reply.error is not None
    assert reply.error.kind is kind, reply.error


def warning_kinds(reply: CommandReply) -> list[str]:
    return [w.kind.value for w in reply.warnings]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def now() -> datetime:
    return datetime.now(UTC)


async def current_id(d: Driver) -> str | None:
    state = await d.reads.agent_state(d.agent_id)
    assert state is not None
    return state.current_work_item_id


async def history(d: Driver) -> list[dict[str, Any]]:
    return await d.reads.history(d.agent_id, limit=1000)


async def events_since(d: Driver, count: int) -> list[dict[str, Any]]:
    return (await history(d))[count:]


async def events_of(d: Driver, event_type: str) -> list[dict[str, Any]]:
    return [e for e in await history(d) if e["type"] == event_type]


async def pick(d: Driver, work_item_id: str, **args: Any) -> dict[str, Any]:
    return ok(await d.tool("PickWorkItem", work_item_id=work_item_id, **args))


async def wait_for(d: Driver, **args: Any) -> dict[str, Any]:
    wait: dict[str, Any] = ok(await d.tool("WaitFor", **args))["wait"]
    return wait


async def stored_wait(redis: AnyRedis, names: Names, wait_id: str) -> dict[str, Any]:
    """A wait as stored, active or cancelled."""
    doc = await redis.hget(names.waits(AGENT), wait_id)
    if doc is None:
        doc = await redis.hget(names.waits_done(AGENT), wait_id)
    assert doc is not None, wait_id
    found: dict[str, Any] = orjson.loads(doc)
    return found


async def operator_message(d: Driver, work_item_id: str | None = None) -> CommandReply:
    return await d.send(
        c.AppendOperatorMessage(
            command_id=d.cid(),
            agent_id=d.agent_id,
            message_id=new_id("msg_"),
            text="here is the answer",
            work_item_id=work_item_id,
        )
    )


async def callback(
    d: Driver, token: str, delivery_id: str, *, body: str = "hi", encoding: str = "utf-8"
) -> CommandReply:
    return await d.send(
        c.RecordCallback(
            command_id=d.cid(),
            agent_id=d.agent_id,
            token_hash=token_hash(token),
            delivery_id=delivery_id,
            content_type="text/plain",
            body=body,
            body_encoding=encoding,
            source=c.CallbackSource.HTTP,
        )
    )


async def begin_turn(
    d: Driver,
    turn_id: str,
    fence: int,
    *,
    kind: TickKind = TickKind.INPUT,
    reviewed: dict[str, int] | None = None,
) -> CommandReply:
    return await d.send(
        c.BeginTurn(
            command_id=d.cid(),
            agent_id=d.agent_id,
            turn_id=turn_id,
            fencing_token=fence,
            tick_id=f"tick-{turn_id}",
            tick_kind=kind,
            reviewed_triggers=reviewed or {},
        )
    )


async def finish_turn(
    d: Driver,
    turn_id: str,
    fence: int,
    outcome: c.TurnOutcome,
    *,
    work_item_id: str | None = None,
    error: str | None = None,
) -> CommandReply:
    return await d.send(
        c.FinishTurn(
            command_id=d.cid(),
            agent_id=d.agent_id,
            turn_id=turn_id,
            fencing_token=fence,
            outcome=outcome,
            work_item_id=work_item_id,
            error=error,
        )
    )


async def runnable_current(d: Driver, objective: str = "current work") -> str:
    wid = await d.create(objective)
    await pick(d, wid)
    return wid


# ---------------------------------------------------------------- focus


async def test_create_work_item_never_changes_focus(d: Driver) -> None:
    first = await d.create("first")
    assert await current_id(d) is None
    await pick(d, first)
    second = await d.create("second")
    assert await current_id(d) == first
    assert (await d.view(second))["is_current"] is False


async def test_first_pick_is_initial_and_focuses_a_runnable_item(d: Driver) -> None:
    wid = await d.create()
    result = await pick(d, wid)
    transition = result["transition"]
    assert transition["switch_kind"] == "initial"
    assert transition["focus_mode"] == "runnable"
    assert transition["current_readiness"] == "runnable"
    assert result["current_work_item"]["is_current"] is True
    assert "previous_work_item" not in result
    assert await current_id(d) == wid


async def test_picking_the_current_item_again_is_switch_kind_same(d: Driver) -> None:
    wid = await runnable_current(d)
    reply = await d.tool("PickWorkItem", work_item_id=wid)
    assert ok(reply)["transition"]["switch_kind"] == "same"
    assert reply.warnings == ()


async def test_picking_a_blocked_item_focuses_it_for_inspection_only(d: Driver) -> None:
    wid = await d.create()
    ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by="vendor has not replied"))
    result = await pick(d, wid)
    assert result["transition"]["focus_mode"] == "inspection"
    assert result["transition"]["current_readiness"] == "blocked"
    assert result["transition"]["blocker_cleared"] is False
    assert await current_id(d) == wid
    view = await d.view(wid)
    assert view["readiness"] == "blocked"
    assert view["blocked_by"] == "vendor has not replied"
    assert view["candidate_class"] == "blocked"


async def test_switching_away_from_runnable_focus_without_reason_warns(d: Driver) -> None:
    first = await runnable_current(d)
    second = await d.create("second")
    reply = await d.tool("PickWorkItem", work_item_id=second)
    result = ok(reply)
    assert warning_kinds(reply) == ["missing_pick_reason_for_runnable_focus_switch"]
    assert result["transition"]["switch_kind"] == "switch"
    assert result["transition"]["previous_readiness"] == "runnable"
    assert result["previous_work_item"]["id"] == first
    assert await current_id(d) == second
    picked = (await events_of(d, "work_item_picked"))[-1]
    assert picked["work_item_id"] == second
    assert picked["data"]["previous_work_item_id"] == first
    assert picked["data"]["reason_required"] is True
    assert picked["data"]["reason_missing"] is True


async def test_switching_away_from_runnable_focus_with_reason_has_no_warning(d: Driver) -> None:
    await runnable_current(d)
    second = await d.create("second")
    reply = await d.tool("PickWorkItem", work_item_id=second, reason="the operator asked")
    assert ok(reply)["transition"]["reason"] == "the operator asked"
    assert reply.warnings == ()
    picked = (await events_of(d, "work_item_picked"))[-1]
    assert picked["data"]["reason_required"] is True
    assert picked["data"]["reason_missing"] is False
    assert picked["data"]["reason"] == "the operator asked"


async def test_switching_away_from_inspection_focus_needs_no_reason(d: Driver) -> None:
    blocked = await d.create("blocked")
    ok(await d.tool("UpdateWorkItem", work_item_id=blocked, blocked_by="waiting on legal"))
    await pick(d, blocked)
    other = await d.create("other")
    reply = await d.tool("PickWorkItem", work_item_id=other)
    assert ok(reply)["transition"]["switch_kind"] == "switch"
    assert reply.warnings == ()
    picked = (await events_of(d, "work_item_picked"))[-1]
    assert picked["data"]["reason_required"] is False
    assert picked["data"]["reason_missing"] is False


async def test_pick_with_clear_blocker_clears_blocker_recheck_and_waits(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await d.create()
    wait = await wait_for(
        d, work_item_id=wid, reason="need sign-off", wake="operator_input", recheck_after_ms=60_000
    )
    assert (await d.view(wid))["recheck_at"] is not None
    result = await pick(d, wid, clear_blocker=True, reason="sign-off arrived by phone")
    assert result["transition"]["blocker_cleared"] is True
    assert result["transition"]["focus_mode"] == "runnable"
    view = await d.view(wid)
    assert view["blocked_by"] is None
    assert view["recheck_at"] is None
    assert view["recheck_consumed_at"] is None
    assert view["active_waits"] == []
    assert view["readiness"] == "runnable"
    assert (await stored_wait(redis, names, wait["id"]))["status"] == "cancelled"
    cancelled = await events_of(d, "wait_cancelled")
    assert [e["data"]["wait_id"] for e in cancelled] == [wait["id"]]


async def test_picking_a_completed_item_is_work_item_not_open(d: Driver) -> None:
    wid = await d.create()
    ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Done."))
    refused(await d.tool("PickWorkItem", work_item_id=wid), ErrorKind.WORK_ITEM_NOT_OPEN)
    assert await current_id(d) is None


async def test_picking_an_unknown_item_is_work_item_not_found(d: Driver) -> None:
    reply = await d.tool("PickWorkItem", work_item_id=new_id("wi_"))
    refused(reply, ErrorKind.WORK_ITEM_NOT_FOUND)


async def test_picking_another_agents_item_is_work_item_access_denied(
    d: Driver, ledger: LedgerService, reads: ReadModel
) -> None:
    other = Driver(ledger, reads, "agent-2")
    ok(await other.ensure())
    theirs = await other.create("theirs")
    refused(await d.tool("PickWorkItem", work_item_id=theirs), ErrorKind.WORK_ITEM_ACCESS_DENIED)
    assert await current_id(d) is None
    assert (await other.view(theirs))["is_current"] is False


# ---------------------------------------------------------------- focus release


async def test_blocking_the_current_item_releases_focus_in_the_same_write(d: Driver) -> None:
    wid = await runnable_current(d)
    seen = len(await history(d))
    result = ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by="waiting on vendor"))
    assert result["work_item"]["is_current"] is False
    assert await current_id(d) is None
    written = await events_since(d, seen)
    types = [e["type"] for e in written]
    assert "work_item_updated" in types
    assert "work_item_focus_released" in types
    released = next(e for e in written if e["type"] == "work_item_focus_released")
    assert released["work_item_id"] == wid


async def test_needs_input_on_the_current_item_releases_focus(d: Driver) -> None:
    wid = await runnable_current(d)
    seen = len(await history(d))
    ok(await d.tool("UpdateWorkItem", work_item_id=wid, plan_status="needs_input"))
    assert await current_id(d) is None
    assert "work_item_focus_released" in [e["type"] for e in await events_since(d, seen)]
    assert (await d.view(wid))["readiness"] == "waiting_for_operator"


async def test_clearing_a_blocker_never_repicks_the_item(d: Driver) -> None:
    wid = await runnable_current(d)
    ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by="waiting on vendor"))
    assert await current_id(d) is None
    result = ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by=None))
    assert result["work_item"]["readiness"] == "runnable"
    assert result["work_item"]["is_current"] is False
    assert await current_id(d) is None


async def test_wait_for_on_the_current_item_releases_focus(d: Driver) -> None:
    wid = await runnable_current(d)
    seen = len(await history(d))
    wait = await wait_for(d, reason="ask the operator", wake="operator_input")
    assert wait["work_item_id"] == wid
    assert await current_id(d) is None
    assert "work_item_focus_released" in [e["type"] for e in await events_since(d, seen)]


async def test_completing_the_current_item_releases_focus(d: Driver) -> None:
    wid = await runnable_current(d)
    seen = len(await history(d))
    result = ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Shipped."))
    assert result["completed_transition"]["was_current"] is True
    assert result["completed_transition"]["focus_released"] is True
    assert await current_id(d) is None
    assert "work_item_focus_released" in [e["type"] for e in await events_since(d, seen)]


# ---------------------------------------------------------------- UpdateWorkItem


async def test_blocker_without_recheck_after_rechecks_in_one_hour(d: Driver) -> None:
    wid = await d.create()
    before = now()
    result = ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by="waiting on vendor"))
    after = now()
    recheck_at = at(result["work_item"]["recheck_at"])
    assert before + HOUR - SLACK <= recheck_at <= after + HOUR + SLACK
    assert result["work_item"]["blocked_by"] == "waiting on vendor"
    assert result["work_item"]["recheck_consumed_at"] is None


async def test_blocker_with_recheck_after_ms_uses_it(d: Driver) -> None:
    wid = await d.create()
    before = now()
    result = ok(
        await d.tool(
            "UpdateWorkItem", work_item_id=wid, blocked_by="build running", recheck_after_ms=90_000
        )
    )
    after = now()
    recheck_at = at(result["work_item"]["recheck_at"])
    wanted = timedelta(milliseconds=90_000)
    assert before + wanted - SLACK <= recheck_at <= after + wanted + SLACK


async def test_clearing_blocker_clears_recheck_and_cancels_active_waits(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await d.create()
    wait = await wait_for(d, work_item_id=wid, reason="build running", wake="system")
    assert (await d.view(wid))["blocked_by"] == "build running"
    result = ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by=None))
    item = result["work_item"]
    assert item["blocked_by"] is None
    assert item["recheck_at"] is None
    assert item["recheck_consumed_at"] is None
    assert item["active_waits"] == []
    assert item["readiness"] == "runnable"
    assert (await stored_wait(redis, names, wait["id"]))["status"] == "cancelled"
    assert await d.reads.active_waits(AGENT) == []


async def test_todo_list_replaces_the_whole_list(d: Driver) -> None:
    wid = await d.create(todo_list=[{"text": "a"}, {"text": "b"}, {"text": "c"}])
    ok(
        await d.tool(
            "UpdateWorkItem",
            work_item_id=wid,
            todo_list=[{"text": "b", "state": "completed"}, {"text": "d", "state": "in_progress"}],
        )
    )
    view = await d.view(wid)
    assert view["todo_list"] == [
        {"text": "b", "state": "completed"},
        {"text": "d", "state": "in_progress"},
    ]
    assert view["current_todo"] == {"text": "d", "state": "in_progress"}


async def test_revision_moves_by_one_per_write(d: Driver) -> None:
    wid = await d.create()
    assert (await d.view(wid))["revision"] == 1
    revisions = []
    for objective in ("one", "two", "three"):
        result = ok(await d.tool("UpdateWorkItem", work_item_id=wid, objective=objective))
        revisions.append(result["work_item"]["revision"])
    assert revisions == [2, 3, 4]
    await wait_for(d, work_item_id=wid, reason="wait", wake="system")
    assert (await d.view(wid))["revision"] == 5


async def test_updating_a_completed_item_is_work_item_not_open(d: Driver) -> None:
    wid = await d.create()
    ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Done."))
    reply = await d.tool("UpdateWorkItem", work_item_id=wid, objective="more")
    refused(reply, ErrorKind.WORK_ITEM_NOT_OPEN)
    assert (await d.view(wid))["objective"] == "objective"


# ---------------------------------------------------------------- waits


async def test_wait_owner_is_the_named_work_item(d: Driver) -> None:
    current = await runnable_current(d)
    other = await d.create("other")
    wait = await wait_for(d, work_item_id=other, reason="ask the operator", wake="operator_input")
    assert wait["work_item_id"] == other
    assert (await d.view(other))["blocked_by"] == "ask the operator"
    assert await current_id(d) == current
    assert (await d.view(current))["blocked_by"] is None


async def test_wait_owner_defaults_to_the_current_item_and_blocks_it(d: Driver) -> None:
    wid = await runnable_current(d)
    reply = await d.tool("WaitFor", reason="waiting for the CI run", wake="system")
    result = ok(reply)
    assert result["wait"]["work_item_id"] == wid
    assert result["work_item"]["blocked_by"] == "waiting for the CI run"
    view = await d.view(wid)
    assert view["blocked_by"] == "waiting for the CI run"
    assert [w["id"] for w in view["active_waits"]] == [result["wait"]["id"]]


async def test_wait_without_current_item_is_agent_scoped(d: Driver) -> None:
    queued = await d.create()
    result = ok(await d.tool("WaitFor", reason="anything new?", wake="operator_input"))
    assert result["wait"]["work_item_id"] is None
    assert "work_item" not in result
    assert (await d.view(queued))["blocked_by"] is None
    assert [w.work_item_id for w in await d.reads.active_waits(AGENT)] == [None]


async def test_second_wait_on_the_same_owner_replaces_the_first(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await d.create()
    first = await wait_for(d, work_item_id=wid, reason="first", wake="operator_input")
    second = await wait_for(d, work_item_id=wid, reason="second", wake="system")
    replaced = await stored_wait(redis, names, first["id"])
    assert replaced["status"] == "cancelled"
    assert replaced["cancelled_at"] is not None
    assert [w.id for w in await d.reads.active_waits(AGENT)] == [second["id"]]
    assert (await d.view(wid))["blocked_by"] == "second"
    cancelled = await events_of(d, "wait_cancelled")
    assert [(e["data"]["wait_id"], e["data"]["cause"]) for e in cancelled] == [
        (first["id"], "replaced")
    ]


async def test_second_agent_scope_wait_replaces_the_first(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    first = await wait_for(d, reason="first", wake="operator_input")
    second = await wait_for(d, reason="second", wake="external")
    assert (await stored_wait(redis, names, first["id"]))["status"] == "cancelled"
    assert [w.id for w in await d.reads.active_waits(AGENT)] == [second["id"]]


async def test_timer_wait_wakes_at_now_plus_wake_after_ms(d: Driver) -> None:
    wid = await d.create()
    before = now()
    wait = await wait_for(d, work_item_id=wid, reason="poll", wake="timer", wake_after_ms=250)
    after = now()
    delay = timedelta(milliseconds=250)
    assert before + delay - SLACK <= at(wait["wake_at"]) <= after + delay + SLACK
    scheduled = await events_of(d, "timer_scheduled")
    assert wait["id"] in [e["data"]["wait_id"] for e in scheduled]


async def test_operator_message_triggers_the_single_operator_wait_without_unblocking(
    d: Driver,
) -> None:
    wid = await runnable_current(d)
    wait = await wait_for(d, reason="which region?", wake="operator_input")
    before = await d.view(wid)
    result = ok(await operator_message(d))
    assert result["triggered_wait_id"] == wait["id"]
    after = await d.view(wid)
    (active,) = after["active_waits"]
    assert active["id"] == wait["id"]
    assert active["status"] == "active"
    assert active["trigger_count"] == 1
    assert active["last_triggered_at"] is not None
    assert after["revision"] == before["revision"]
    assert after["blocked_by"] == "which region?"
    assert after["candidate_class"] == "triggered_blocked"
    triggered = await events_of(d, "wait_triggered")
    assert [(e["data"]["wait_id"], e["data"]["trigger_count"]) for e in triggered] == [
        (wait["id"], 1)
    ]
    assert [m.origin.value for m in await d.reads.inbox(AGENT)] == ["operator"]


async def test_operator_message_with_two_operator_waits_triggers_none(d: Driver) -> None:
    first = await d.create("first")
    second = await d.create("second")
    await wait_for(d, work_item_id=first, reason="q1", wake="operator_input")
    await wait_for(d, work_item_id=second, reason="q2", wake="operator_input")
    result = ok(await operator_message(d))
    assert result["triggered_wait_id"] is None
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [0, 0]
    assert await events_of(d, "wait_triggered") == []
    assert len(await d.reads.inbox(AGENT)) == 1


async def test_operator_message_naming_an_item_triggers_that_items_wait(d: Driver) -> None:
    first = await d.create("first")
    second = await d.create("second")
    await wait_for(d, work_item_id=first, reason="q1", wake="operator_input")
    wanted = await wait_for(d, work_item_id=second, reason="q2", wake="operator_input")
    result = ok(await operator_message(d, work_item_id=second))
    assert result["triggered_wait_id"] == wanted["id"]
    counts = {w.id: w.trigger_count for w in await d.reads.active_waits(AGENT)}
    assert counts[wanted["id"]] == 1
    assert sum(counts.values()) == 1


async def test_task_result_triggers_the_wait_for_that_task(d: Driver) -> None:
    wid = await d.create()
    other = await d.create("other")
    wanted = await wait_for(
        d, work_item_id=wid, reason="build", wake="task_result", resource="task-7"
    )
    await wait_for(d, work_item_id=other, reason="lint", wake="task_result", resource="task-8")
    reply = await d.send(
        c.RecordTaskResult(
            command_id=d.cid(),
            agent_id=AGENT,
            task_id="task-7",
            status=c.TaskStatus.SUCCEEDED,
            summary="green",
        )
    )
    assert ok(reply)["wait_id"] == wanted["id"]
    counts = {w.resource: w.trigger_count for w in await d.reads.active_waits(AGENT)}
    assert counts == {"task-7": 1, "task-8": 0}
    assert (await d.view(wid))["blocked_by"] == "build"
    (evidence,) = await d.reads.evidence(AGENT)
    assert evidence.origin == "task_result"
    assert evidence.wait_id == wanted["id"]


async def test_task_result_for_an_unknown_task_is_wait_not_found(d: Driver) -> None:
    wid = await d.create()
    await wait_for(d, work_item_id=wid, reason="build", wake="task_result", resource="task-7")
    reply = await d.send(
        c.RecordTaskResult(
            command_id=d.cid(),
            agent_id=AGENT,
            task_id="task-unknown",
            status=c.TaskStatus.FAILED,
            summary="?",
        )
    )
    refused(reply, ErrorKind.WAIT_NOT_FOUND)
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [0]


async def test_fire_timer_triggers_an_active_timer_wait(d: Driver) -> None:
    wid = await d.create()
    wait = await wait_for(d, work_item_id=wid, reason="poll", wake="timer", wake_after_ms=1)
    reply = await d.send(
        c.FireTimer(command_id=d.cid(), agent_id=AGENT, wait_id=wait["id"], due_at=now())
    )
    assert ok(reply)["fired"] is True
    (active,) = (await d.view(wid))["active_waits"]
    assert active["trigger_count"] == 1
    assert active["status"] == "active"
    assert (await d.view(wid))["blocked_by"] == "poll"


async def test_fire_timer_on_a_replaced_wait_is_a_no_op(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await d.create()
    old = await wait_for(d, work_item_id=wid, reason="poll", wake="timer", wake_after_ms=1)
    await wait_for(d, work_item_id=wid, reason="ask instead", wake="operator_input")
    seen = len(await history(d))
    reply = await d.send(
        c.FireTimer(command_id=d.cid(), agent_id=AGENT, wait_id=old["id"], due_at=now())
    )
    assert ok(reply)["fired"] is False
    assert await events_since(d, seen) == []
    assert (await stored_wait(redis, names, old["id"]))["trigger_count"] == 0
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [0]


async def test_callback_with_a_wait_capability_triggers_that_wait(d: Driver) -> None:
    wid = await d.create()
    wait = await wait_for(
        d,
        work_item_id=wid,
        reason="waiting for the webhook",
        wake="external",
        capability_token_hash=token_hash("x"),
    )
    result = ok(await callback(d, "x", "d1"))
    assert result["disposition"] == "triggered"
    assert result["wait_id"] == wait["id"]
    (active,) = (await d.view(wid))["active_waits"]
    assert active["trigger_count"] == 1
    (evidence,) = await d.reads.evidence(AGENT)
    assert (evidence.origin, evidence.delivery_id, evidence.body) == ("callback", "d1", "hi")
    assert await d.reads.inbox(AGENT) == []


async def test_the_same_callback_delivery_twice_is_a_duplicate(d: Driver) -> None:
    wid = await d.create()
    await wait_for(
        d, work_item_id=wid, reason="hook", wake="external", capability_token_hash=token_hash("x")
    )
    ok(await callback(d, "x", "d1"))
    seen = len(await history(d))
    again = ok(await callback(d, "x", "d1"))
    assert again["disposition"] == "duplicate"
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [1]
    assert await events_since(d, seen) == []
    assert len(await d.reads.evidence(AGENT)) == 1


async def test_callback_to_a_cancelled_waits_capability_is_access_denied(d: Driver) -> None:
    wid = await d.create()
    await wait_for(
        d, work_item_id=wid, reason="hook", wake="external", capability_token_hash=token_hash("x")
    )
    ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by=None))
    seen = len(await history(d))
    refused(await callback(d, "x", "d1"), ErrorKind.ACCESS_DENIED)
    assert await events_since(d, seen) == []
    assert await d.reads.active_waits(AGENT) == []
    assert await d.reads.inbox(AGENT) == []
    assert await d.reads.evidence(AGENT) == []


async def test_agent_scope_callback_triggers_the_single_external_wait(d: Driver) -> None:
    wid = await d.create()
    wait = await wait_for(
        d, work_item_id=wid, reason="hook", wake="external", capability_token_hash=token_hash("x")
    )
    result = ok(await callback(d, f"callback-{AGENT}", "d1"))
    assert result["disposition"] == "triggered"
    assert result["wait_id"] == wait["id"]
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [1]
    assert await d.reads.inbox(AGENT) == []


async def test_agent_scope_callback_without_an_external_wait_goes_to_the_inbox(
    d: Driver,
) -> None:
    wid = await d.create()
    await wait_for(d, work_item_id=wid, reason="ask", wake="operator_input")
    result = ok(await callback(d, f"callback-{AGENT}", "d1"))
    assert result["disposition"] == "delivered_to_inbox"
    (message,) = await d.reads.inbox(AGENT)
    assert message.origin.value == "callback"
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    assert state.inbox_pending == 1
    assert (message.text, message.delivery_id) == ("hi", "d1")
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [0]
    assert await events_of(d, "wait_triggered") == []
    assert len(await events_of(d, "callback_delivered_to_inbox")) == 1


async def test_a_binary_callback_in_the_inbox_keeps_its_base64_encoding(d: Driver) -> None:
    result = ok(await callback(d, f"callback-{AGENT}", "d1", body="AAEC", encoding="base64"))
    assert result["disposition"] == "delivered_to_inbox"
    (message,) = await d.reads.inbox(AGENT)
    assert (message.text, message.body_encoding) == ("AAEC", "base64")


async def test_agent_scope_callback_with_two_external_waits_goes_to_the_inbox(
    d: Driver,
) -> None:
    first = await d.create("first")
    second = await d.create("second")
    for wid, token in ((first, "x"), (second, "y")):
        await wait_for(
            d,
            work_item_id=wid,
            reason="hook",
            wake="external",
            capability_token_hash=token_hash(token),
        )
    result = ok(await callback(d, f"callback-{AGENT}", "d1"))
    assert result["disposition"] == "delivered_to_inbox"
    assert [m.origin.value for m in await d.reads.inbox(AGENT)] == ["callback"]
    assert [w.trigger_count for w in await d.reads.active_waits(AGENT)] == [0, 0]


async def test_wait_for_on_a_completed_item_is_work_item_not_open(d: Driver) -> None:
    wid = await d.create()
    ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Done."))
    reply = await d.tool("WaitFor", work_item_id=wid, reason="too late", wake="system")
    refused(reply, ErrorKind.WORK_ITEM_NOT_OPEN)
    assert await d.reads.active_waits(AGENT) == []


# ---------------------------------------------------------------- wake budget


async def test_operator_message_resets_the_wake_budget(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    await runnable_current(d)
    fence = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", fence, kind=TickKind.CONTINUE_CURRENT))
    ok(await finish_turn(d, "turn-1", fence, c.TurnOutcome.YIELDED))
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    assert state.wake_budget.used == 1
    seen = len(await history(d))
    ok(await operator_message(d))
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    assert state.wake_budget.used == 0
    assert "wake_budget_reset" in [e["type"] for e in await events_since(d, seen)]


async def test_input_tick_does_not_spend_the_wake_budget(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    fence = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", fence, kind=TickKind.INPUT))
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    assert state.wake_budget.used == 0
    assert state.turn_index == 1
    assert state.posture.value == "running"


async def test_trigger_resets_the_wake_budget(d: Driver, redis: AnyRedis, names: Names) -> None:
    wid = await runnable_current(d)
    fence = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", fence, kind=TickKind.CONTINUE_CURRENT))
    await wait_for(d, reason="hook", wake="external", capability_token_hash=token_hash("x"))
    ok(await finish_turn(d, "turn-1", fence, c.TurnOutcome.WAITING, work_item_id=wid))
    seen = len(await history(d))
    assert ok(await callback(d, "x", "d1"))["disposition"] == "triggered"
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    assert state.wake_budget.used == 0
    reset = [e for e in await events_since(d, seen) if e["type"] == "wake_budget_reset"]
    assert [e["data"]["cause"] for e in reset] == ["callback_trigger"]


async def test_a_due_recheck_is_consumed_once(d: Driver) -> None:
    due = await d.create("due")
    later = await d.create("later")
    ok(await d.tool("UpdateWorkItem", work_item_id=due, blocked_by="poll", recheck_after_ms=1))
    ok(await d.tool("UpdateWorkItem", work_item_id=later, blocked_by="poll"))
    await asyncio.sleep(0.01)
    consume = c.ConsumeRecheck(command_id=d.cid(), agent_id=AGENT, work_item_ids=(due, later))
    assert ok(await d.send(consume))["consumed"] == [due]
    view = await d.view(due)
    assert view["recheck_consumed_at"] is not None
    assert view["blocked_by"] == "poll"
    assert (await d.view(later))["recheck_consumed_at"] is None
    again = consume.model_copy(update={"command_id": d.cid()})
    assert ok(await d.send(again))["consumed"] == []


# ---------------------------------------------------------------- completion


async def test_completion_report_is_promoted_once(d: Driver) -> None:
    wid = await d.create()
    reply = await d.tool("CompleteWorkItem", work_item_id=wid, report_text="  Report sent.  ")
    result = ok(reply)
    assert result["report_promoted"] is True
    assert result["work_item"]["state"] == "completed"
    assert result["work_item"]["result_summary"] == "Report sent."
    assert reply.warnings == ()
    briefs, summaries = await d.reads.briefs(AGENT, wid)
    assert [(b.kind.value, b.text) for b in briefs] == [("result", "Report sent.")]
    assert [s.text for s in summaries] == ["Report sent."]
    assert (await d.view(wid))["candidate_class"] == "completed_recent"


async def test_whitespace_report_promotes_nothing_and_warns(d: Driver) -> None:
    wid = await d.create()
    reply = await d.tool("CompleteWorkItem", work_item_id=wid, report_text=" \n\t ")
    result = ok(reply)
    assert result["report_promoted"] is False
    assert warning_kinds(reply) == ["missing_completion_report"]
    view = await d.view(wid)
    assert view["state"] == "completed"
    assert view["result_summary"] is None
    assert view["candidate_class"] == "completed"
    assert await d.reads.briefs(AGENT) == ([], [])


async def test_completing_with_unfinished_todos_warns_and_records_counts(d: Driver) -> None:
    todos = [
        {"text": "done", "state": "completed"},
        {"text": "p1"},
        {"text": "p2"},
        {"text": "ip", "state": "in_progress"},
    ]
    wid = await d.create(todo_list=todos)
    reply = await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Partly done.")
    ok(reply)
    (warning,) = reply.warnings
    assert warning.kind.value == "unfinished_todos"
    assert (warning.pending_count, warning.in_progress_count) == (2, 1)
    assert warning.sample is not None
    assert set(warning.sample) == {"p1", "p2", "ip"}
    (completed,) = await events_of(d, "work_item_completed")
    data = completed["data"]
    assert data["completed_with_unfinished_todos"] is True
    assert data["unfinished_todo_count"] == 3
    assert data["pending_todo_count"] == 2
    assert data["in_progress_todo_count"] == 1


async def test_unfinished_todo_sample_holds_at_most_five(d: Driver) -> None:
    wid = await d.create(todo_list=[{"text": f"todo {n}"} for n in range(8)])
    reply = await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Stopped early.")
    ok(reply)
    (warning,) = reply.warnings
    assert warning.pending_count == 8
    assert warning.sample is not None
    assert len(warning.sample) == 5


async def test_completing_twice_is_work_item_not_open(d: Driver) -> None:
    wid = await d.create()
    ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Done."))
    reply = await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Done again.")
    refused(reply, ErrorKind.WORK_ITEM_NOT_OPEN)
    briefs, summaries = await d.reads.briefs(AGENT, wid)
    assert (len(briefs), len(summaries)) == (1, 1)
    assert (await d.view(wid))["result_summary"] == "Done."


async def test_completion_cancels_waits_and_clears_blocker_and_recheck(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await d.create()
    wait = await wait_for(
        d, work_item_id=wid, reason="hook", wake="external", recheck_after_ms=60_000
    )
    assert (await d.view(wid))["recheck_at"] is not None
    ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Resolved another way."))
    view = await d.view(wid)
    assert view["blocked_by"] is None
    assert view["recheck_at"] is None
    assert view["recheck_consumed_at"] is None
    assert view["active_waits"] == []
    cancelled = await stored_wait(redis, names, wait["id"])
    assert cancelled["status"] == "cancelled"
    assert await d.reads.active_waits(AGENT) == []


# ---------------------------------------------------------------- idempotency


async def test_repeated_command_id_returns_the_first_result_and_changes_nothing(
    d: Driver,
) -> None:
    wid = await d.create()
    first = await d.tool("UpdateWorkItem", work_item_id=wid, objective="v2", command_id="same-1")
    seen = len(await history(d))
    again = await d.tool("UpdateWorkItem", work_item_id=wid, objective="v2", command_id="same-1")
    assert first.outcome is CommandOutcome.APPLIED
    assert again.outcome is CommandOutcome.DUPLICATE
    assert again.result == first.result
    assert await events_since(d, seen) == []
    assert (await d.view(wid))["revision"] == 2


async def test_repeated_rejected_command_returns_the_same_rejection(d: Driver) -> None:
    missing = new_id("wi_")
    first = await d.tool("PickWorkItem", work_item_id=missing, command_id="pick-missing")
    refused(first, ErrorKind.WORK_ITEM_NOT_FOUND)
    seen = len(await history(d))
    again = await d.tool("PickWorkItem", work_item_id=missing, command_id="pick-missing")
    refused(again, ErrorKind.WORK_ITEM_NOT_FOUND)
    assert again.error == first.error
    assert await events_since(d, seen) == []


async def test_a_rejected_command_id_stays_rejected_after_the_cause_goes_away(
    d: Driver,
) -> None:
    wid = await d.create()
    ok(await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Done."))
    first = await d.tool("UpdateWorkItem", work_item_id=wid, objective="x", command_id="upd-1")
    refused(first, ErrorKind.WORK_ITEM_NOT_OPEN)
    again = await d.tool("UpdateWorkItem", work_item_id=wid, objective="x", command_id="upd-1")
    assert again.result is None
    assert again.error == first.error


# ---------------------------------------------------------------- turns and fencing


async def test_begin_turn_with_the_current_fencing_token_applies(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await runnable_current(d)
    fence = await redis.incr(names.fence(AGENT))
    result = ok(await begin_turn(d, "turn-1", fence))
    assert result["turn_index"] == 1
    assert result["current_work_item_id"] == wid
    (started,) = await events_of(d, "turn_started")
    assert started["data"]["fencing_token"] == fence


async def test_begin_turn_with_an_older_fencing_token_is_stale_turn(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    old = await redis.incr(names.fence(AGENT))
    new = await redis.incr(names.fence(AGENT))
    refused(await begin_turn(d, "turn-old", old), ErrorKind.STALE_TURN)
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    assert state.turn_index == 0
    ok(await begin_turn(d, "turn-new", new))


async def test_tool_call_with_a_superseded_fencing_token_is_stale_and_changes_nothing(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await runnable_current(d)
    old = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", old))
    await redis.incr(names.fence(AGENT))
    seen = len(await history(d))
    reply = await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by="late", fencing_token=old)
    refused(reply, ErrorKind.STALE_TURN)
    reply = await d.tool("CompleteWorkItem", work_item_id=wid, report_text="x", fencing_token=old)
    refused(reply, ErrorKind.STALE_TURN)
    view = await d.view(wid)
    assert (view["revision"], view["blocked_by"], view["state"]) == (1, None, "open")
    assert await current_id(d) == wid
    assert await events_since(d, seen) == []


async def test_third_failed_turn_blocks_the_item_and_releases_focus(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await runnable_current(d)
    fence = await redis.incr(names.fence(AGENT))
    for attempt in (1, 2, 3):
        assert (await d.view(wid))["blocked_by"] is None, attempt
        ok(await begin_turn(d, f"turn-{attempt}", fence))
        ok(
            await finish_turn(
                d, f"turn-{attempt}", fence, c.TurnOutcome.FAILED, work_item_id=wid, error="boom"
            )
        )
    view = await d.view(wid)
    assert view["blocked_by"] == "turn failed 3 times: boom"
    assert view["readiness"] == "blocked"
    assert view["recheck_at"] is not None
    assert await current_id(d) is None
    briefs, _ = await d.reads.briefs(AGENT, wid)
    assert [b.kind.value for b in briefs] == ["failure"] * 3
    assert {b.text for b in briefs} == {"boom"}


async def test_a_completed_turn_resets_the_failure_count(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await runnable_current(d)
    fence = await redis.incr(names.fence(AGENT))
    outcomes = [c.TurnOutcome.FAILED, c.TurnOutcome.FAILED, c.TurnOutcome.YIELDED]
    outcomes += [c.TurnOutcome.FAILED, c.TurnOutcome.FAILED]
    for n, outcome in enumerate(outcomes):
        ok(await begin_turn(d, f"turn-{n}", fence))
        ok(await finish_turn(d, f"turn-{n}", fence, outcome, work_item_id=wid, error="boom"))
    assert (await d.view(wid))["blocked_by"] is None
    assert await current_id(d) == wid


async def test_begin_turn_after_an_unfinished_turn_counts_an_interrupted_attempt(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await runnable_current(d)
    first = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", first))
    second = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-2", second))
    finished = await events_of(d, "turn_finished")
    assert [(e["data"]["turn_id"], e["data"]["outcome"]) for e in finished] == [
        ("turn-1", "interrupted")
    ]
    record = await d.reads.agent_record(AGENT)
    assert record is not None
    assert record.failed_attempts == {wid: 1}
    # Two more failures make three attempts: the interruption counted as one.
    ok(await finish_turn(d, "turn-2", second, c.TurnOutcome.FAILED, work_item_id=wid, error="e"))
    ok(await begin_turn(d, "turn-3", second))
    ok(await finish_turn(d, "turn-3", second, c.TurnOutcome.FAILED, work_item_id=wid, error="e"))
    assert (await d.view(wid))["blocked_by"] == "turn failed 3 times: e"
    assert await current_id(d) is None


async def triggered_timer_wait(d: Driver) -> str:
    """A current item waiting on a timer that has fired once; its trigger is not reviewed."""
    wid = await runnable_current(d)
    wait = await wait_for(d, work_item_id=wid, reason="poll", wake="timer", wake_after_ms=1)
    fired = c.FireTimer(command_id=d.cid(), agent_id=AGENT, wait_id=wait["id"], due_at=now())
    assert ok(await d.send(fired))["fired"] is True
    wait_id: str = wait["id"]
    return wait_id


async def reviewed_count(redis: AnyRedis, names: Names, wait_id: str) -> int:
    count: int = (await stored_wait(redis, names, wait_id))["reviewed_trigger_count"]
    return count


async def test_a_trigger_a_turn_shows_is_reviewed_when_that_turn_finishes(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wait_id = await triggered_timer_wait(d)
    fence = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", fence, reviewed={wait_id: 1}))
    assert await reviewed_count(redis, names, wait_id) == 0
    ok(await finish_turn(d, "turn-1", fence, c.TurnOutcome.YIELDED))
    assert await reviewed_count(redis, names, wait_id) == 1
    record = await d.reads.agent_record(AGENT)
    assert record is not None
    assert record.turn_reviewed == {}


async def test_an_interrupted_turn_leaves_its_triggers_for_the_retry_to_review(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wait_id = await triggered_timer_wait(d)
    first = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", first, reviewed={wait_id: 1}))
    # turn-1's executor dies; the retry reads the wait as still unreviewed and shows it again.
    second = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-2", second, reviewed={wait_id: 1}))
    assert await reviewed_count(redis, names, wait_id) == 0
    ok(await finish_turn(d, "turn-2", second, c.TurnOutcome.YIELDED))
    assert await reviewed_count(redis, names, wait_id) == 1


async def test_a_failed_turn_leaves_its_triggers_unreviewed(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wait_id = await triggered_timer_wait(d)
    fence = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", fence, reviewed={wait_id: 1}))
    ok(await finish_turn(d, "turn-1", fence, c.TurnOutcome.FAILED, error="provider down"))
    assert await reviewed_count(redis, names, wait_id) == 0


async def test_turn_started_names_the_interrupted_turn_only_when_there_was_one(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    await runnable_current(d)
    first = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", first))
    second = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-2", second))
    started = {e["data"]["turn_id"]: e["data"] for e in await events_of(d, "turn_started")}
    assert started["turn-1"]["interrupted_turn_id"] is None
    assert started["turn-2"]["interrupted_turn_id"] == "turn-1"


async def test_a_tool_call_with_the_current_fencing_token_applies(
    d: Driver, redis: AnyRedis, names: Names
) -> None:
    wid = await runnable_current(d)
    await redis.incr(names.fence(AGENT))
    fence = await redis.incr(names.fence(AGENT))
    ok(await begin_turn(d, "turn-1", fence))
    reply = await d.tool("UpdateWorkItem", work_item_id=wid, objective="v2", fencing_token=fence)
    assert ok(reply)["work_item"]["objective"] == "v2"


# ---------------------------------------------------------------- read model


async def _board(d: Driver) -> dict[str, str]:
    """One item per readiness family, plus a queued one: returns ids by role."""
    ids = {role: await d.create(role) for role in ("current", "queued", "blocked", "operator")}
    ids["done"] = await d.create("done")
    await pick(d, ids["current"])
    ok(await d.tool("UpdateWorkItem", work_item_id=ids["blocked"], blocked_by="vendor"))
    ok(await d.tool("UpdateWorkItem", work_item_id=ids["operator"], plan_status="needs_input"))
    ok(await d.tool("CompleteWorkItem", work_item_id=ids["done"], report_text="Done."))
    return ids


async def _listed(d: Driver, filter_: str, limit: int = 20) -> dict[str, Any]:
    args = ListWorkItemsInput(filter=filter_, limit=limit)  # type: ignore[arg-type]
    return await d.reads.list_work_items(AGENT, args)


async def test_list_work_items_filters_in_ranking_order(d: Driver) -> None:
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
        assert listed["total_matching"] == len(roles), filter_
        assert listed["returned"] == len(roles), filter_
        assert listed["filter"] == filter_


async def test_list_work_items_limit_cuts_the_page_not_the_total(d: Driver) -> None:
    ids = await _board(d)
    listed = await _listed(d, "all", limit=2)
    assert [w["id"] for w in listed["work_items"]] == [ids["current"], ids["queued"]]
    assert (listed["returned"], listed["total_matching"]) == (2, 5)
    through_ledger = ok(await d.tool("ListWorkItems", filter="open", limit=1))
    assert [w["id"] for w in through_ledger["work_items"]] == [ids["current"]]
    assert (through_ledger["returned"], through_ledger["total_matching"]) == (1, 4)


async def test_blocked_filter_never_counts_the_current_item(d: Driver) -> None:
    blocked = [await d.create(f"blocked {n}") for n in range(3)]
    for wid in blocked:
        ok(await d.tool("UpdateWorkItem", work_item_id=wid, blocked_by="vendor"))
    await pick(d, blocked[0])
    full = await _listed(d, "blocked")
    assert [w["id"] for w in full["work_items"]] == [blocked[2], blocked[1]]
    assert full["total_matching"] == 2
    page = await _listed(d, "blocked", limit=1)
    assert [w["id"] for w in page["work_items"]] == [blocked[2]]
    assert page["total_matching"] == 2


async def test_a_triggered_blocked_item_ranks_before_queued_work(d: Driver) -> None:
    queued = await d.create("queued")
    blocked = await d.create("blocked")
    ok(await d.tool("UpdateWorkItem", work_item_id=blocked, blocked_by="vendor"))
    hooked = await d.create("hooked")
    await wait_for(
        d,
        work_item_id=hooked,
        reason="hook",
        wake="external",
        capability_token_hash=token_hash("x"),
    )
    ok(await callback(d, "x", "d1"))
    listed = await _listed(d, "all")
    assert [w["id"] for w in listed["work_items"]] == [hooked, queued, blocked]
    assert listed["work_items"][0]["candidate_class"] == "triggered_blocked"
    assert [w["id"] for w in (await _listed(d, "blocked"))["work_items"]] == [hooked, blocked]
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    assert (state.counts.runnable, state.counts.blocked) == (1, 2)


async def test_agent_state_counts_work_items_by_readiness(d: Driver) -> None:
    await _board(d)
    await d.create("another queued")
    state = await d.reads.agent_state(AGENT)
    assert state is not None
    counts = state.counts
    assert (counts.runnable, counts.waiting_for_operator, counts.blocked, counts.completed) == (
        3,
        1,
        1,
        1,
    )


async def test_history_verifies_after_a_scenario(d: Driver) -> None:
    ids = await _board(d)
    wait = await wait_for(
        d,
        work_item_id=ids["queued"],
        reason="hook",
        wake="external",
        capability_token_hash=token_hash("x"),
    )
    ok(await callback(d, "x", "d1"))
    ok(await operator_message(d))
    ok(await d.tool("PickWorkItem", work_item_id=ids["queued"], clear_blocker=True, reason="ok"))
    assert wait["id"] not in [w.id for w in await d.reads.active_waits(AGENT)]
    events = await history(d)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    verified = await d.reads.verify_history(AGENT)
    assert verified.ok
    assert verified.count == len(events)
    assert verified.first_bad_index is None
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
    await wait_for(
        d, work_item_id=wid, reason="hook", wake="external", capability_token_hash=token_hash("x")
    )
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
