"""Rules of what GetWorkItem and ListWorkItems return (docs/contract.md §3): the WorkItemView
and every ListWorkItems filter, in ranking order, with its counts and limit."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.readouts import (
    get_result,
    list_result,
    work_item_json,
    work_item_view,
    work_item_view_json,
)
from shared.domain.records import NoteCovers, ProcessNote, WaitingIntent, WakeKind, WorkItem
from shared.domain.views import ListFilter
from tests import strategies as S
from tests.builders import at, make_todo, make_wait, make_work_item, wait_id, work_item_id

RUNNABLE_A = work_item_id(1)
RUNNABLE_B = work_item_id(2)
BLOCKED = work_item_id(3)
NEEDS_INPUT = work_item_id(4)
DONE_REPORTED = work_item_id(5)
DONE_SILENT = work_item_id(6)
TRIGGERED = work_item_id(7)
NAMES = {RUNNABLE_A: "runnable", BLOCKED: "blocked", NEEDS_INPUT: "needs_input"}


def board() -> tuple[list[WorkItem], list[WaitingIntent]]:
    """One item of every readiness, updated at distinct minutes so the order is fixed."""
    items = [
        make_work_item(id=RUNNABLE_A, updated_at=at(minutes=1)),
        make_work_item(id=RUNNABLE_B, updated_at=at(minutes=2)),
        make_work_item(id=BLOCKED, blocked_by="Needs a key", updated_at=at(minutes=3)),
        make_work_item(id=NEEDS_INPUT, plan_status="needs_input", updated_at=at(minutes=4)),
        make_work_item(
            id=DONE_REPORTED, state="completed", result_summary="Shipped.", updated_at=at(minutes=5)
        ),
        make_work_item(id=DONE_SILENT, state="completed", updated_at=at(minutes=6)),
        make_work_item(id=TRIGGERED, blocked_by="Waiting for CI", updated_at=at(minutes=7)),
    ]
    waits = [
        make_wait(work_item_id=TRIGGERED, trigger_count=1, last_triggered_at=at(minutes=8)),
    ]
    return items, waits


def listed(
    wanted: ListFilter, current: str | None, *, limit: int = 20, include_todo_list: bool = False
) -> dict[str, Any]:
    items, waits = board()
    return list_result(
        items, waits, current, wanted=wanted, limit=limit, include_todo_list=include_todo_list
    )


FILTER_ROWS: list[tuple[ListFilter, str | None, list[str]]] = [
    (
        ListFilter.ALL,
        RUNNABLE_A,
        [RUNNABLE_A, TRIGGERED, RUNNABLE_B, NEEDS_INPUT, BLOCKED, DONE_REPORTED, DONE_SILENT],
    ),
    (ListFilter.OPEN, RUNNABLE_A, [RUNNABLE_A, TRIGGERED, RUNNABLE_B, NEEDS_INPUT, BLOCKED]),
    (ListFilter.COMPLETED, RUNNABLE_A, [DONE_REPORTED, DONE_SILENT]),
    (ListFilter.CURRENT, RUNNABLE_A, [RUNNABLE_A]),
    (ListFilter.CURRENT, BLOCKED, [BLOCKED]),
    (ListFilter.CURRENT, None, []),
    (ListFilter.QUEUED, RUNNABLE_A, [RUNNABLE_B]),
    (ListFilter.QUEUED, None, [RUNNABLE_A, RUNNABLE_B]),
    (ListFilter.QUEUED, BLOCKED, [RUNNABLE_A, RUNNABLE_B]),
    (ListFilter.BLOCKED, RUNNABLE_A, [TRIGGERED, BLOCKED]),
    (ListFilter.BLOCKED, BLOCKED, [TRIGGERED]),
    (ListFilter.WAITING_FOR_OPERATOR, RUNNABLE_A, [NEEDS_INPUT]),
    (ListFilter.WAITING_FOR_OPERATOR, NEEDS_INPUT, [NEEDS_INPUT]),
    (ListFilter.RUNNABLE, RUNNABLE_A, [RUNNABLE_A, RUNNABLE_B]),
    (ListFilter.RUNNABLE, None, [RUNNABLE_A, RUNNABLE_B]),
]


@pytest.mark.parametrize(
    ("wanted", "current", "expected"),
    FILTER_ROWS,
    ids=[f"{w.value}-current-{NAMES[c] if c else 'none'}" for w, c, _ in FILTER_ROWS],
)
def test_list_filter_selects_in_ranking_order(
    wanted: ListFilter, current: str | None, expected: list[str]
) -> None:
    result = listed(wanted, current)
    assert [view["id"] for view in result["work_items"]] == expected
    assert result["filter"] == wanted.value
    assert result["returned"] == result["total_matching"] == len(expected)


def test_every_list_filter_is_tested() -> None:
    assert {wanted for wanted, _, _ in FILTER_ROWS} == set(ListFilter)


def test_limit_cuts_the_page_but_not_the_total() -> None:
    result = listed(ListFilter.ALL, RUNNABLE_A, limit=3)
    assert result["returned"] == 3
    assert result["total_matching"] == 7
    assert [view["id"] for view in result["work_items"]] == [RUNNABLE_A, TRIGGERED, RUNNABLE_B]


def test_limit_above_the_match_count_returns_every_match() -> None:
    result = listed(ListFilter.OPEN, RUNNABLE_A, limit=100)
    assert result["returned"] == result["total_matching"] == 5


def test_list_result_has_exactly_the_contract_keys() -> None:
    assert set(listed(ListFilter.ALL, None)) == {
        "filter",
        "returned",
        "total_matching",
        "work_items",
    }


def test_list_result_of_no_items_is_empty() -> None:
    result = list_result([], [], None, wanted=ListFilter.ALL, limit=20, include_todo_list=False)
    assert result == {"filter": "all", "returned": 0, "total_matching": 0, "work_items": []}


def test_list_omits_todo_list_unless_asked() -> None:
    for view in listed(ListFilter.ALL, RUNNABLE_A)["work_items"]:
        assert "todo_list" not in view
    for view in listed(ListFilter.ALL, RUNNABLE_A, include_todo_list=True)["work_items"]:
        assert view["todo_list"] == []


def test_list_views_carry_their_derived_facts() -> None:
    views = {v["id"]: v for v in listed(ListFilter.ALL, RUNNABLE_A)["work_items"]}
    assert views[RUNNABLE_A]["candidate_class"] == "current_runnable"
    assert views[RUNNABLE_A]["is_current"] is True
    assert views[TRIGGERED]["candidate_class"] == "triggered_blocked"
    assert views[TRIGGERED]["scheduling_state"] == "waiting_external"
    assert [w["work_item_id"] for w in views[TRIGGERED]["active_waits"]] == [TRIGGERED]
    assert views[NEEDS_INPUT]["readiness"] == "waiting_for_operator"
    assert views[DONE_SILENT]["readiness"] == "completed"


# ------------------------------------------------------------------ GetWorkItem

RECORD_KEYS = set(make_work_item().model_dump())
DERIVED_KEYS = {
    "scheduling_state",
    "readiness",
    "candidate_class",
    "is_current",
    "current_todo",
    "active_waits",
}


def todo_item() -> WorkItem:
    return make_work_item(
        todo_list=[make_todo("Draft", "completed"), make_todo("Review"), make_todo("Publish")]
    )


def test_get_result_names_the_current_item_and_the_view() -> None:
    result = get_result(make_work_item(), [], work_item_id(9), include_todo_list=False)
    assert set(result) == {"current_work_item_id", "work_item"}
    assert result["current_work_item_id"] == work_item_id(9)
    assert result["work_item"]["id"] == work_item_id(1)
    assert result["work_item"]["is_current"] is False


def test_view_is_the_record_without_todo_list_plus_derived_facts() -> None:
    view = get_result(todo_item(), [], None, include_todo_list=False)["work_item"]
    assert set(view) == (RECORD_KEYS - {"todo_list", "process_notes"}) | DERIVED_KEYS


def test_view_includes_todo_list_when_asked() -> None:
    view = get_result(todo_item(), [], None, include_todo_list=True)["work_item"]
    assert set(view) == (RECORD_KEYS - {"process_notes"}) | DERIVED_KEYS
    assert [t["text"] for t in view["todo_list"]] == ["Draft", "Review", "Publish"]


def test_view_includes_process_notes_only_when_asked() -> None:
    note = ProcessNote(
        id="note_" + "0" * 26,
        work_item_id=work_item_id(1),
        text="the vault code is 7319",
        covers=NoteCovers(from_turn="turn_1", to_turn="turn_2"),
        created_at=at(),
    )
    item = make_work_item(process_notes=(note,))
    shown = get_result(item, [], None, include_todo_list=False, include_process_notes=True)
    assert [n["text"] for n in shown["work_item"]["process_notes"]] == ["the vault code is 7319"]
    hidden = get_result(item, [], None, include_todo_list=False)
    assert "process_notes" not in hidden["work_item"]


def test_view_shows_current_todo_even_without_the_list() -> None:
    view = get_result(todo_item(), [], None, include_todo_list=False)["work_item"]
    assert view["current_todo"] == {"text": "Review", "state": "pending"}


def test_view_of_an_item_with_no_open_todo_has_no_current_todo() -> None:
    view = get_result(make_work_item(), [], None, include_todo_list=False)["work_item"]
    assert view["current_todo"] is None


def test_view_of_the_current_runnable_item() -> None:
    view = get_result(make_work_item(), [], work_item_id(1), include_todo_list=False)["work_item"]
    assert view["is_current"] is True
    assert view["scheduling_state"] == "runnable"
    assert view["readiness"] == "runnable"
    assert view["candidate_class"] == "current_runnable"


def test_view_lists_only_the_items_active_waits_oldest_first() -> None:
    item = make_work_item(blocked_by="Waiting")
    waits = [
        make_wait(id=wait_id(1), wake=WakeKind.TIMER, created_at=at(minutes=2)),
        make_wait(id=wait_id(2), status="cancelled", cancelled_at=at(minutes=1)),
        make_wait(id=wait_id(3), work_item_id=work_item_id(2)),
        make_wait(id=wait_id(4), work_item_id=None),
        make_wait(id=wait_id(5), wake=WakeKind.SYSTEM, created_at=at(minutes=1)),
    ]
    view = get_result(item, waits, None, include_todo_list=False)["work_item"]
    assert [w["id"] for w in view["active_waits"]] == [wait_id(5), wait_id(1)]
    assert view["scheduling_state"] == "waiting_timer"
    assert view["readiness"] == "blocked"


def test_view_is_plain_json() -> None:
    item = make_work_item(blocked_by="Waiting", recheck_at=at(hours=1))
    wait = make_wait(trigger_count=2, last_triggered_at=at(minutes=3))
    result = get_result(item, [wait], None, include_todo_list=True)
    assert json.loads(json.dumps(result)) == result
    assert result["work_item"]["recheck_at"].startswith("2025-01-06T10:00:00")


@settings(deadline=None, max_examples=150)
@given(
    item=S.work_items(agent_id="agent-view"),
    waits=st.lists(S.waiting_intents(agent_id="agent-view"), max_size=4),
    is_current=st.booleans(),
    include=st.booleans(),
)
def test_view_json_agrees_with_the_view_model(
    item: WorkItem, waits: list[WaitingIntent], is_current: bool, include: bool
) -> None:
    """The ledger's direct JSON form carries the same derived facts as the WorkItemView."""
    waits = [
        w.model_copy(update={"work_item_id": item.id}) if i % 2 else w for i, w in enumerate(waits)
    ]
    current = item.id if is_current else None
    view = work_item_view(item, waits, current, include_todo_list=include)
    body = work_item_view_json(item, waits, current, include_todo_list=include)
    assert body == view.to_json()
    assert body["scheduling_state"] == view.scheduling_state.value
    assert body["readiness"] == view.readiness.value
    assert body["candidate_class"] == view.candidate_class.value
    assert body["is_current"] is view.is_current
    assert body["active_waits"] == [w.model_dump(mode="json") for w in view.active_waits]
    assert ("todo_list" in body) is include


def test_work_item_json_is_the_dump_and_a_changed_copy_is_dumped_afresh() -> None:
    item = make_work_item(id=RUNNABLE_A)
    first = work_item_json(item)
    assert first == item.model_dump(mode="json")
    first.pop("todo_list")
    first["objective"] = "changed by a caller"
    again = work_item_json(item)
    assert again == item.model_dump(mode="json")
    revised = item.model_copy(update={"objective": "A new objective"})
    assert work_item_json(revised)["objective"] == "A new objective"
    assert work_item_json(item)["objective"] == item.objective
