"""Rules of the derived views (docs/contract.md §2): scheduling state, readiness, candidate
class, current todo, ranking and prompt limits."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.records import WaitingIntent, WakeKind, WorkItem
from shared.domain.views import (
    PROMPT_LIMITS,
    CandidateClass,
    Ranked,
    Readiness,
    SchedulingState,
    candidate_class,
    classify,
    current_todo,
    last_triggered_at,
    prompt_candidates,
    rank,
    readiness,
    readiness_of,
    scheduling_state,
)
from tests import strategies as S
from tests.builders import at, make_todo, make_wait, make_work_item, wait_id, work_item_id

WI = work_item_id(1)
OTHER = work_item_id(2)

WAKE_STATES = [
    (WakeKind.OPERATOR_INPUT, SchedulingState.WAITING_OPERATOR),
    (WakeKind.TASK_RESULT, SchedulingState.WAITING_TASK),
    (WakeKind.EXTERNAL, SchedulingState.WAITING_EXTERNAL),
    (WakeKind.TIMER, SchedulingState.WAITING_TIMER),
    (WakeKind.SYSTEM, SchedulingState.WAITING_SYSTEM),
]


def triggered_wait(n: int = 1, **overrides: Any) -> WaitingIntent:
    fields: dict[str, Any] = {"id": wait_id(n), "trigger_count": 1, "last_triggered_at": at()}
    fields.update(overrides)
    return make_wait(**fields)


# ------------------------------------------------------------------ scheduling state


def test_open_item_with_no_wait_and_no_blocker_is_runnable() -> None:
    assert scheduling_state(make_work_item(), []) is SchedulingState.RUNNABLE


def test_needs_input_plan_waits_for_operator() -> None:
    item = make_work_item(plan_status="needs_input")
    assert scheduling_state(item, []) is SchedulingState.WAITING_OPERATOR


@pytest.mark.parametrize(("wake", "expected"), WAKE_STATES)
def test_active_wait_sets_the_waiting_state_of_its_kind(
    wake: WakeKind, expected: SchedulingState
) -> None:
    item = make_work_item(blocked_by="waiting")
    assert scheduling_state(item, [make_wait(wake=wake)]) is expected


def test_blocker_without_wait_is_blocked() -> None:
    item = make_work_item(blocked_by="Needs the staging credentials")
    assert scheduling_state(item, []) is SchedulingState.BLOCKED


def test_completed_item_is_completed_whatever_else_holds() -> None:
    item = make_work_item(state="completed", plan_status="needs_input", blocked_by="stale")
    waits = [make_wait(id=wait_id(n), wake=wake) for n, (wake, _) in enumerate(WAKE_STATES)]
    assert scheduling_state(item, waits) is SchedulingState.COMPLETED


# One row per precedence step, earliest first; each row says how to make that condition hold.
CONDITIONS: list[tuple[str, dict[str, Any], WakeKind | None, SchedulingState]] = [
    ("completed", {"state": "completed"}, None, SchedulingState.COMPLETED),
    ("needs_input", {"plan_status": "needs_input"}, None, SchedulingState.WAITING_OPERATOR),
    *[(f"{wake}_wait", {}, wake, state) for wake, state in WAKE_STATES],
    ("blocked_by", {"blocked_by": "waiting on legal"}, None, SchedulingState.BLOCKED),
]
PAIRS = list(combinations(CONDITIONS, 2))


@pytest.mark.parametrize(("earlier", "later"), PAIRS, ids=[f"{a[0]}-over-{b[0]}" for a, b in PAIRS])
def test_earlier_condition_wins_over_a_later_one(
    earlier: tuple[str, dict[str, Any], WakeKind | None, SchedulingState],
    later: tuple[str, dict[str, Any], WakeKind | None, SchedulingState],
) -> None:
    item = make_work_item(**earlier[1], **later[1])
    waits = [
        make_wait(id=wait_id(n), wake=wake)
        for n, wake in enumerate((earlier[2], later[2]))
        if wake is not None
    ]
    assert scheduling_state(item, waits) is earlier[3]


@pytest.mark.parametrize("wake", [wake for wake, _ in WAKE_STATES])
def test_cancelled_wait_is_ignored(wake: WakeKind) -> None:
    cancelled = make_wait(wake=wake, status="cancelled", cancelled_at=at(minutes=1))
    assert scheduling_state(make_work_item(), [cancelled]) is SchedulingState.RUNNABLE


@pytest.mark.parametrize("wake", [wake for wake, _ in WAKE_STATES])
def test_cancelled_wait_leaves_a_blocker_blocked(wake: WakeKind) -> None:
    item = make_work_item(blocked_by="still stuck")
    cancelled = make_wait(wake=wake, status="cancelled", cancelled_at=at(minutes=1))
    assert scheduling_state(item, [cancelled]) is SchedulingState.BLOCKED


@pytest.mark.parametrize("wake", [wake for wake, _ in WAKE_STATES])
def test_wait_of_another_item_is_ignored(wake: WakeKind) -> None:
    theirs = make_wait(wake=wake, work_item_id=OTHER)
    assert scheduling_state(make_work_item(), [theirs]) is SchedulingState.RUNNABLE


@pytest.mark.parametrize("wake", [wake for wake, _ in WAKE_STATES])
def test_agent_scope_wait_is_ignored(wake: WakeKind) -> None:
    agent_scope = make_wait(wake=wake, work_item_id=None)
    assert scheduling_state(make_work_item(), [agent_scope]) is SchedulingState.RUNNABLE


def test_trigger_does_not_unblock() -> None:
    item = make_work_item(blocked_by="waiting for the build")
    assert scheduling_state(item, [triggered_wait()]) is SchedulingState.WAITING_EXTERNAL


# ------------------------------------------------------------------ readiness

READINESS_ROWS = [
    (SchedulingState.COMPLETED, Readiness.COMPLETED),
    (SchedulingState.WAITING_OPERATOR, Readiness.WAITING_FOR_OPERATOR),
    (SchedulingState.WAITING_TASK, Readiness.BLOCKED),
    (SchedulingState.WAITING_EXTERNAL, Readiness.BLOCKED),
    (SchedulingState.WAITING_TIMER, Readiness.BLOCKED),
    (SchedulingState.WAITING_SYSTEM, Readiness.BLOCKED),
    (SchedulingState.BLOCKED, Readiness.BLOCKED),
    (SchedulingState.RUNNABLE, Readiness.RUNNABLE),
]


def test_readiness_table_covers_every_scheduling_state() -> None:
    assert {state for state, _ in READINESS_ROWS} == set(SchedulingState)


@pytest.mark.parametrize(("state", "expected"), READINESS_ROWS)
def test_readiness_of_each_scheduling_state(state: SchedulingState, expected: Readiness) -> None:
    assert readiness_of(state) is expected


@pytest.mark.parametrize(
    ("overrides", "waits", "expected"),
    [
        ({}, [], Readiness.RUNNABLE),
        ({"plan_status": "needs_input"}, [], Readiness.WAITING_FOR_OPERATOR),
        (
            {"blocked_by": "x"},
            [make_wait(wake=WakeKind.OPERATOR_INPUT)],
            Readiness.WAITING_FOR_OPERATOR,
        ),
        ({"blocked_by": "x"}, [make_wait(wake=WakeKind.TIMER)], Readiness.BLOCKED),
        ({"blocked_by": "x"}, [], Readiness.BLOCKED),
        ({"state": "completed"}, [], Readiness.COMPLETED),
    ],
    ids=["runnable", "needs_input", "operator_wait", "timer_wait", "blocker", "completed"],
)
def test_readiness_of_an_item(
    overrides: dict[str, Any], waits: list[WaitingIntent], expected: Readiness
) -> None:
    assert readiness(make_work_item(**overrides), waits) is expected


# ------------------------------------------------------------------ candidate class

CLASS_ROWS: list[tuple[str, dict[str, Any], list[WaitingIntent], str | None, CandidateClass]] = [
    (
        "completed_with_summary",
        {"state": "completed", "result_summary": "Shipped."},
        [],
        None,
        CandidateClass.COMPLETED_RECENT,
    ),
    ("completed_without_summary", {"state": "completed"}, [], None, CandidateClass.COMPLETED),
    (
        "completed_beats_everything",
        {"state": "completed", "result_summary": "Done.", "blocked_by": "x"},
        [triggered_wait()],
        WI,
        CandidateClass.COMPLETED_RECENT,
    ),
    ("current_runnable", {}, [], WI, CandidateClass.CURRENT_RUNNABLE),
    ("queued_when_another_is_current", {}, [], OTHER, CandidateClass.QUEUED_RUNNABLE),
    ("queued_when_nothing_is_current", {}, [], None, CandidateClass.QUEUED_RUNNABLE),
    (
        "triggered_blocked",
        {"blocked_by": "x"},
        [triggered_wait()],
        None,
        CandidateClass.TRIGGERED_BLOCKED,
    ),
    (
        "triggered_blocked_when_current",
        {"blocked_by": "x"},
        [triggered_wait()],
        WI,
        CandidateClass.TRIGGERED_BLOCKED,
    ),
    (
        "triggered_operator_wait_beats_waiting_for_operator",
        {"blocked_by": "x"},
        [triggered_wait(wake=WakeKind.OPERATOR_INPUT)],
        None,
        CandidateClass.TRIGGERED_BLOCKED,
    ),
    (
        "triggered_needs_input_beats_waiting_for_operator",
        {"blocked_by": "x", "plan_status": "needs_input"},
        [triggered_wait()],
        None,
        CandidateClass.TRIGGERED_BLOCKED,
    ),
    (
        "triggered_wait_without_blocker_is_blocked",
        {},
        [triggered_wait(wake=WakeKind.TIMER)],
        None,
        CandidateClass.BLOCKED,
    ),
    (
        "cancelled_triggered_wait_is_not_a_trigger",
        {"blocked_by": "x"},
        [triggered_wait(status="cancelled", cancelled_at=at(minutes=1))],
        None,
        CandidateClass.BLOCKED,
    ),
    (
        "triggered_wait_of_another_item_is_not_a_trigger",
        {"blocked_by": "x"},
        [triggered_wait(work_item_id=OTHER)],
        None,
        CandidateClass.BLOCKED,
    ),
    (
        "untriggered_wait_is_blocked",
        {"blocked_by": "x"},
        [make_wait()],
        None,
        CandidateClass.BLOCKED,
    ),
    (
        "needs_input_waits_for_operator",
        {"plan_status": "needs_input"},
        [],
        None,
        CandidateClass.WAITING_FOR_OPERATOR,
    ),
    (
        "operator_wait_waits_for_operator",
        {"blocked_by": "x"},
        [make_wait(wake=WakeKind.OPERATOR_INPUT)],
        None,
        CandidateClass.WAITING_FOR_OPERATOR,
    ),
    (
        "current_needs_input_waits_for_operator",
        {"plan_status": "needs_input"},
        [],
        WI,
        CandidateClass.WAITING_FOR_OPERATOR,
    ),
    ("blocker", {"blocked_by": "x"}, [], None, CandidateClass.BLOCKED),
    ("blocked_item_that_is_current", {"blocked_by": "x"}, [], WI, CandidateClass.BLOCKED),
    (
        "timer_wait_that_is_current",
        {"blocked_by": "x"},
        [make_wait(wake=WakeKind.TIMER)],
        WI,
        CandidateClass.BLOCKED,
    ),
]


@pytest.mark.parametrize(
    ("overrides", "waits", "current", "expected"),
    [row[1:] for row in CLASS_ROWS],
    ids=[row[0] for row in CLASS_ROWS],
)
def test_candidate_class_first_match_wins(
    overrides: dict[str, Any],
    waits: list[WaitingIntent],
    current: str | None,
    expected: CandidateClass,
) -> None:
    assert candidate_class(make_work_item(**overrides), waits, current) is expected


def test_every_candidate_class_is_reachable() -> None:
    assert {row[-1] for row in CLASS_ROWS} == set(CandidateClass)


# ------------------------------------------------------------------ current todo


@pytest.mark.parametrize(
    ("states", "expected_index"),
    [
        ([], None),
        (["completed", "completed"], None),
        (["pending"], 0),
        (["completed", "pending", "pending"], 1),
        (["pending", "in_progress"], 1),
        (["pending", "completed", "in_progress", "in_progress"], 2),
        (["in_progress", "in_progress"], 0),
    ],
)
def test_current_todo_is_first_in_progress_else_first_pending(
    states: list[str], expected_index: int | None
) -> None:
    item = make_work_item(todo_list=[make_todo(f"todo {i}", s) for i, s in enumerate(states)])
    found = current_todo(item)
    if expected_index is None:
        assert found is None
    else:
        assert found == item.todo_list[expected_index]


# ------------------------------------------------------------------ ranking


def ids_of(ranked: list[Ranked]) -> list[str]:
    return [entry.item.id for entry in ranked]


def one_of_each_class() -> tuple[list[WorkItem], list[WaitingIntent], str]:
    """Items 1..7 in ranking order of their class; item 1 is current."""
    items = [
        make_work_item(id=work_item_id(1)),
        make_work_item(id=work_item_id(2), blocked_by="x"),
        make_work_item(id=work_item_id(3)),
        make_work_item(id=work_item_id(4), plan_status="needs_input"),
        make_work_item(id=work_item_id(5), blocked_by="x"),
        make_work_item(id=work_item_id(6), state="completed", result_summary="Done."),
        make_work_item(id=work_item_id(7), state="completed"),
    ]
    return items, [triggered_wait(work_item_id=work_item_id(2))], work_item_id(1)


def test_classes_rank_in_contract_order() -> None:
    items, waits, current = one_of_each_class()
    # Newest-updated first, so no class wins by recency alone.
    items = [i.model_copy(update={"updated_at": at(minutes=n)}) for n, i in enumerate(items)]
    ranked = rank(reversed(items), waits, current)
    assert [e.candidate_class for e in ranked] == [
        CandidateClass.CURRENT_RUNNABLE,
        CandidateClass.TRIGGERED_BLOCKED,
        CandidateClass.QUEUED_RUNNABLE,
        CandidateClass.WAITING_FOR_OPERATOR,
        CandidateClass.BLOCKED,
        CandidateClass.COMPLETED_RECENT,
        CandidateClass.COMPLETED,
    ]


def test_rank_does_not_depend_on_input_order() -> None:
    items, waits, current = one_of_each_class()
    shuffled = [items[i] for i in (4, 0, 6, 2, 5, 1, 3)]
    assert ids_of(rank(shuffled, waits, current)) == ids_of(rank(items, waits, current))


def triggered_item(n: int, *, triggered: int, updated: int) -> tuple[WorkItem, WaitingIntent]:
    item = make_work_item(id=work_item_id(n), blocked_by="x", updated_at=at(minutes=updated))
    wait = triggered_wait(n, work_item_id=item.id, last_triggered_at=at(minutes=triggered))
    return item, wait


def test_triggered_rank_by_last_triggered_at_newest_first() -> None:
    pairs = [triggered_item(1, triggered=5, updated=9), triggered_item(2, triggered=7, updated=1)]
    ranked = rank([p[0] for p in pairs], [p[1] for p in pairs], None)
    assert ids_of(ranked) == [work_item_id(2), work_item_id(1)]


def test_triggered_at_the_same_time_rank_by_updated_at_newest_first() -> None:
    pairs = [triggered_item(1, triggered=5, updated=1), triggered_item(2, triggered=5, updated=2)]
    ranked = rank([p[0] for p in pairs], [p[1] for p in pairs], None)
    assert ids_of(ranked) == [work_item_id(2), work_item_id(1)]


def test_triggered_rank_uses_the_latest_trigger_of_the_item() -> None:
    early, _ = triggered_item(1, triggered=0, updated=0)
    waits = [
        triggered_wait(1, work_item_id=early.id, last_triggered_at=at(minutes=1)),
        triggered_wait(2, work_item_id=early.id, last_triggered_at=at(minutes=9)),
    ]
    other, other_wait = triggered_item(2, triggered=5, updated=0)
    ranked = rank([other, early], [*waits, other_wait], None)
    assert ids_of(ranked) == [early.id, other.id]


def test_queued_rank_by_updated_at_oldest_first() -> None:
    items = [
        make_work_item(id=work_item_id(1), updated_at=at(minutes=3)),
        make_work_item(id=work_item_id(2), updated_at=at(minutes=1)),
        make_work_item(id=work_item_id(3), updated_at=at(minutes=2)),
    ]
    assert ids_of(rank(items, [], None)) == [work_item_id(2), work_item_id(3), work_item_id(1)]


def test_queued_updated_together_rank_by_created_at_oldest_first() -> None:
    items = [
        make_work_item(id=work_item_id(1), created_at=at(minutes=-1), updated_at=at(minutes=5)),
        make_work_item(id=work_item_id(2), created_at=at(minutes=-2), updated_at=at(minutes=5)),
    ]
    assert ids_of(rank(items, [], None)) == [work_item_id(2), work_item_id(1)]


def test_queued_order_resolves_microseconds() -> None:
    items = [
        make_work_item(id=work_item_id(1), updated_at=at(microseconds=2)),
        make_work_item(id=work_item_id(2), updated_at=at(microseconds=1)),
    ]
    assert ids_of(rank(items, [], None)) == [work_item_id(2), work_item_id(1)]


OTHER_CLASSES = {
    "waiting_for_operator": {"plan_status": "needs_input"},
    "blocked": {"blocked_by": "x"},
    "completed_recent": {"state": "completed", "result_summary": "Done."},
    "completed": {"state": "completed"},
}


@pytest.mark.parametrize("overrides", OTHER_CLASSES.values(), ids=OTHER_CLASSES.keys())
def test_other_classes_rank_by_updated_at_newest_first(overrides: dict[str, Any]) -> None:
    items = [
        make_work_item(id=work_item_id(n), updated_at=at(minutes=m), **overrides)
        for n, m in ((1, 1), (2, 3), (3, 2))
    ]
    assert ids_of(rank(items, [], None)) == [work_item_id(2), work_item_id(3), work_item_id(1)]


TIE_CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "triggered_blocked": ({"blocked_by": "x"}, True),
    "queued_runnable": ({}, False),
    **{name: (overrides, False) for name, overrides in OTHER_CLASSES.items()},
}


@pytest.mark.parametrize(("overrides", "triggered"), TIE_CASES.values(), ids=TIE_CASES.keys())
def test_full_ties_rank_by_id(overrides: dict[str, Any], triggered: bool) -> None:
    ns = (3, 1, 2)
    items = [make_work_item(id=work_item_id(n), **overrides) for n in ns]
    waits = [triggered_wait(n, work_item_id=work_item_id(n)) for n in ns] if triggered else []
    assert ids_of(rank(items, waits, None)) == [work_item_id(n) for n in (1, 2, 3)]


# ------------------------------------------------------------------ prompt limits


def test_prompt_limits_are_the_contract_numbers() -> None:
    assert PROMPT_LIMITS[CandidateClass.TRIGGERED_BLOCKED] == 3
    assert PROMPT_LIMITS[CandidateClass.QUEUED_RUNNABLE] == 5
    assert PROMPT_LIMITS[CandidateClass.BLOCKED] == 3
    assert PROMPT_LIMITS[CandidateClass.COMPLETED_RECENT] == 3


def crowded_board() -> tuple[list[WorkItem], list[WaitingIntent], str]:
    """One current item (id 1) and more than enough items of every other class."""
    items = [make_work_item(id=work_item_id(1))]
    waits = []
    shapes: list[tuple[int, dict[str, Any]]] = [
        (10, {"blocked_by": "x"}),  # triggered
        (20, {}),  # queued
        (30, {"blocked_by": "x"}),  # blocked
        (40, {"plan_status": "needs_input"}),
        (50, {"state": "completed", "result_summary": "Done."}),
        (60, {"state": "completed"}),
    ]
    for base, overrides in shapes:
        for k in range(8):
            item_id = work_item_id(base + k)
            items.append(make_work_item(id=item_id, updated_at=at(minutes=k), **overrides))
            if base == 10:
                waits.append(triggered_wait(base + k, work_item_id=item_id))
    return items, waits, work_item_id(1)


def test_prompt_candidates_cut_each_class_to_its_limit() -> None:
    items, waits, current = crowded_board()
    chosen = prompt_candidates(rank(items, waits, current))
    assert {cls: len(entries) for cls, entries in chosen.items()} == {
        CandidateClass.CURRENT_RUNNABLE: 1,
        CandidateClass.TRIGGERED_BLOCKED: 3,
        CandidateClass.QUEUED_RUNNABLE: 5,
        CandidateClass.WAITING_FOR_OPERATOR: 3,
        CandidateClass.BLOCKED: 3,
        CandidateClass.COMPLETED_RECENT: 3,
    }


def test_prompt_candidates_keep_the_top_of_each_class() -> None:
    items, waits, current = crowded_board()
    ranked = rank(items, waits, current)
    chosen = prompt_candidates(ranked)
    for cls, entries in chosen.items():
        in_class = [e for e in ranked if e.candidate_class is cls]
        assert entries == in_class[: len(entries)]


def test_completed_items_without_a_report_never_reach_the_prompt() -> None:
    items = [make_work_item(id=work_item_id(n), state="completed") for n in range(1, 4)]
    assert prompt_candidates(rank(items, [], None)) == {}


def test_prompt_shows_at_most_one_current_item() -> None:
    entries = [
        Ranked(
            make_work_item(id=work_item_id(n)),
            CandidateClass.CURRENT_RUNNABLE,
            Readiness.RUNNABLE,
            None,
        )
        for n in (1, 2)
    ]
    assert prompt_candidates(entries) == {CandidateClass.CURRENT_RUNNABLE: entries[:1]}


def test_prompt_omits_empty_classes() -> None:
    chosen = prompt_candidates(rank([make_work_item()], [], None))
    assert list(chosen) == [CandidateClass.QUEUED_RUNNABLE]


@settings(deadline=None, max_examples=150)
@given(
    items=st.lists(S.work_items(agent_id="agent-views"), min_size=1, max_size=4),
    waits=st.lists(S.waiting_intents(agent_id="agent-views"), max_size=5),
    pick=st.integers(min_value=0, max_value=4),
)
def test_classify_agrees_with_the_per_item_functions(
    items: list[WorkItem], waits: list[WaitingIntent], pick: int
) -> None:
    """classify derives each fact once per item; the result is what the one-fact functions say."""
    waits = [
        w.model_copy(update={"work_item_id": items[n % len(items)].id}) if n % 3 else w
        for n, w in enumerate(waits)
    ]
    current = items[pick].id if pick < len(items) else None
    for entry, item in zip(classify(items, waits, current), items, strict=True):
        assert entry.item is item
        assert entry.candidate_class is candidate_class(item, waits, current)
        assert entry.readiness is readiness(item, waits)
        assert entry.last_triggered_at == last_triggered_at(item, waits)
