"""Turns: begin and finish under a fencing token, failed attempts that block an item, triggers a
turn reviews, and the wake budget. Pure: `decide` at a fixed instant."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain.records import WakeBudget
from shared.domain.stored import AgentRecord, CapabilityRecord
from shared.domain.wake import TickKind
from shared.wire import commands as c
from shared.wire.events import TurnFinished, TurnStarted, WakeBudgetReset
from tests.builders import at, make_agent, make_agent_record, make_wait, make_work_item
from tests.unit.ledger_kit import (
    ITEM,
    NOW,
    begin_turn,
    callback,
    chain,
    finish_turn,
    ledger_state,
    only,
    operator_message,
    readiness_of,
    run,
    tool,
)

FAILED, YIELDED = c.TurnOutcome.FAILED, c.TurnOutcome.YIELDED


def test_begin_turn_with_the_current_fencing_token_starts_the_turn() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=2)
    decision = run(state, begin_turn("turn-1", 2))
    assert decision.result == {"turn_id": "turn-1", "turn_index": 1, "current_work_item_id": ITEM}
    (started,) = only(decision.events, TurnStarted)
    assert (started.fencing_token, started.interrupted_turn_id) == (2, None)
    agent = decision.state.require_agent()
    assert (agent.current_turn_id, agent.current_turn_work_item_id) == ("turn-1", ITEM)


def test_a_tool_call_with_the_current_fencing_token_applies() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=2)
    update = tool("UpdateWorkItem", work_item_id=ITEM, objective="v2", fencing_token=2)
    assert run(state, update).state.items[ITEM].objective == "v2"


def turns(*outcomes: c.TurnOutcome, error: str = "boom") -> list[c.Command]:
    commands: list[c.Command] = []
    for n, outcome in enumerate(outcomes):
        commands.append(begin_turn(f"turn-{n}"))
        commands.append(finish_turn(f"turn-{n}", outcome, work_item_id=ITEM, error=error))
    return commands


def test_the_third_failed_turn_blocks_the_item_and_releases_focus() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    state, _ = chain(state, *turns(FAILED, FAILED))
    assert state.items[ITEM].blocked_by is None
    state, events = chain(state, *turns(FAILED))
    item = state.items[ITEM]
    assert item.blocked_by == "turn failed 3 times: boom"
    assert item.recheck_at == NOW + timedelta(hours=1)
    assert readiness_of(state, ITEM) == "blocked"
    assert state.current_id is None
    assert "work_item_focus_released" in [e.message_type for e in events]


def test_every_failed_turn_leaves_a_failure_brief() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    begin, finish = turns(FAILED)
    decision = run(chain(state, begin)[0], finish)
    assert [(b.kind.value, b.text, b.turn_id) for b in decision.side.briefs] == [
        ("failure", "boom", "turn-0")
    ]


@pytest.mark.parametrize(
    ("outcome", "kinds"),
    [
        (c.TurnOutcome.YIELDED, ["reply"]),
        (c.TurnOutcome.WAITING, ["reply"]),
        (c.TurnOutcome.COMPLETED, ["reply"]),
        (c.TurnOutcome.FAILED, ["failure"]),
        (c.TurnOutcome.INTERRUPTED, ["failure"]),
        (c.TurnOutcome.MODEL_UNAVAILABLE, []),
    ],
)
def test_only_a_turn_that_reached_its_end_leaves_its_text_as_a_reply(
    outcome: c.TurnOutcome, kinds: list[str]
) -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    finish = finish_turn("turn-0", outcome, work_item_id=ITEM).model_copy(
        update={"reply_text": "  The answer is 42.  ", "answered": ("msg_1", "msg_2")}
    )
    decision = run(chain(state, begin_turn("turn-0"))[0], finish)
    assert [b.kind.value for b in decision.side.briefs] == kinds
    if kinds == ["reply"]:
        (brief,) = decision.side.briefs
        assert (brief.text, brief.in_reply_to, brief.turn_id) == (
            "The answer is 42.",
            ("msg_1", "msg_2"),
            "turn-0",
        )
        assert "brief_recorded" in [e.message_type for e in decision.events]


def test_blank_final_text_leaves_no_reply() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    finish = finish_turn("turn-0", YIELDED).model_copy(update={"reply_text": "  \n "})
    decision = run(chain(state, begin_turn("turn-0"))[0], finish)
    assert decision.side.briefs == ()


def test_a_turn_that_ends_well_resets_the_failure_count() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    state, _ = chain(state, *turns(FAILED, FAILED, YIELDED, FAILED, FAILED))
    assert state.items[ITEM].blocked_by is None
    assert state.current_id == ITEM
    assert state.require_agent().failed_attempts == {ITEM: 2}


def test_begin_turn_after_an_unfinished_turn_counts_an_interrupted_attempt() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    state, _ = chain(state, begin_turn("turn-1", 1))
    state = state._copy(fence=2)
    decision = run(state, begin_turn("turn-2", 2))
    assert [(e.turn_id, e.outcome) for e in only(decision.events, TurnFinished)] == [
        ("turn-1", c.TurnOutcome.INTERRUPTED)
    ]
    assert only(decision.events, TurnStarted)[0].interrupted_turn_id == "turn-1"
    assert decision.state.require_agent().failed_attempts == {ITEM: 1}
    # Two more failures make three attempts: the interruption counted as one.
    state, _ = chain(
        decision.state.committed(),
        finish_turn("turn-2", FAILED, 2, work_item_id=ITEM, error="e"),
        begin_turn("turn-3", 2),
        finish_turn("turn-3", FAILED, 2, work_item_id=ITEM, error="e"),
    )
    assert state.items[ITEM].blocked_by == "turn failed 3 times: e"
    assert state.current_id is None


# ---------------------------------------------------------------- reviewed triggers

REVIEWS = {
    "a turn that finishes reviews what it showed": (("turn-1", YIELDED),),
    "an interrupted turn leaves its triggers to the retry": (("turn-1", None), ("turn-2", YIELDED)),
    "a failed turn leaves its triggers unreviewed": (("turn-1", FAILED),),
}


@pytest.mark.parametrize("script", REVIEWS.values(), ids=REVIEWS.keys())
def test_a_trigger_is_reviewed_only_when_the_turn_that_showed_it_finishes(
    script: tuple[tuple[str, c.TurnOutcome | None], ...],
) -> None:
    """Each turn shows the timer wait's one trigger; None: the turn never finishes."""
    wait = make_wait(work_item_id=ITEM, wake="timer", trigger_count=1, last_triggered_at=at())
    state = ledger_state(make_work_item(id=ITEM, blocked_by="poll"), waits=[wait], fence=1)
    for turn_id, outcome in script:
        state, _ = chain(state, begin_turn(turn_id, reviewed={wait.id: 1}))
        assert state.waits[wait.id].reviewed_trigger_count == 0
        if outcome is not None:
            state, _ = chain(state, finish_turn(turn_id, outcome, error="provider down"))
    reviewed = script[-1][1] is YIELDED
    assert state.waits[wait.id].reviewed_trigger_count == int(reviewed)
    assert state.require_agent().turn_reviewed == {}


# ---------------------------------------------------------------- wake budget


def spent(used: int, **fields: object) -> AgentRecord:
    return make_agent_record(state=make_agent(wake_budget=WakeBudget(used=used)), **fields)


@pytest.mark.parametrize(
    ("kind", "used"),
    [(TickKind.INPUT, 0), (TickKind.CONTINUE_CURRENT, 1), (TickKind.PICK_QUEUED, 1)],
)
def test_only_an_autonomous_tick_spends_the_wake_budget(kind: TickKind, used: int) -> None:
    decision = run(ledger_state(agent=spent(0), fence=1), begin_turn("turn-1", kind=kind))
    agent = decision.state.require_agent().state
    assert (agent.wake_budget.used, agent.turn_index, agent.posture.value) == (used, 1, "running")


@pytest.mark.parametrize(
    ("command", "cause"),
    [(operator_message(), "operator_message"), (callback(), "callback_trigger")],
    ids=["operator message", "trigger"],
)
def test_fresh_input_resets_the_wake_budget(command: c.Command, cause: str) -> None:
    hook = make_wait(work_item_id=ITEM, wake="external")
    cap = CapabilityRecord(token_id="cap-1", agent_id="agent-1", wait_id=hook.id)
    state = ledger_state(
        make_work_item(id=ITEM, blocked_by="hook"),
        waits=[hook],
        agent=spent(3, exhaustion_reported=True),
        capability=cap,
    )
    decision = run(state, command)
    after = decision.state.require_agent()
    assert (after.state.wake_budget.used, after.exhaustion_reported) == (0, False)
    assert [e.cause for e in only(decision.events, WakeBudgetReset)] == [cause]
