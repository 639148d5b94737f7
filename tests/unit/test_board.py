"""The board renderers: org keywords from each view, checkboxes, properties, the table and JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from services.cli.board import (
    ORG_KEYWORDS,
    AgentBoard,
    board_table,
    org_keyword,
    render_json,
)
from services.cli.org.render import org_work_item, render_org
from shared.domain.readouts import work_item_view
from shared.domain.records import WaitingIntent
from shared.domain.views import CandidateClass, Readiness, SchedulingState
from tests.builders import at, make_agent, make_todo, make_wait, make_work_item, work_item_id

CURRENT = work_item_id(1)


def view(
    *, current: str | None = None, waits: tuple[WaitingIntent, ...] = (), **fields: Any
) -> dict[str, Any]:
    """The JSON a WorkItem view has on the wire (GetWorkItem, todos included)."""
    item = make_work_item(**fields)
    return work_item_view(item, waits, current, include_todo_list=True).to_json()


def blocked(current: str | None = None, **fields: Any) -> dict[str, Any]:
    return view(
        current=current, blocked_by="Needs the staging database", recheck_at=at(hours=1), **fields
    )


def waiting(wake: str, **wait_fields: Any) -> dict[str, Any]:
    extra = {"resource": "task-7"} if wake == "task_result" else {}
    if wake == "timer":
        extra = {"wake_at": at(minutes=5)}
    wait = make_wait(wake=wake, **extra, **wait_fields)
    return view(blocked_by="Waiting for something", waits=(wait,))


def render(board: AgentBoard) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(board_table(board))
    return console.export_text()


def test_current_runnable_is_doing() -> None:
    data = view(current=CURRENT)
    assert data["candidate_class"] == CandidateClass.CURRENT_RUNNABLE
    assert org_keyword(data) == "DOING"


def test_queued_runnable_is_todo() -> None:
    data = view(current=None)
    assert data["candidate_class"] == CandidateClass.QUEUED_RUNNABLE
    assert org_keyword(data) == "TODO"


@pytest.mark.parametrize("wake", ["external", "task_result", "timer", "system", "operator_input"])
def test_every_waiting_state_is_waiting(wake: str) -> None:
    data = waiting(wake)
    assert data["scheduling_state"].startswith("waiting_")
    assert org_keyword(data) == "WAITING"


def test_needs_input_plan_is_waiting_for_the_operator() -> None:
    data = view(plan_status="needs_input")
    assert data["readiness"] == Readiness.WAITING_FOR_OPERATOR
    assert org_keyword(data) == "WAITING"


def test_triggered_wait_is_still_waiting() -> None:
    data = waiting("external", trigger_count=1, last_triggered_at=at(minutes=1))
    assert data["candidate_class"] == CandidateClass.TRIGGERED_BLOCKED
    assert org_keyword(data) == "WAITING"


@pytest.mark.parametrize("current", [None, CURRENT])
def test_blocked_without_a_wait_is_blocked_even_when_current(current: str | None) -> None:
    data = blocked(current=current)
    assert data["scheduling_state"] == SchedulingState.BLOCKED
    assert data["is_current"] is (current is not None)
    assert org_keyword(data) == "BLOCKED"


@pytest.mark.parametrize("summary", [None, "Shipped."])
def test_completed_is_done_with_or_without_a_report(summary: str | None) -> None:
    data = view(state="completed", result_summary=summary)
    assert org_keyword(data) == "DONE"


def test_keywords_are_the_declared_set() -> None:
    samples = [
        view(current=CURRENT),
        view(),
        view(id=work_item_id(2)),
        waiting("external"),
        blocked(),
        view(state="completed"),
        view(state="completed", outcome="cancelled"),
    ]
    offered = work_item_id(2)
    assert {org_keyword(s, next_id=offered) for s in samples} == set(ORG_KEYWORDS)


def test_todos_become_checkboxes_with_a_progress_cookie() -> None:
    todos = [
        make_todo("Outline the changes", "completed"),
        make_todo("Draft the note", "in_progress"),
        make_todo("Polish the wording", "pending"),
    ]
    lines = org_work_item(view(current=CURRENT, todo_list=todos))
    assert lines[0] == "** DOING Ship the release notes [1/3]  :current:"
    assert "- [X] Outline the changes" in lines
    assert "- [-] Draft the note" in lines
    assert "- [ ] Polish the wording" in lines


def test_blocker_and_wait_are_properties() -> None:
    wait = make_wait(reason="Waiting for the reviewer", trigger_count=2)
    lines = org_work_item(
        view(blocked_by="Waiting for the reviewer", recheck_at=at(hours=1), waits=(wait,))
    )
    start, end = lines.index(":PROPERTIES:"), lines.index(":END:")
    props = dict(line.strip(":").split(": ", 1) for line in lines[start + 1 : end])
    assert props["BLOCKER"] == "Waiting for the reviewer"
    assert props["WAIT"].startswith(f"external {wait.id} triggers=2")
    assert props["WAIT"].endswith("— Waiting for the reviewer")
    assert props["SCHEDULING_STATE"] == "waiting_external"
    assert props["ID"] == CURRENT
    assert props["RECHECK_AT"] == "2025-01-06T10:00:00Z"


def test_absent_facts_are_not_properties() -> None:
    lines = org_work_item(view())
    assert not any(line.startswith((":BLOCKER:", ":WAIT", ":RECHECK_AT:")) for line in lines)


def test_report_is_indented_so_it_never_becomes_a_headline() -> None:
    lines = org_work_item(view(state="completed", result_summary="* not a heading\nDone."))
    quote = lines[lines.index("#+begin_quote") + 1 : lines.index("#+end_quote")]
    assert quote == ["  * not a heading", "  Done."]


def test_multiline_objective_stays_on_the_headline() -> None:
    assert org_work_item(view(objective="Line one\n* Line two"))[0].startswith(
        "** TODO Line one * Line two"
    )


def test_org_document_declares_its_keywords_and_one_headline_per_item() -> None:
    agent = make_agent(current_work_item_id=CURRENT).model_dump(mode="json")
    items = [view(current=CURRENT), view(id=work_item_id(2), state="completed")]
    text = render_org([AgentBoard(agent, items)])
    assert text.startswith(
        "#+TITLE: longrun board\n#+TODO: TODO NEXT DOING WAITING BLOCKED | DONE CANCELLED\n"
    )
    assert "longrun board apply" in text
    headlines = [line for line in text.splitlines() if line.startswith("** ")]
    assert [h.split()[1] for h in headlines] == ["DOING", "DONE"]
    assert "* agent agent-1" in text
    assert f":CURRENT: {CURRENT}" in text


def test_table_shows_keyword_id_readiness_and_now() -> None:
    agent = make_agent().model_dump(mode="json")
    items = [
        view(current=CURRENT, todo_list=[make_todo("Draft", "in_progress")]),
        waiting("external"),
    ]
    text = render(AgentBoard(agent, items))
    assert "agent agent-1" in text
    assert "DOING" in text
    assert "WAITING" in text
    assert CURRENT in text
    assert "0/1" in text
    assert "Draft" in text
    assert "Waiting for something [external]" in text


def test_table_of_an_agent_without_work_items() -> None:
    assert "(no work items)" in render(AgentBoard(make_agent().model_dump(mode="json"), []))


def test_json_round_trips_agents_and_views() -> None:
    agent = make_agent().model_dump(mode="json")
    items = [view()]
    payload = json.loads(render_json([AgentBoard(agent, items)]))
    assert payload == {"agents": [{"agent": agent, "work_items": items}]}


@pytest.mark.parametrize(("outcome", "keyword"), [("done", "DONE"), ("cancelled", "CANCELLED")])
def test_a_completed_item_shows_its_outcome(outcome: str, keyword: str) -> None:
    data = view(state="completed", outcome=outcome)
    assert org_keyword(data) == keyword
