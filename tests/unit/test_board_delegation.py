"""Delegation trees on the operator's views: the org mirror nests a delegated WorkItem under
the item that delegated it, the table names its origin, and `work show` lists the delegations
made from an item and from the items they made."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from services.cli.board import AgentBoard, board_table
from services.cli.org.render import render_org
from services.cli.verbs import delegation_tree
from services.cli.work_views import work_detail

ROOT = "wi_01ARZ3NDEKTSV4RRFFQ69G5FA1"
CHILD = "wi_01ARZ3NDEKTSV4RRFFQ69G5FA2"
GRANDCHILD = "wi_01ARZ3NDEKTSV4RRFFQ69G5FA3"


def view(item_id: str, objective: str, origin: tuple[str, str] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": item_id,
        "objective": objective,
        "state": "open",
        "readiness": "runnable",
        "scheduling_state": "runnable",
        "candidate_class": "queued_runnable",
        "active_waits": [],
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
    }
    if origin is not None:
        found["delegated_from"] = {
            "delegation_id": f"dlg_{item_id[3:]}",
            "agent_id": origin[0],
            "work_item_id": origin[1],
            "reason": "needs a specialist",
        }
    return found


def boards() -> list[AgentBoard]:
    return [
        AgentBoard({"agent_id": "boss"}, [view(ROOT, "Ship the release")]),
        AgentBoard({"agent_id": "helper"}, [view(CHILD, "Check the figures", ("boss", ROOT))]),
        AgentBoard({"agent_id": "sub"}, [view(GRANDCHILD, "Count rows", ("helper", CHILD))]),
    ]


def test_org_nests_delegated_items_under_their_parent_item() -> None:
    org = render_org(boards())
    lines = org.splitlines()
    root = next(i for i, line in enumerate(lines) if "Ship the release" in line)
    child = next(i for i, line in enumerate(lines) if "Check the figures" in line)
    grand = next(i for i, line in enumerate(lines) if "Count rows" in line)
    assert lines[root].startswith("** ")
    assert lines[child].startswith("*** ")
    assert lines[child].endswith(":helper:")
    assert lines[grand].startswith("**** ")
    assert lines[grand].endswith(":sub:")
    assert root < child < grand
    assert org.count("Check the figures") == 1  # not repeated under its own agent
    assert f":DELEGATED_FROM: boss {ROOT}" in org


def test_org_keeps_a_delegated_item_whose_parent_is_not_shown_at_the_top() -> None:
    org = render_org(boards()[1:2])
    assert any(line.startswith("** ") and "Check the figures" in line for line in org.splitlines())


def test_table_names_the_origin() -> None:
    console = Console(width=160, record=True)
    console.print(board_table(boards()[1]))
    assert f"from boss/{ROOT}" in console.export_text()


class FakeClient:
    def __init__(self, records: dict[str, list[dict[str, Any]]]) -> None:
        self.records = records

    def delegations(self, agent_id: str, direction: str | None = None) -> list[dict[str, Any]]:
        assert direction == "out"
        return self.records.get(agent_id, [])


def record(parent: str, parent_wi: str, child: str, child_wi: str, status: str) -> dict[str, Any]:
    return {
        "parent_agent_id": parent,
        "parent_work_item_id": parent_wi,
        "child_agent_id": child,
        "child_work_item_id": child_wi,
        "status": status,
        "objective": f"work of {child}",
        "report": "done" if status == "succeeded" else None,
    }


def test_work_show_lists_the_delegation_tree() -> None:
    client = FakeClient(
        {
            "boss": [record("boss", ROOT, "helper", CHILD, "running")],
            "helper": [record("helper", CHILD, "sub", GRANDCHILD, "succeeded")],
        }
    )
    tree = delegation_tree(client, "boss", ROOT)  # type: ignore[arg-type]
    assert [(depth, r["child_agent_id"]) for depth, r in tree] == [(0, "helper"), (1, "sub")]
    console = Console(width=160, record=True)
    console.print(work_detail(view(ROOT, "Ship the release"), tree))
    text = console.export_text()
    assert f"↳ running helper {CHILD}" in text
    assert f"  ↳ succeeded sub {GRANDCHILD}" in text
