"""WaitFor: which owner a wait gets, what it blocks, how a second wait replaces the first, and
what timer and external waits schedule or hand out. Pure: `decide` at a fixed instant."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain.records import WaitStatus, WakeKind
from shared.wire.events import TimerScheduled, WaitCancelled, WaitCreated
from tests.builders import make_work_item
from tests.unit.ledger_kit import (
    ITEM,
    NOW,
    OTHER,
    chain,
    ledger_state,
    only,
    run,
    token_hash,
    tool,
)

OWNERS = {
    "the named item, focus kept": (ITEM, OTHER, OTHER, ITEM),
    "the current item by default": (ITEM, None, ITEM, None),
    "the agent when nothing is current": (None, None, None, None),
}


@pytest.mark.parametrize(
    ("current", "named", "owner", "current_after"), OWNERS.values(), ids=OWNERS.keys()
)
def test_a_wait_belongs_to_its_owner_and_blocks_only_it(
    current: str | None, named: str | None, owner: str | None, current_after: str | None
) -> None:
    state = ledger_state(make_work_item(id=ITEM), make_work_item(id=OTHER), current=current)
    target = {"work_item_id": named} if named else {}
    wait_for = tool("WaitFor", reason="ask the operator", wake="operator_input", **target)
    decision = run(state, wait_for)
    assert decision.result is not None
    assert decision.result["wait"]["work_item_id"] == owner
    assert [w.work_item_id for w in decision.state.active_waits()] == [owner]
    assert decision.state.current_id == current_after
    blockers = {wid: item.blocked_by for wid, item in decision.state.items.items()}
    assert blockers == {wid: "ask the operator" if wid == owner else None for wid in (ITEM, OTHER)}
    if owner is None:
        assert "work_item" not in decision.result
        return
    view = decision.result["work_item"]
    assert (view["id"], view["blocked_by"]) == (owner, "ask the operator")
    assert [w["id"] for w in view["active_waits"]] == [decision.result["wait"]["id"]]


@pytest.mark.parametrize("owner", [ITEM, None], ids=["item", "agent scope"])
def test_a_second_wait_on_the_same_owner_replaces_the_first(owner: str | None) -> None:
    target = {"work_item_id": owner} if owner else {}
    first = tool("WaitFor", reason="first", wake="operator_input", **target)
    second = tool("WaitFor", reason="second", wake="external", **target)
    state, _ = chain(ledger_state(make_work_item(id=ITEM)), first)
    (first_wait,) = state.active_waits()
    decision = run(state, second, now=NOW + timedelta(minutes=1))
    replaced = decision.state.waits[first_wait.id]
    assert (replaced.status, replaced.cancelled_at) == (
        WaitStatus.CANCELLED,
        NOW + timedelta(minutes=1),
    )
    assert [(e.wait_id, e.cause) for e in only(decision.events, WaitCancelled)] == [
        (first_wait.id, "replaced")
    ]
    (active,) = decision.state.active_waits()
    assert (active.reason, active.work_item_id) == ("second", owner)
    if owner is not None:
        assert decision.state.items[ITEM].blocked_by == "second"


def test_waits_of_different_owners_live_side_by_side() -> None:
    state, _ = chain(
        ledger_state(make_work_item(id=ITEM), make_work_item(id=OTHER)),
        tool("WaitFor", work_item_id=ITEM, reason="q1", wake="operator_input"),
        tool("WaitFor", work_item_id=OTHER, reason="q2", wake="operator_input"),
        tool("WaitFor", reason="anything new?", wake="operator_input"),
    )
    assert [w.work_item_id for w in state.active_waits()] == [ITEM, OTHER, None]


def test_a_timer_wait_wakes_at_now_plus_wake_after_ms() -> None:
    wait_for = tool("WaitFor", work_item_id=ITEM, reason="poll", wake="timer", wake_after_ms=250)
    decision = run(ledger_state(make_work_item(id=ITEM)), wait_for)
    (wait,) = decision.state.active_waits()
    assert wait.wake_at == NOW + timedelta(milliseconds=250)
    timers = only(decision.events, TimerScheduled)
    assert [e.due_at for e in timers if e.wait_id == wait.id] == [wait.wake_at]


@pytest.mark.parametrize("wake", ["external", "operator_input"])
def test_only_an_external_wait_hands_its_token_a_capability(wake: str) -> None:
    wait_for = tool(
        "WaitFor",
        work_item_id=ITEM,
        reason="hook",
        wake=wake,
        capability_token_hash=token_hash("x"),
    )
    decision = run(ledger_state(make_work_item(id=ITEM)), wait_for)
    (created,) = only(decision.events, WaitCreated)
    capabilities = [(h, cap.wait_id) for h, cap in decision.side.capabilities]
    expected = [(token_hash("x"), created.wait.id)] if wake == WakeKind.EXTERNAL else []
    assert capabilities == expected
