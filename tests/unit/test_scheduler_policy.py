"""The scheduler's decision table: tick priority, no preemption, wake budget, rechecks, tick ids."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from services.scheduler.policy import (
    AgentSnapshot,
    Decision,
    Hold,
    TimerKind,
    TimerRef,
    budget_after,
    budget_after_tick,
    decide,
    due_ms,
    event_facts,
    is_orphaned,
    is_recheck_due,
    merge_facts,
    park_reason,
    recheck_upkeep,
    tick_id_for,
    wants_nudge,
)
from shared.domain.records import (
    AgentLoop,
    AgentState,
    Posture,
    WaitingIntent,
    WakeBudget,
    WorkItem,
)
from shared.domain.views import CandidateClass
from shared.domain.wake import TickKind
from shared.wire.codec import CodecError
from shared.wire.commands import ParkReason
from tests.builders import at, make_agent, make_wait, make_work_item, wait_id, work_item_id

NOW = at(hours=2)
DUE = at(hours=1)
LATER = at(hours=3)


def item(n: int, **fields: Any) -> WorkItem:
    return make_work_item(id=work_item_id(n), **fields)


def blocked(n: int, text: str = "Waiting on the vendor", **fields: Any) -> WorkItem:
    return item(n, blocked_by=text, **fields)


def completed(n: int, **fields: Any) -> WorkItem:
    return item(n, state="completed", **fields)


def wait(n: int, on: int | None, **fields: Any) -> WaitingIntent:
    owner = work_item_id(on) if on is not None else None
    return make_wait(id=wait_id(n), work_item_id=owner, **fields)


def triggered(n: int, on: int | None, *, count: int = 1, reviewed: int = 0) -> WaitingIntent:
    return wait(
        n, on, trigger_count=count, reviewed_trigger_count=reviewed, last_triggered_at=at(minutes=n)
    )


def agent(current: int | None = None, used: int = 0, limit: int = 25, **fields: Any) -> AgentState:
    focus = work_item_id(current) if current is not None else None
    budget = WakeBudget(used=used, limit=limit)
    return make_agent(current_work_item_id=focus, wake_budget=budget, **fields)


def snapshot(
    items: tuple[WorkItem, ...] = (),
    waits: tuple[WaitingIntent, ...] = (),
    state: AgentState | None = None,
    **fields: Any,
) -> AgentSnapshot:
    return AgentSnapshot(agent=state or agent(), work_items=items, waits=waits, **fields)


def wi(n: int | None) -> str | None:
    return work_item_id(n) if n is not None else None


# ---------------------------------------------------------------- priority

PRIORITY_CASES = [
    pytest.param(
        snapshot((item(1),), state=agent(current=1, inbox_pending=1)),
        TickKind.INPUT,
        1,
        id="input-beats-current-runnable",
    ),
    pytest.param(snapshot(state=agent(inbox_pending=2)), TickKind.INPUT, None, id="input-alone"),
    pytest.param(
        snapshot((blocked(2),), (triggered(1, 2),), state=agent(inbox_pending=1)),
        TickKind.INPUT,
        None,
        id="input-beats-review",
    ),
    pytest.param(
        snapshot((item(1),), state=agent(current=1, used=25, inbox_pending=1)),
        TickKind.INPUT,
        1,
        id="input-ignores-spent-budget",
    ),
    pytest.param(
        snapshot((item(1),), state=agent(current=1)),
        TickKind.CONTINUE_CURRENT,
        1,
        id="continue-current-runnable",
    ),
    pytest.param(
        snapshot((item(1), blocked(2)), (triggered(1, 2),), state=agent(current=1)),
        TickKind.CONTINUE_CURRENT,
        1,
        id="trigger-never-preempts-current-runnable",
    ),
    pytest.param(
        snapshot((item(1),), (triggered(1, None),), state=agent(current=1)),
        TickKind.CONTINUE_CURRENT,
        1,
        id="agent-scope-trigger-never-preempts-current-runnable",
    ),
    pytest.param(
        snapshot((item(1), item(2)), state=agent(current=1)),
        TickKind.CONTINUE_CURRENT,
        1,
        id="continue-beats-queued",
    ),
    pytest.param(
        snapshot((blocked(2),), (triggered(1, 2),)),
        TickKind.REVIEW_TRIGGERED,
        2,
        id="review-triggered-without-current",
    ),
    pytest.param(
        snapshot((blocked(2), item(3)), (triggered(1, 2),)),
        TickKind.REVIEW_TRIGGERED,
        2,
        id="review-beats-queued",
    ),
    pytest.param(
        snapshot((blocked(1), item(2)), (triggered(1, 1),), state=agent(current=1)),
        TickKind.REVIEW_TRIGGERED,
        1,
        id="review-when-current-is-not-runnable",
    ),
    pytest.param(
        snapshot((blocked(2), blocked(3)), (triggered(1, 2), triggered(5, 3))),
        TickKind.REVIEW_TRIGGERED,
        3,
        id="review-names-most-recent-trigger",
    ),
    pytest.param(
        snapshot(waits=(triggered(1, None),)),
        TickKind.REVIEW_TRIGGERED,
        None,
        id="review-agent-scope-wait",
    ),
    pytest.param(
        snapshot((blocked(2, recheck_at=DUE), blocked(3)), (triggered(1, 3),)),
        TickKind.REVIEW_TRIGGERED,
        3,
        id="review-beats-recheck",
    ),
    pytest.param(
        snapshot((blocked(2), item(3)), (triggered(1, 2, count=2, reviewed=2),)),
        TickKind.PICK_QUEUED,
        None,
        id="reviewed-trigger-is-not-reviewed-again",
    ),
    pytest.param(
        snapshot((blocked(2), item(3)), (triggered(1, 2, count=3, reviewed=2),)),
        TickKind.REVIEW_TRIGGERED,
        2,
        id="new-trigger-after-review-is-reviewed",
    ),
    pytest.param(
        snapshot((item(1),)), TickKind.PICK_QUEUED, None, id="pick-queued-never-sets-focus"
    ),
    pytest.param(
        snapshot((blocked(1), item(2)), state=agent(current=1)),
        TickKind.PICK_QUEUED,
        None,
        id="pick-queued-past-inspection-focus",
    ),
    pytest.param(
        snapshot((item(1), blocked(2, recheck_at=DUE))),
        TickKind.PICK_QUEUED,
        None,
        id="pick-beats-recheck",
    ),
    pytest.param(
        snapshot((blocked(2, recheck_at=DUE),)),
        TickKind.RECHECK_DUE,
        2,
        id="recheck-due",
    ),
    pytest.param(
        snapshot((blocked(1, recheck_at=DUE),), state=agent(current=1)),
        TickKind.RECHECK_DUE,
        1,
        id="recheck-due-on-inspected-current",
    ),
]


@pytest.mark.parametrize(("snap", "kind", "target"), PRIORITY_CASES)
def test_tick_priority(snap: AgentSnapshot, kind: TickKind, target: int | None) -> None:
    decision = decide(snap, NOW)
    assert decision.tick is not None
    assert decision.kind is kind
    assert decision.tick.work_item_id == wi(target)
    assert decision.posture is Posture.RUNNING
    assert decision.hold is None


DORMANT_CASES = [
    pytest.param(snapshot(), id="no-work"),
    pytest.param(snapshot((completed(1, result_summary="Done."), completed(2))), id="all-done"),
    pytest.param(snapshot((blocked(1, recheck_at=LATER),)), id="recheck-not-yet-due"),
    pytest.param(snapshot((blocked(1),), (wait(1, 1),)), id="untriggered-wait"),
    pytest.param(
        snapshot(
            (blocked(1),),
            (wait(1, 1, status="cancelled", trigger_count=1, last_triggered_at=DUE),),
        ),
        id="cancelled-trigger",
    ),
    pytest.param(
        snapshot((blocked(1, recheck_at=DUE, recheck_consumed_at=DUE),)), id="recheck-consumed"
    ),
    pytest.param(snapshot((item(1, plan_status="needs_input"),)), id="needs-input"),
]


@pytest.mark.parametrize("snap", DORMANT_CASES)
def test_nothing_to_do_parks_dormant(snap: AgentSnapshot) -> None:
    decision = decide(snap, NOW)
    assert decision.tick is None
    assert decision.posture is Posture.DORMANT
    assert decision.hold is Hold.NOTHING_RUNNABLE
    assert not decision.report_budget_exhausted


# ---------------------------------------------------------------- one outstanding tick

HOLD_CASES = [
    pytest.param(dict(turn_running=True), Hold.TURN_RUNNING, Posture.RUNNING, id="turn-running"),
    pytest.param(
        dict(outstanding_tick_id="t-1"), Hold.TICK_OUTSTANDING, Posture.RUNNING, id="tick-out"
    ),
    pytest.param(
        dict(turn_running=True, outstanding_tick_id="t-1"),
        Hold.TURN_RUNNING,
        Posture.RUNNING,
        id="both",
    ),
    pytest.param(
        dict(state=agent(current=1, inbox_pending=1, posture="stopped")),
        Hold.STOPPED,
        Posture.STOPPED,
        id="stopped",
    ),
]


@pytest.mark.parametrize(("fields", "hold", "posture"), HOLD_CASES)
def test_one_outstanding_tick_per_agent(
    fields: dict[str, Any], hold: Hold, posture: Posture
) -> None:
    fields = {"state": agent(current=1, inbox_pending=1), **fields}
    decision = decide(snapshot((item(1), blocked(2)), (triggered(1, 2),), **fields), NOW)
    assert decision.tick is None
    assert decision.hold is hold
    assert decision.posture is posture
    assert decision.recheck_work_item_ids == ()


def test_a_new_tick_follows_once_the_outstanding_one_is_taken() -> None:
    held = snapshot((item(1),), state=agent(current=1), outstanding_tick_id="t-1")
    assert decide(held, NOW).tick is None
    assert decide(replace(held, outstanding_tick_id=None), NOW).kind is TickKind.CONTINUE_CURRENT


# ---------------------------------------------------------------- rechecks

RECHECK_CASES = [
    pytest.param(blocked(1, recheck_at=DUE), True, id="past-deadline"),
    pytest.param(blocked(1, recheck_at=NOW), True, id="at-deadline"),
    pytest.param(blocked(1, recheck_at=LATER), False, id="before-deadline"),
    pytest.param(blocked(1, recheck_at=DUE, recheck_consumed_at=DUE), False, id="consumed"),
    pytest.param(blocked(1, recheck_at=DUE, recheck_consumed_at=NOW), False, id="consumed-late"),
    pytest.param(
        blocked(1, recheck_at=DUE, recheck_consumed_at=at(minutes=10)), True, id="new-deadline"
    ),
    pytest.param(item(1, recheck_at=DUE), False, id="not-blocked"),
    pytest.param(blocked(1), False, id="no-deadline"),
    pytest.param(
        completed(1, blocked_by="gone", recheck_at=DUE), False, id="completed-never-rechecked"
    ),
]


@pytest.mark.parametrize(("work_item", "due"), RECHECK_CASES)
def test_recheck_is_due_once_per_deadline(work_item: WorkItem, due: bool) -> None:
    assert is_recheck_due(work_item, NOW) is due


def test_due_rechecks_are_coalesced_into_one_tick() -> None:
    items = (
        blocked(2, recheck_at=DUE, updated_at=at(minutes=1)),
        blocked(3, recheck_at=DUE, updated_at=at(minutes=2)),
        blocked(4, recheck_at=LATER),
        blocked(5, recheck_at=DUE, recheck_consumed_at=DUE),
    )
    decision = decide(snapshot(items), NOW)
    assert decision.kind is TickKind.RECHECK_DUE
    assert decision.tick is not None
    assert decision.tick.work_item_id is None
    assert decision.recheck_work_item_ids == (work_item_id(3), work_item_id(2))


def test_consumed_recheck_is_not_delivered_again() -> None:
    snap = snapshot((blocked(2, recheck_at=DUE),))
    assert decide(snap, NOW).recheck_work_item_ids == (work_item_id(2),)
    consumed = replace(snap, work_items=(blocked(2, recheck_at=DUE, recheck_consumed_at=NOW),))
    assert decide(consumed, NOW).tick is None
    reblocked = replace(snap, work_items=(blocked(2, recheck_at=LATER, recheck_consumed_at=NOW),))
    assert decide(reblocked, NOW).tick is None
    assert decide(reblocked, at(hours=4)).kind is TickKind.RECHECK_DUE


def test_only_recheck_ticks_list_rechecks() -> None:
    snap = snapshot((item(1), blocked(2, recheck_at=DUE)))
    assert decide(snap, NOW).recheck_work_item_ids == ()


# ---------------------------------------------------------------- wake budget

BUDGET_STEPS = [
    pytest.param(TickKind.CONTINUE_CURRENT, 0, 1, id="continue-spends"),
    pytest.param(TickKind.PICK_QUEUED, 3, 4, id="pick-spends"),
    pytest.param(TickKind.INPUT, 7, 0, id="input-resets"),
    pytest.param(TickKind.REVIEW_TRIGGERED, 25, 0, id="trigger-resets"),
    pytest.param(TickKind.RECHECK_DUE, 3, 4, id="recheck-spends"),
]


@pytest.mark.parametrize(("kind", "used", "after"), BUDGET_STEPS)
def test_budget_counts_autonomous_reentries_only(kind: TickKind, used: int, after: int) -> None:
    assert budget_after_tick(kind, WakeBudget(used=used, limit=25)) == WakeBudget(
        used=after, limit=25
    )


def test_no_tick_leaves_the_budget_alone() -> None:
    budget = WakeBudget(used=25, limit=25)
    parked = decide(snapshot((item(1),), state=agent(current=1, used=25)), NOW)
    assert budget_after(parked, budget) is budget
    assert budget_after(decide(snapshot(), NOW), budget) is budget


def run_until_parked(snap: AgentSnapshot, steps: int = 100) -> tuple[list[Decision], Decision]:
    """Apply each tick's budget accounting the way the ledger would, until no tick comes."""
    ticks: list[Decision] = []
    for _ in range(steps):
        decision = decide(snap, NOW)
        if decision.tick is None:
            return ticks, decision
        ticks.append(decision)
        spent = budget_after(decision, snap.agent.wake_budget)
        snap = replace(snap, agent=snap.agent.model_copy(update={"wake_budget": spent}))
    raise AssertionError("the agent never parked")


@pytest.mark.parametrize("limit", [1, 3, 25])
def test_budget_allows_exactly_limit_autonomous_reentries(limit: int) -> None:
    ticks, parked = run_until_parked(snapshot((item(1),), state=agent(current=1, limit=limit)))
    assert len(ticks) == limit
    assert parked.posture is Posture.IDLE
    assert parked.hold is Hold.WAKE_BUDGET_EXHAUSTED
    assert parked.report_budget_exhausted


def test_default_budget_is_twenty_five() -> None:
    ticks, _ = run_until_parked(snapshot((item(1),), state=make_agent(current_work_item_id=wi(1))))
    assert len(ticks) == 25


def test_fresh_input_resets_the_budget() -> None:
    spent = snapshot((item(1),), state=agent(current=1, limit=3, used=3, inbox_pending=1))
    input_tick = decide(spent, NOW)
    assert input_tick.kind is TickKind.INPUT
    reset = budget_after(input_tick, spent.agent.wake_budget)
    assert reset == WakeBudget(used=0, limit=3)
    # The input turn drains the inbox; then the agent re-enters on its own, limit times again.
    drained = spent.agent.model_copy(update={"inbox_pending": 0, "wake_budget": reset})
    ticks, parked = run_until_parked(replace(spent, agent=drained))
    assert [d.kind for d in ticks] == [TickKind.CONTINUE_CURRENT] * 3
    assert parked.posture is Posture.IDLE


EXHAUSTED_CASES = [
    pytest.param((item(1),), (), 1, Posture.IDLE, True, id="current-runnable-parks-idle"),
    pytest.param((item(2),), (), None, Posture.IDLE, True, id="queued-runnable-parks-idle"),
    pytest.param((blocked(1), item(2)), (), 1, Posture.IDLE, True, id="inspection-focus-idle"),
    pytest.param((blocked(2),), (), None, Posture.DORMANT, False, id="nothing-runnable-dormant"),
]


@pytest.mark.parametrize(("items", "waits", "current", "posture", "report"), EXHAUSTED_CASES)
def test_spent_budget_stops_autonomous_ticks(
    items: tuple[WorkItem, ...],
    waits: tuple[WaitingIntent, ...],
    current: int | None,
    posture: Posture,
    report: bool,
) -> None:
    decision = decide(snapshot(items, waits, state=agent(current=current, used=25)), NOW)
    assert decision.tick is None
    assert decision.posture is posture
    assert decision.report_budget_exhausted is report


def test_budget_exhaustion_is_reported_once() -> None:
    snap = snapshot((item(1),), state=agent(current=1, used=25))
    assert decide(snap, NOW).report_budget_exhausted
    reported = decide(replace(snap, exhaustion_reported=True), NOW)
    assert reported.posture is Posture.IDLE
    assert not reported.report_budget_exhausted


@pytest.mark.parametrize(
    ("items", "waits", "kind"),
    [
        pytest.param((item(1), blocked(2)), (triggered(1, 2),), TickKind.REVIEW_TRIGGERED, id="t"),
    ],
)
def test_fresh_input_wakes_an_agent_whose_budget_is_spent(
    items: tuple[WorkItem, ...], waits: tuple[WaitingIntent, ...], kind: TickKind
) -> None:
    decision = decide(snapshot(items, waits, state=agent(current=1, used=25)), NOW)
    assert decision.kind is kind
    assert budget_after(decision, WakeBudget(used=25)) == WakeBudget(used=0)


def test_one_unit_left_still_continues() -> None:
    decision = decide(snapshot((item(1),), state=agent(current=1, used=24)), NOW)
    assert decision.kind is TickKind.CONTINUE_CURRENT


# ---------------------------------------------------------------- tick ids and contents


def test_same_state_gives_the_same_tick_id() -> None:
    snap = snapshot((item(1),), state=agent(current=1, turn_index=4), history_seq=17)
    first, again = decide(snap, NOW), decide(snap, LATER)
    assert first.tick is not None
    assert again.tick is not None
    assert first.tick.tick_id == again.tick.tick_id
    assert again.tick.issued_at == LATER


def tick_id_of(snap: AgentSnapshot) -> str:
    decision = decide(snap, NOW)
    assert decision.tick is not None
    return decision.tick.tick_id


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(dict(history_seq=18), id="history-moved"),
        pytest.param(dict(agent=agent(current=1, turn_index=5)), id="turn-index-moved"),
        pytest.param(dict(agent=agent(current=1, turn_index=4, agent_id="agent-2")), id="agent"),
        pytest.param(dict(work_items=(item(1, revision=2),)), id="item-revision"),
    ],
)
def test_new_state_gives_a_new_tick_id(changed: dict[str, Any]) -> None:
    snap = snapshot((item(1),), state=agent(current=1, turn_index=4), history_seq=17)
    assert tick_id_of(snap) != tick_id_of(replace(snap, **changed))


def test_new_trigger_gives_a_new_review_tick_id() -> None:
    snap = snapshot((blocked(2),), (triggered(1, 2, count=1),))
    again = replace(snap, waits=(triggered(1, 2, count=2),))
    assert tick_id_of(snap) != tick_id_of(again)


def test_tick_id_names_agent_kind_and_state() -> None:
    key = tick_id_for("agent-1", TickKind.PICK_QUEUED, turn_index=3, history_seq=9)
    assert key.startswith("agent-1:pick_queued:t3:s9:")
    assert key == tick_id_for("agent-1", TickKind.PICK_QUEUED, turn_index=3, history_seq=9)
    assert key != tick_id_for("agent-1", TickKind.INPUT, turn_index=3, history_seq=9)
    assert key != tick_id_for(
        "agent-1", TickKind.PICK_QUEUED, turn_index=3, history_seq=9, cause=("x",)
    )


def test_candidates_follow_the_ranking_and_prompt_limits() -> None:
    queued = tuple(item(n, updated_at=at(minutes=n)) for n in range(2, 9))
    stuck = tuple(blocked(n, updated_at=at(minutes=n)) for n in range(10, 14))
    reports = (completed(20, result_summary="Shipped."), completed(21))
    snap = snapshot((item(1), *queued, *stuck, *reports), state=agent(current=1))
    decision = decide(snap, NOW)
    assert decision.tick is not None
    got = [(c.work_item_id, c.candidate_class, c.rank) for c in decision.tick.candidates]
    assert got == [
        (wi(1), CandidateClass.CURRENT_RUNNABLE, 1),
        *[(wi(n), CandidateClass.QUEUED_RUNNABLE, n) for n in range(2, 7)],
        *[(wi(n), CandidateClass.BLOCKED, r) for n, r in ((13, 9), (12, 10), (11, 11))],
        (wi(20), CandidateClass.COMPLETED_RECENT, 13),
    ]


def test_tick_carries_agent_and_time() -> None:
    snap = snapshot((item(1),), state=agent(current=1, loop="external"))
    decision = decide(snap, NOW)
    assert decision.loop is AgentLoop.EXTERNAL
    assert decision.tick is not None
    assert decision.tick.agent_id == decision.agent_id == "agent-1"
    assert decision.tick.issued_at == NOW


def test_decide_reads_no_clock() -> None:
    snap = snapshot((blocked(2, recheck_at=DUE),))
    assert decide(snap, at(minutes=59)).tick is None
    assert decide(snap, DUE).kind is TickKind.RECHECK_DUE


def test_recheck_tick_names_the_items_it_delivers() -> None:
    decision = decide(snapshot((blocked(2, recheck_at=DUE), blocked(3, recheck_at=DUE))), NOW)
    assert decision.tick is not None
    assert set(decision.tick.recheck_work_item_ids) == {work_item_id(2), work_item_id(3)}


# ---------------------------------------------------------------- partial snapshots


def test_class_heads_with_totals_rank_candidates_as_the_full_snapshot() -> None:
    queued = tuple(item(n, updated_at=at(minutes=n)) for n in range(2, 12))
    stuck = tuple(blocked(n, updated_at=at(minutes=n)) for n in range(20, 26))
    full = snapshot((item(1), *queued, *stuck), state=agent(current=1))
    heads = replace(
        full,
        work_items=(item(1), *queued[:5], *stuck[-3:]),
        class_totals={
            CandidateClass.CURRENT_RUNNABLE: 1,
            CandidateClass.QUEUED_RUNNABLE: 10,
            CandidateClass.BLOCKED: 6,
        },
    )
    exact, bounded = decide(full, NOW).tick, decide(heads, NOW).tick
    assert exact is not None
    assert bounded is not None
    assert bounded.candidates == exact.candidates
    assert [c.rank for c in bounded.candidates][-3:] == [12, 13, 14]


# ---------------------------------------------------------------- what follows a decision

FACTS_AT = "2025-01-06T09:00:00Z"


def ledger_events(*events: dict[str, Any], agent_id: str = "agent-1") -> dict[str, Any]:
    docs = [
        {"seq": n, "at": FACTS_AT, "work_item_id": None, "data": {}, **e}
        for n, e in enumerate(events, start=1)
    ]
    body = {"agent_id": agent_id, "command_id": "c", "events": docs}
    return {"type": "ledger_events", "version": 1, "body": body}


def test_event_facts_keep_what_the_scheduler_acts_on() -> None:
    due = "2025-01-06T10:00:00.000500Z"
    facts = event_facts(
        ledger_events(
            {"type": "turn_started", "data": {"tick_id": "t-1"}},
            {"type": "wait_triggered", "at": "2025-01-06T09:00:05Z"},
            {"type": "callback_delivered_to_inbox", "at": "2025-01-06T09:00:02Z"},
            {"type": "timer_scheduled", "work_item_id": wi(2), "data": {"due_at": due}},
            {"type": "turn_finished"},
            {"type": "wake_budget_exhausted"},
            {"type": "work_item_updated"},
        )
    )
    assert facts.started_ticks == ["t-1"]
    assert facts.trigger_at == at(seconds=2)
    assert facts.turn_finished
    assert facts.budget_exhausted == 1
    ((ref, score, seq),) = facts.timers
    assert ref == TimerRef("agent-1", work_item_id=wi(2))
    assert ref.kind is TimerKind.RECHECK
    assert score == due_ms(at(hours=1)) + 1, "rounded up: never fires before its deadline"
    assert seq == 4


@pytest.mark.parametrize(
    "envelope",
    [
        pytest.param({"type": "tick", "version": 1, "body": {}}, id="other-type"),
        pytest.param({"type": "ledger_events", "version": 2, "body": {}}, id="future-version"),
        pytest.param({"type": "ledger_events", "version": 1, "body": {}}, id="no-agent"),
        pytest.param(ledger_events({"type": "timer_scheduled", "data": {}}), id="no-due"),
        pytest.param(ledger_events(agent_id=""), id="empty-agent"),
    ],
)
def test_event_facts_refuse_what_is_not_a_ledger_event_batch(envelope: dict[str, Any]) -> None:
    with pytest.raises(CodecError):
        event_facts(envelope)


def test_facts_are_merged_per_agent_in_first_seen_order() -> None:
    one = event_facts(ledger_events({"type": "turn_finished"}, agent_id="b"))
    two = event_facts(ledger_events({"type": "turn_started", "data": {"tick_id": "x"}}))
    three = event_facts(ledger_events({"type": "wake_budget_exhausted"}, agent_id="b"))
    merged = merge_facts([one, two, three])
    assert list(merged) == ["b", "agent-1"]
    assert merged["b"].turn_finished
    assert merged["b"].budget_exhausted == 1
    assert merged["agent-1"].started_ticks == ["x"]


@pytest.mark.parametrize(
    ("ref", "kind"),
    [
        pytest.param(TimerRef("a", wait_id=wait_id(1), work_item_id=wi(1)), TimerKind.WAIT),
        pytest.param(TimerRef("a", wait_id=wait_id(1)), TimerKind.WAIT),
        pytest.param(TimerRef("a", work_item_id=wi(1)), TimerKind.RECHECK),
        pytest.param(TimerRef("a"), TimerKind.NUDGE),
    ],
)
def test_timer_members_round_trip_and_name_their_kind(ref: TimerRef, kind: TimerKind) -> None:
    assert ref.kind is kind
    assert TimerRef.parse(ref.member()) == ref
    assert ref.member() == TimerRef.parse(ref.member().decode()).member()


@pytest.mark.parametrize("raw", [b"nope", b"[]", b'{"wait_id":"w"}', b'{"agent_id":""}'])
def test_a_malformed_timer_member_is_a_codec_error(raw: bytes) -> None:
    with pytest.raises(CodecError):
        TimerRef.parse(raw)


PARK_CASES = [
    pytest.param(snapshot(), None, id="dormant-stays"),
    pytest.param(snapshot(state=agent(posture="idle")), ParkReason.NOTHING_RUNNABLE, id="idle"),
    pytest.param(
        snapshot((item(1),), state=agent(current=1, used=25)),
        ParkReason.WAKE_BUDGET_EXHAUSTED,
        id="exhausted-unreported",
    ),
    pytest.param(
        snapshot(
            (item(1),), state=agent(current=1, used=25, posture="idle"), exhaustion_reported=True
        ),
        None,
        id="exhausted-reported",
    ),
    pytest.param(snapshot((item(1),), state=agent(current=1)), None, id="ticks"),
    pytest.param(snapshot((item(1),), turn_running=True), None, id="held"),
]


@pytest.mark.parametrize(("snap", "reason"), PARK_CASES)
def test_park_only_when_it_changes_something(
    snap: AgentSnapshot, reason: ParkReason | None
) -> None:
    assert park_reason(decide(snap, NOW), snap) is reason


@pytest.mark.parametrize(
    ("fields", "finished", "recorded", "nudge"),
    [
        pytest.param(dict(turn_running=True), True, False, True, id="lease-still-held"),
        pytest.param(dict(outstanding_tick_id="t"), True, False, True, id="marker-still-held"),
        pytest.param(dict(turn_running=True), False, True, False, id="turn-still-running"),
        pytest.param(dict(turn_running=True), False, False, True, id="lease-without-turn"),
        pytest.param(dict(outstanding_tick_id="t"), False, False, False, id="tick-waiting"),
        pytest.param({}, True, False, False, id="ticked"),
    ],
)
def test_a_turn_end_that_finds_the_agent_held_looks_again(
    fields: dict[str, Any], finished: bool, recorded: bool, nudge: bool
) -> None:
    snap = snapshot((item(1),), state=agent(current=1), **fields)
    decision = decide(snap, NOW)
    assert wants_nudge(decision, turn_finished=finished, turn_recorded=recorded) is nudge


def test_recheck_upkeep_keeps_due_drops_done_and_retimes_moved() -> None:
    items = {
        i.id: i
        for i in (
            blocked(1, recheck_at=DUE),
            blocked(2, recheck_at=DUE, recheck_consumed_at=NOW),
            item(3, recheck_at=DUE),
            blocked(4, recheck_at=LATER),
            completed(5, blocked_by="x", recheck_at=LATER),
        )
    }
    upkeep = recheck_upkeep([wi(n) or "" for n in (1, 2, 3, 4, 5, 6)], items, NOW)
    assert upkeep.drop == tuple(wi(n) for n in (2, 3, 4, 5, 6))
    assert upkeep.retime == ((wi(4), LATER),)


ORPHAN_CASES = [
    pytest.param(snapshot((item(1),)), None, False, True, id="quiet-and-owed"),
    pytest.param(snapshot((item(1),)), at(hours=2, seconds=-5), False, False, id="in-grace"),
    pytest.param(snapshot((item(1),)), at(hours=1), True, False, id="timer-pending"),
    pytest.param(snapshot((item(1),), outstanding_tick_id="t"), None, False, False, id="ticked"),
    pytest.param(snapshot((item(1),), turn_running=True), None, False, False, id="running"),
    pytest.param(snapshot(), None, False, False, id="nothing-owed"),
]


@pytest.mark.parametrize(("snap", "last", "pending", "orphan"), ORPHAN_CASES)
def test_an_orphan_is_owed_a_tick_nothing_will_publish(
    snap: AgentSnapshot, last: datetime | None, pending: bool, orphan: bool
) -> None:
    found = is_orphaned(
        decide(snap, NOW),
        last_event_at=last,
        now=NOW,
        grace=timedelta(seconds=10),
        timer_pending=pending,
    )
    assert found is orphan
