"""The org mirror's grammar: DOING current, NEXT the queued item offered first, TODO the other
queued ones, WAITING, BLOCKED, DONE with its CLOSED timestamp."""

from __future__ import annotations

from typing import Any

import pytest

from services.cli.board import AgentBoard, next_offered, org_keyword
from services.cli.org.render import org_work_item, render_org
from shared.domain.readouts import work_item_view
from shared.domain.records import WaitingIntent
from tests.builders import at, make_agent, make_wait, make_work_item, work_item_id

CURRENT, OLDER, NEWER, DONE_ID = (work_item_id(n) for n in (1, 2, 3, 4))


def view(
    *, current: str | None = CURRENT, waits: tuple[WaitingIntent, ...] = (), **fields: Any
) -> dict[str, Any]:
    item = make_work_item(**fields)
    return work_item_view(item, waits, current, include_todo_list=True).to_json()


def agent_views() -> list[dict[str, Any]]:
    """One of each: current runnable, two queued (the older one is offered first), a wait, a
    blocker and a completed item, listed in no particular order."""
    wait = make_wait(work_item_id=work_item_id(5), wake="operator_input")
    return [
        view(id=NEWER, updated_at=at(minutes=9)),
        view(id=DONE_ID, state="completed", updated_at=at(hours=2, minutes=7)),
        view(id=work_item_id(5), blocked_by="Asked the operator", waits=(wait,)),
        view(id=CURRENT),
        view(id=work_item_id(6), blocked_by="Needs the staging database"),
        view(id=OLDER, updated_at=at(minutes=3)),
    ]


@pytest.mark.parametrize(
    ("work_item", "keyword"),
    [
        (CURRENT, "DOING"),
        (OLDER, "NEXT"),
        (NEWER, "TODO"),
        (work_item_id(5), "WAITING"),
        (work_item_id(6), "BLOCKED"),
        (DONE_ID, "DONE"),
    ],
)
def test_each_view_gets_its_keyword_from_the_grammar(work_item: str, keyword: str) -> None:
    views = agent_views()
    offered = next_offered(views)
    (one,) = [v for v in views if v["id"] == work_item]
    assert org_keyword(one, next_id=offered) == keyword


def test_the_queued_item_offered_first_breaks_ties_on_creation_then_id() -> None:
    same = {"updated_at": at(minutes=3)}
    views = [
        view(id=work_item_id(8), created_at=at(minutes=1), **same),
        view(id=work_item_id(9), created_at=at(), **same),
        view(id=work_item_id(7), created_at=at(), **same),
    ]
    assert next_offered(views) == work_item_id(7)
    assert next_offered([view(id=CURRENT)]) is None


def test_finished_headlines_carry_a_closed_timestamp() -> None:
    lines = org_work_item(view(id=DONE_ID, state="completed", updated_at=at(hours=2, minutes=7)))
    assert lines[0].startswith("** DONE ")
    assert lines[1] == "CLOSED: [2025-01-06 Mon 11:07]"
    assert not any(line.startswith("CLOSED:") for line in org_work_item(view(id=OLDER)))


def test_the_org_document_uses_the_grammar_for_a_whole_agent() -> None:
    agent = make_agent(current_work_item_id=CURRENT).model_dump(mode="json")
    text = render_org([AgentBoard(agent, agent_views())])
    assert "#+TODO: TODO NEXT DOING WAITING BLOCKED | DONE CANCELLED\n" in text
    keywords = {line.split()[1] for line in text.splitlines() if line.startswith("** ")}
    assert keywords == {"DOING", "NEXT", "TODO", "WAITING", "BLOCKED", "DONE"}
    headlines = [line for line in text.splitlines() if line.startswith("** ")]
    assert [h.split()[1] for h in headlines].count("NEXT") == 1
