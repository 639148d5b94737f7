"""Which writes spend, reset or leave the wake budget, and when a blocked item is rechecked:
rechecks are autonomous wakes, `WaitFor` sets a recheck only when asked, and a timer wait is
never rechecked before its `wake_at`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from services.ledger.rules import Context, LedgerState, decide
from shared.domain.records import WakeBudget, WorkItem
from shared.domain.scheduling import AgentSnapshot
from shared.domain.scheduling import decide as decide_tick
from shared.domain.stored import AgentRecord, CapabilityRecord
from shared.domain.wake import TickKind
from shared.wire import commands as c
from tests.builders import AGENT_ID, at, make_agent, make_wait, make_work_item, work_item_id

NOW = at(hours=2)
WI = work_item_id(1)
HOUR_MS = 3_600_000
TOKEN_HASH = "b" * 64


def ids(prefix: str) -> str:
    return prefix + "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def ctx(now: datetime = NOW) -> Context:
    return Context(now=now, new_id=ids)


def state(
    *, used: int = 7, items: tuple[WorkItem, ...] = (), waits: tuple[Any, ...] = (), **agent: Any
) -> LedgerState:
    record = AgentRecord(
        state=make_agent(wake_budget=WakeBudget(used=used, limit=25), **agent),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    return LedgerState(
        agent_id=AGENT_ID,
        agent=record,
        fence=3,
        items={i.id: i for i in items},
        waits={w.id: w for w in waits},
    )


def blocked_item(**fields: Any) -> WorkItem:
    defaults: dict[str, Any] = {"id": WI, "blocked_by": "waiting", "recheck_at": at(hours=1)}
    return make_work_item(**{**defaults, **fields})


def command(cls: type[c.Command], **fields: Any) -> Any:
    return cls.model_validate({"command_id": "c1", "agent_id": AGENT_ID, **fields})


def used_after(before: LedgerState, cmd: c.Command, now: datetime = NOW) -> int:
    after = decide(before, cmd, ctx(now)).state.require_agent()
    return after.state.wake_budget.used


# ---------------------------------------------------------------- spend, reset, leave


def test_a_delivered_recheck_leaves_the_budget_spent() -> None:
    before = state(items=(blocked_item(),))
    decision = decide(before, command(c.ConsumeRecheck, work_item_ids=[WI]), ctx())
    assert decision.result == {"consumed": [WI]}
    assert decision.state.require_agent().state.wake_budget.used == 7
    assert "wake_budget_reset" not in [e.message_type for e in decision.events]


@pytest.mark.parametrize(
    ("kind", "used"),
    [
        (TickKind.INPUT, 7),
        (TickKind.REVIEW_TRIGGERED, 7),
        (TickKind.CONTINUE_CURRENT, 8),
        (TickKind.PICK_QUEUED, 8),
        (TickKind.RECHECK_DUE, 8),
    ],
)
def test_a_turn_spends_the_budget_when_its_tick_is_autonomous(kind: TickKind, used: int) -> None:
    begin = command(c.BeginTurn, turn_id="turn_1", fencing_token=3, tick_id="t1", tick_kind=kind)
    assert used_after(state(), begin) == used


def _fresh_inputs() -> list[Any]:
    timer = make_wait(work_item_id=WI, wake="timer", wake_at=at(hours=1))
    task = make_wait(work_item_id=WI, wake="task_result", resource="task-7")
    operator = make_wait(work_item_id=WI, wake="operator_input")
    callback = dict(token_hash=TOKEN_HASH, content_type="text/plain", body="done")
    return [
        pytest.param(
            (operator,),
            command(c.AppendOperatorMessage, message_id="msg_1", text="go on"),
            id="operator-message",
        ),
        pytest.param(
            (),
            command(c.AppendOperatorMessage, message_id="msg_1", text="go on"),
            id="operator-message-without-a-wait",
        ),
        pytest.param(
            (make_wait(work_item_id=WI),),
            command(c.RecordCallback, delivery_id="d1", source="http", **callback),
            id="callback-to-its-wait",
        ),
        pytest.param(
            (),
            command(c.RecordCallback, delivery_id="d1", source="http", **callback),
            id="callback-to-the-inbox",
        ),
        pytest.param(
            (task,),
            command(c.RecordTaskResult, task_id="task-7", status="succeeded", summary="ok"),
            id="task-result",
        ),
        pytest.param(
            (timer,), command(c.FireTimer, wait_id=timer.id, due_at=at(hours=1)), id="timer-fired"
        ),
    ]


@pytest.mark.parametrize(("waits", "cmd"), _fresh_inputs())
def test_fresh_input_resets_the_budget(waits: tuple[Any, ...], cmd: c.Command) -> None:
    before = state(items=(blocked_item(),), waits=waits)
    if isinstance(cmd, c.RecordCallback):
        wait_id = waits[0].id if waits else None
        cap = CapabilityRecord(token_id="cb_1", agent_id=AGENT_ID, wait_id=wait_id)
        before = before._copy(capability=cap)
    assert used_after(before, cmd) == 0


# ---------------------------------------------------------------- when a recheck is set


def wait_for(**args: Any) -> c.WaitFor:
    return command(c.WaitFor, fencing_token=3, args={"work_item_id": WI, **args})


@pytest.mark.parametrize(
    ("args", "recheck_at"),
    [
        ({"reason": "r", "wake": "external"}, None),
        ({"reason": "r", "wake": "operator_input"}, None),
        (
            {"reason": "r", "wake": "external", "recheck_after_ms": HOUR_MS},
            NOW + timedelta(hours=1),
        ),
        ({"reason": "r", "wake": "timer", "wake_after_ms": 3 * HOUR_MS}, None),
        (
            {
                "reason": "r",
                "wake": "timer",
                "wake_after_ms": 3 * HOUR_MS,
                "recheck_after_ms": 60_000,
            },
            NOW + timedelta(hours=3),
        ),
        (
            {"reason": "r", "wake": "timer", "wake_after_ms": 60_000, "recheck_after_ms": HOUR_MS},
            NOW + timedelta(hours=1),
        ),
    ],
)
def test_wait_for_sets_a_recheck_only_when_asked_and_never_before_a_timer(
    args: dict[str, Any], recheck_at: datetime | None
) -> None:
    before = state(items=(make_work_item(id=WI),), current_work_item_id=WI)
    after = decide(before, wait_for(**args), ctx()).state
    assert after.items[WI].recheck_at == recheck_at
    timers = [e for e in decide(before, wait_for(**args), ctx()).events]
    scheduled = [e.model_dump()["due_at"] for e in timers if e.message_type == "timer_scheduled"]
    assert (recheck_at in scheduled) is (recheck_at is not None)


@pytest.mark.parametrize(
    ("recheck_after_ms", "recheck_at"),
    [(None, NOW + timedelta(hours=3)), (5 * HOUR_MS, NOW + timedelta(hours=5))],
)
def test_blocking_an_item_with_a_timer_wait_rechecks_it_no_sooner_than_the_timer(
    recheck_after_ms: int | None, recheck_at: datetime
) -> None:
    timer = make_wait(work_item_id=WI, wake="timer", wake_at=NOW + timedelta(hours=3))
    before = state(items=(make_work_item(id=WI),), waits=(timer,))
    args: dict[str, Any] = {"work_item_id": WI, "blocked_by": "still waiting"}
    if recheck_after_ms is not None:
        args["recheck_after_ms"] = recheck_after_ms
    after = decide(before, command(c.UpdateWorkItem, args=args), ctx()).state
    assert after.items[WI].recheck_at == recheck_at


def test_blocking_an_item_without_a_timer_keeps_the_one_hour_default() -> None:
    before = state(items=(make_work_item(id=WI),))
    args = {"work_item_id": WI, "blocked_by": "still waiting"}
    after = decide(before, command(c.UpdateWorkItem, args=args), ctx()).state
    assert after.items[WI].recheck_at == NOW + timedelta(hours=1)


# ---------------------------------------------------------------- the scheduler's side


@pytest.mark.parametrize(("used", "kind"), [(24, TickKind.RECHECK_DUE), (25, None)])
def test_a_spent_budget_holds_due_rechecks(used: int, kind: TickKind | None) -> None:
    agent = make_agent(wake_budget=WakeBudget(used=used, limit=25))
    snapshot = AgentSnapshot(agent=agent, work_items=(blocked_item(recheck_at=at(hours=1)),))
    assert decide_tick(snapshot, NOW).kind is kind
