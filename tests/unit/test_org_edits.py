"""The edit → command mapping of `longrun board apply`, pure: a keyword moved to NEXT or DOING
picks, the current item moved to TODO is put down, CANCELLED cancels, a new headline asks the
agent; everything else is refused with its line; an edit that already holds is unchanged; and
the `* verdicts` block matches exactly one headline or refuses."""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.cli.board import AgentBoard
from services.cli.org.apply import read_document
from services.cli.org.edits import plan_edits
from services.cli.org.keywords import KeywordSet
from services.cli.org.moves import Action, EditResult, LiveBoard, Move, Status
from services.cli.org.render import render_org
from shared.domain.readouts import work_item_view
from shared.domain.records import WorkItem
from tests.builders import at, make_agent, make_work_item, work_item_id

A, B, C, D, X, OTHER = (work_item_id(n) for n in range(1, 7))
EDITORIAL = "ASSIGNED RESEARCH WRITING | PUBLISHED KILLED"
ORG_EDIT = "operator: org edit"


def items() -> list[WorkItem]:
    """agent-1: A current (DOING), B (NEXT), C (TODO), D done, X cancelled; agent-2: OTHER."""
    return [
        make_work_item(id=A, objective="Write the report", updated_at=at(minutes=3)),
        make_work_item(id=B, objective="Check the sources", updated_at=at(minutes=1)),
        make_work_item(id=C, objective="Ask for review", updated_at=at(minutes=2)),
        make_work_item(id=D, objective="Old task", state="completed", outcome="done"),
        make_work_item(id=X, objective="Dropped task", state="completed", outcome="cancelled"),
        make_work_item(id=OTHER, objective="Other agent's task", agent_id="agent-2"),
    ]


def views(current: str | None = A, **revisions: int) -> dict[str, dict[str, Any]]:
    found = {}
    for made in items():
        item = made.model_copy(update={"revision": 2}) if made.id in revisions.values() else made
        here = current if item.agent_id == "agent-1" else None
        found[item.id] = work_item_view(item, (), here, include_todo_list=True).to_json()
    return found


def live(current: str | None = A, **changes: Any) -> LiveBoard:
    agents = {
        "agent-1": make_agent(current_work_item_id=current).model_dump(mode="json"),
        "agent-2": make_agent(agent_id="agent-2").model_dump(mode="json"),
    }
    return LiveBoard(agents=agents, items=views(current, **changes.pop("moved", {})), **changes)


def export(keywords: KeywordSet | None = None) -> str:
    found = views()
    boards = [
        AgentBoard(
            make_agent(current_work_item_id=A).model_dump(mode="json"),
            [v for v in found.values() if v["agent_id"] == "agent-1"],
        ),
        AgentBoard(make_agent(agent_id="agent-2").model_dump(mode="json"), [found[OTHER]]),
    ]
    return render_org(boards, keywords or KeywordSet())


def headline_index(text: str, work_item_id: str) -> int:
    """The 0-based index of the headline whose drawer holds `work_item_id`."""
    lines = text.splitlines()
    at_line = lines.index(f":ID: {work_item_id}") - 1
    while not lines[at_line].startswith("*"):
        at_line -= 1
    return at_line


def retype(text: str, work_item_id: str, keyword: str) -> str:
    """Retype the keyword of the headline whose drawer holds `work_item_id`."""
    lines = text.splitlines(keepends=True)
    at_line = headline_index(text, work_item_id)
    lines[at_line] = re.sub(r"^(\*+) \S+", rf"\1 {keyword}", lines[at_line])
    return "".join(lines)


def plan(text: str, board: LiveBoard | None = None) -> list[EditResult]:
    doc, keywords = read_document(text, None)
    return plan_edits(doc, keywords, board or live())


def about(results: list[EditResult], what: str) -> EditResult:
    (found,) = [r for r in results if what in r.subject]
    return found


def moves(results: list[EditResult]) -> list[Move]:
    return [r.move for r in results if r.move is not None]


def test_an_unedited_export_is_all_unchanged() -> None:
    results = plan(export())
    assert [r.status for r in results] == [Status.UNCHANGED] * 6
    assert {r.detail for r in results} == {"not edited"}


@pytest.mark.parametrize("keyword", ["NEXT", "DOING"])
def test_next_or_doing_picks_the_item(keyword: str) -> None:
    results = plan(retype(export(), C, keyword))
    assert moves(results) == [Move(Action.PICK, "agent-1", C, ORG_EDIT)]
    assert about(results, C).status is Status.APPLIED


def test_the_current_item_moved_to_todo_is_put_down() -> None:
    assert moves(plan(retype(export(), A, "TODO"))) == [Move(Action.PUT_DOWN, "agent-1", A)]


def test_cancelled_cancels() -> None:
    assert moves(plan(retype(export(), C, "CANCELLED"))) == [Move(Action.CANCEL, "agent-1", C)]


@pytest.mark.parametrize(
    ("work_item_id", "keyword", "says"),
    [
        (C, "DONE", "DONE is earned, not typed"),
        (C, "WAITING", "WAITING follows the item's waits and blocker"),
        (C, "BLOCKED", "BLOCKED follows the item's waits and blocker"),
        (B, "TODO", "only the current item can be put down to TODO"),
        (D, "TODO", "the item is finished (DONE); a finished item cannot be reopened"),
        (X, "NEXT", "the item is finished (CANCELLED)"),
        (C, "", "the keyword was removed; put back TODO"),
    ],
)
def test_other_keyword_moves_are_refused(work_item_id: str, keyword: str, says: str) -> None:
    text = retype(export(), work_item_id, keyword)
    results = plan(text)
    refused = [r for r in results if r.status is Status.REFUSED]
    assert [r.line for r in refused] == [headline_index(text, work_item_id) + 1]
    assert says in refused[0].detail
    assert moves(results) == []


def test_an_edited_objective_is_refused_and_stale_once_the_item_moved() -> None:
    text = retype(export(), C, "NEXT").replace("Ask for review", "Ask for a quick review")
    assert "objective edited" in about(plan(text), C).detail
    assert "stale" in about(plan(text, live(moved={"x": C})), C).detail
    unedited = export().replace("Ask for review", "Ask for a quick review")
    assert "objective edited" in about(plan(unedited), C).detail


def test_an_edit_of_an_item_that_moved_since_export_is_stale() -> None:
    text = retype(export(), C, "NEXT")
    stale = about(plan(text, live(moved={"x": C})), C)
    assert (stale.status, stale.move) == (Status.REFUSED, None)
    assert "stale: " in stale.detail
    assert "revision 1 → 2" in stale.detail
    unedited = about(plan(export(), live(moved={"x": C})), C)
    assert unedited.status is Status.UNCHANGED
    assert "revision 1 → 2" in unedited.detail


def test_an_edit_that_already_holds_is_unchanged_even_when_the_item_moved() -> None:
    # Applied once (C picked), then applied again: nothing left to do.
    again = about(plan(retype(export(), C, "NEXT"), live(current=C, moved={"x": C})), C)
    assert (again.status, again.detail) == (Status.UNCHANGED, "already the current item")
    down = about(plan(retype(export(), A, "TODO"), live(current=None)), A)
    assert down.status is Status.UNCHANGED


def test_unknown_and_denied_ids_are_refused() -> None:
    unknown = work_item_id(99)
    text = retype(export(), C, "NEXT").replace(C, unknown)
    assert (
        f"unknown :ID: {unknown}: agent-1 has no such WorkItem" in about(plan(text), unknown).detail
    )
    denied = about(plan(text, live(denied=frozenset({unknown}))), unknown)
    assert "a headline of another agent" in denied.detail


def test_a_headline_moved_under_another_agent_is_refused() -> None:
    text = retype(export(), OTHER, "NEXT")
    lines = text.splitlines()
    start = headline_index(text, OTHER)
    block = lines[start : lines.index(":END:", start) + 1]
    del lines[start : start + len(block)]
    lines[lines.index("* agent agent-1") + 6 : 0] = block
    moved = "\n".join(lines) + "\n"
    refused = about(plan(moved), OTHER)
    assert refused.status is Status.REFUSED
    assert "belongs to agent-2, but sits under `* agent agent-1`" in refused.detail


def test_a_delegated_item_nested_under_its_parent_belongs_to_its_own_agent() -> None:
    found = views()
    found[OTHER]["delegated_from"] = {
        "delegation_id": "dlg_1",
        "agent_id": "agent-1",
        "work_item_id": B,
    }
    agents = [make_agent(current_work_item_id=A), make_agent(agent_id="agent-2")]
    boards = [
        AgentBoard(
            agent.model_dump(mode="json"),
            [v for v in found.values() if v["agent_id"] == agent.agent_id],
        )
        for agent in agents
    ]
    text = render_org(boards)
    assert f"*** TODO Other agent's task  :agent_2:\n:PROPERTIES:\n:ID: {OTHER}" in text
    assert moves(plan(retype(text, OTHER, "NEXT"))) == [Move(Action.PICK, "agent-2", OTHER)]


def test_one_pick_per_agent_per_file() -> None:
    text = retype(retype(export(), B, "DOING"), C, "NEXT")
    results = plan(text)
    assert moves(results) == [Move(Action.PICK, "agent-1", B)]
    second = about(results, C)
    assert second.status is Status.REFUSED
    assert f"line {about(results, B).line} already picks an item of agent-1" in second.detail


def test_later_lines_see_earlier_moves() -> None:
    down_then_pick = retype(retype(export(), A, "TODO"), C, "NEXT")
    assert [m.action for m in moves(plan(down_then_pick))] == [Action.PUT_DOWN, Action.PICK]
    picked_first = retype(export(), C, "NEXT") + "* verdicts\nput down: Write the report\n"
    results = plan(picked_first)
    assert moves(results) == [Move(Action.PICK, "agent-1", C)]
    assert about(results, "put down").detail == "not the current item (already put down)"


def new_headline(text: str, lines: str) -> str:
    return text.replace("* agent agent-2", lines + "* agent agent-2")


def test_a_new_headline_asks_its_agent_and_is_never_created() -> None:
    text = new_headline(export(), "** TODO Draft the notes   :docs:\n   One page.\n\n")
    (result,) = [r for r in plan(text) if r.move is not None]
    assert result.move is not None
    assert (result.move.action, result.move.agent_id, result.move.work_item_id) == (
        Action.ASK,
        "agent-1",
        None,
    )
    assert "please take it on" in result.move.text
    assert "Draft the notes" in result.move.text
    assert "One page." in result.move.text
    asked = live(asked={"agent-1": frozenset({result.move.text})})
    assert about(plan(text, asked), "Draft").status is Status.UNCHANGED
    twice = new_headline(text, "** Draft the notes\n   One page.\n")
    assert [r.status for r in plan(twice) if "Draft" in r.subject] == [
        Status.APPLIED,
        Status.UNCHANGED,
    ]


def test_a_nested_new_headline_names_its_parent() -> None:
    lines = export().splitlines()
    end = lines.index(":END:", lines.index(f":ID: {B}"))
    lines.insert(end + 1, "*** Find a second source")
    (result,) = [r for r in plan("\n".join(lines) + "\n") if r.move is not None]
    assert result.move is not None
    assert f"It sits under: Check the sources ({B})" in result.move.text


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ("** DONE Already finished\n", "a new headline cannot start finished"),
        ("** TODO\n", "an empty headline"),
    ],
)
def test_new_headlines_that_cannot_be_asked_are_refused(lines: str, says: str) -> None:
    (refused,) = [r for r in plan(new_headline(export(), lines)) if r.status is Status.REFUSED]
    assert refused.detail == says


def test_an_unknown_agents_section_and_what_is_under_it_are_refused() -> None:
    text = export() + "* agent ghost\n** TODO Haunt\n"
    refused = [(r.subject, r.detail) for r in plan(text) if r.status is Status.REFUSED]
    assert refused == [
        ("agent ghost", "no such agent"),
        ("new Haunt", "under agent ghost, which does not exist"),
    ]


def test_a_drawer_without_export_marks_or_well_formed_end_is_refused() -> None:
    text = retype(export(), C, "NEXT")
    no_revision = re.sub(r"(:ID: " + C + r"\n(?::\w+: .*\n)*?):REVISION: 1\n", r"\1", text)
    assert "no valid :REVISION: property" in about(plan(no_revision), C).detail
    no_keyword = text.replace(f":ID: {C}\n:AGENT_ID: agent-1\n:KEYWORD: TODO\n", f":ID: {C}\n")
    assert "no valid :KEYWORD: property" in about(plan(no_keyword), C).detail
    broken = text.replace(f":ID: {C}\n", f":ID: {C}\nnot a property\n")
    assert "not a property line" in about(plan(broken), C).detail


def test_verdict_lines_move_items_by_their_exact_headline() -> None:
    text = export() + (
        "* Verdicts\n# a comment\n\n- pick up: Check the sources\n  cancel: TODO Ask for review\n"
    )
    assert moves(plan(text)) == [
        Move(Action.PICK, "agent-1", B),
        Move(Action.CANCEL, "agent-1", C),
    ]
    put_down = export() + "* verdicts\nput down: Write the report\n"
    assert moves(plan(put_down)) == [Move(Action.PUT_DOWN, "agent-1", A)]


def test_unmatched_ambiguous_and_malformed_verdicts_are_refused_never_guessed() -> None:
    twin = export().replace("Check the sources", "Write the report")
    text = twin + "* verdicts\npick up: Write the repor\ncancel: Write the report\nfinish: x\n"
    lines = text.splitlines()
    # (B, renamed in the file, is refused for its edited objective too: not a verdict line.)
    refused = [r for r in plan(text) if r.status is Status.REFUSED and r.line > len(lines) - 3]
    assert [r.line for r in refused] == [len(lines) - 2, len(lines) - 1, len(lines)]
    assert refused[0].detail.startswith("unmatched: no single WorkItem headline")
    assert refused[1].detail.startswith("ambiguous: 2 headlines read it (line ")
    assert refused[2].detail.startswith("not a verdict")
    assert moves(plan(text)) == []


def test_custom_keywords_map_back_to_longruns() -> None:
    editorial = KeywordSet.parse(EDITORIAL)
    text = export(editorial)
    assert all(r.status is Status.UNCHANGED for r in plan(text))
    assert moves(plan(retype(text, C, "RESEARCH"))) == [Move(Action.PICK, "agent-1", C)]
    assert moves(plan(retype(text, A, "ASSIGNED"))) == [Move(Action.PUT_DOWN, "agent-1", A)]
    assert moves(plan(retype(text, C, "KILLED"))) == [Move(Action.CANCEL, "agent-1", C)]
    published = about(plan(retype(text, C, "PUBLISHED")), C)
    assert published.detail.startswith("PUBLISHED is earned, not typed")
    assert "type KILLED to drop it" in published.detail
