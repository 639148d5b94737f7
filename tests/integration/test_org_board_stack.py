"""The org board as a control surface, on the services as real processes: export the board,
edit the file the way a person would, `longrun board apply` it, export again. The second export
shows exactly the edits, the history one operator command per applied edit; a dry run and a
second apply change nothing; refused lines name their line and apply nothing."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from typer.testing import CliRunner

from services.cli.main import app
from tests.integration.stack import INGRESS, LEDGER, OPERATOR_TOKEN, SCHEDULER, SETTINGS, history

ORG_EDIT = "operator: org edit"
COMMAND_EVENTS = {
    "work_item_picked",
    "work_item_focus_released",
    "work_item_cancelled",
    "operator_message_received",
}


@dataclass
class Board:
    """The stack's ingress, and the agents' tokens."""

    http: httpx.AsyncClient
    url: str
    tokens: dict[str, str]

    def cli(self, *args: str) -> Result:
        env = {"LONGRUN_URL": self.url, "LONGRUN_OPERATOR_TOKEN": OPERATOR_TOKEN}
        return CliRunner().invoke(app, list(args), env=env)

    def export(self, *args: str) -> str:
        result = self.cli("board", "--format", "org", *args)
        assert result.exit_code == 0, result.output
        return result.stdout

    async def tool(self, agent_id: str, tool: str, **args: Any) -> dict[str, Any]:
        answer = await self.http.post(
            f"/v1/agents/{agent_id}/tools/{tool}",
            headers={"Authorization": f"Bearer {self.tokens[agent_id]}"},
            json={"args": args},
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["result"])

    async def create(self, agent_id: str, objective: str) -> str:
        created = await self.tool(agent_id, "CreateWorkItem", objective=objective)
        return str(created["work_item"]["id"])

    async def commands(self, agent_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The agent's operator-command events after seq `after`."""
        events = await history(self.http, agent_id)
        return [e for e in events if e["seq"] > after and e["type"] in COMMAND_EVENTS]

    async def head(self, agent_id: str) -> int:
        return len(await history(self.http, agent_id))


@pytest.fixture
async def board(spawn: Any) -> AsyncIterator[Board]:
    """Ledger, scheduler and ingress as processes; agents with their own loop, so no turn moves
    their WorkItems while the test edits them."""
    services = [spawn(*LEDGER, **SETTINGS), spawn(*SCHEDULER, **SETTINGS)]
    ingress = spawn(*INGRESS, **SETTINGS)
    for service in [*services, ingress]:
        await service.wait_ready()
    url = f"http://127.0.0.1:{ingress.port}"
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        tokens = {}
        for agent_id in ("writer", "editor"):
            put = await http.put(f"/v1/agents/{agent_id}", json={"loop": "external"})
            assert put.status_code == 201, put.text
            tokens[agent_id] = put.json()["agent_token"]
        yield Board(http, url, tokens)


async def seed(board: Board) -> dict[str, str]:
    """writer: A current (DOING), B (NEXT), C (TODO); editor: E (NEXT), F (TODO). A is written
    after B and C so that, put down, it queues behind them and B stays NEXT."""
    ids = {}
    for name, agent_id in (("A", "writer"), ("B", "writer"), ("C", "writer")):
        ids[name] = await board.create(agent_id, f"Item {name} of the {agent_id}")
    for name in ("E", "F"):
        ids[name] = await board.create("editor", f"Item {name} of the editor")
    await board.tool("writer", "PickWorkItem", work_item_id=ids["A"])
    todo = [{"text": "outline", "state": "in_progress"}]
    await board.tool("writer", "UpdateWorkItem", work_item_id=ids["A"], todo_list=todo)
    return ids


def keywords(org: str) -> dict[str, str]:
    """WorkItem id -> its headline's keyword, read from an exported file."""
    found: dict[str, str] = {}
    keyword = ""
    for line in org.splitlines():
        if line.startswith("** "):
            keyword = line.split()[1]
        elif line.startswith(":ID: "):
            found[line.split()[1]] = keyword
    return found


def section(org: str, work_item_id: str) -> tuple[int, int]:
    """The (headline index, next headline index) of an item's headline in the file's lines."""
    lines = org.splitlines()
    at = lines.index(f":ID: {work_item_id}") - 1
    while not lines[at].startswith("*"):
        at -= 1
    end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("*")), len(lines))
    return at, end


def set_keyword(org: str, work_item_id: str, keyword: str) -> str:
    """What a person does: retype the keyword of one headline, nothing else."""
    lines = org.splitlines(keepends=True)
    at, _ = section(org, work_item_id)
    lines[at] = re.sub(r"^(\*+) \S+", rf"\1 {keyword}", lines[at])
    return "".join(lines)


def statuses(output: str) -> list[str]:
    """The status of each result line of `board apply` (the closing tally left out)."""
    labels = ("applied", "unchanged", "refused", "to apply")
    return [
        next(x for x in labels if line.startswith(x))
        for line in output.splitlines()
        if line.startswith(labels)
    ]


def line_of(org: str, work_item_id: str) -> int:
    return section(org, work_item_id)[0] + 1


async def test_round_trip_applies_each_edit_as_one_operator_command(
    board: Board, tmp_path: Path
) -> None:
    ids = await seed(board)
    first = board.export()
    assert [keywords(first)[ids[n]] for n in "ABCEF"] == ["DOING", "NEXT", "TODO", "NEXT", "TODO"]
    edited = set_keyword(first, ids["A"], "TODO")  # put the current item down
    edited = set_keyword(edited, ids["C"], "CANCELLED")
    edited = set_keyword(edited, ids["F"], "NEXT")  # pick it
    # A new headline under the writer, typed in a plain editor with CRLF line ends.
    _, end = section(edited, ids["C"])
    lines = edited.splitlines()
    lines[end:end] = ["** TODO Draft the release notes   ", "   Keep it to one page.  "]
    edited = "\r\n".join(lines) + "\r\n* verdicts\r\n- cancel: Item E of the editor\r\n"
    path = tmp_path / "board.org"
    path.write_text(edited, encoding="utf-8", newline="")
    before = {agent_id: await board.head(agent_id) for agent_id in ("writer", "editor")}

    dry = board.cli("board", "apply", str(path), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert sorted(statuses(dry.stdout)) == ["to apply"] * 5 + ["unchanged"] * 2, dry.stdout
    assert {a: await board.head(a) for a in before} == before
    assert keywords(board.export()) == keywords(first)

    applied = board.cli("board", "apply", str(path))
    assert applied.exit_code == 0, applied.output
    assert sorted(statuses(applied.stdout)) == ["applied"] * 5 + ["unchanged"] * 2, applied.stdout
    second = board.export()
    expected = {
        **keywords(first),
        ids["A"]: "TODO",
        ids["C"]: "CANCELLED",
        ids["E"]: "CANCELLED",
        ids["F"]: "DOING",
    }
    assert keywords(second) == expected
    assert "Draft the release notes" not in second  # asked, never created for the agent

    writer = await board.commands("writer", before["writer"])
    assert [(e["type"], e["work_item_id"]) for e in writer] == [
        ("work_item_focus_released", ids["A"]),
        ("work_item_cancelled", ids["C"]),
        ("operator_message_received", None),
    ]
    assert writer[0]["data"] == {"cause": "put_down", "reason": ORG_EDIT}
    assert (writer[1]["data"]["cancelled_by"], writer[1]["data"]["reason"]) == (
        "operator",
        ORG_EDIT,
    )
    assert "Draft the release notes" in writer[2]["data"]["text"]
    assert "Keep it to one page." in writer[2]["data"]["text"]
    editor = await board.commands("editor", before["editor"])
    assert [(e["type"], e["work_item_id"], e["data"]["reason"]) for e in editor] == [
        ("work_item_picked", ids["F"], ORG_EDIT),
        ("work_item_cancelled", ids["E"], ORG_EDIT),
    ]
    assert (editor[0]["data"]["picked_by"], editor[1]["data"]["cancelled_by"]) == (
        "operator",
        "operator",
    )

    after = {a: await board.head(a) for a in before}
    again = board.cli("board", "apply", str(path))
    assert again.exit_code == 0, again.output
    assert statuses(again.stdout) == ["unchanged"] * 7, again.stdout  # 5 items, 1 new, 1 verdict
    assert {a: await board.head(a) for a in before} == after


async def test_refused_lines_say_why_with_their_line_and_apply_nothing(
    board: Board, tmp_path: Path
) -> None:
    ids = await seed(board)
    first = board.export()
    edited = set_keyword(first, ids["B"], "DONE")
    edited = edited.replace("Item C of the writer", "Item C, reworded")
    edited = set_keyword(edited, ids["C"], "NEXT")
    unknown = "wi_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    edited = set_keyword(edited, ids["E"], "NEXT").replace(ids["E"], unknown)
    # F's headline moved under the writer (cut from the editor, pasted under the writer).
    at, end = section(edited, ids["F"])
    lines = edited.splitlines()
    moved = lines[at:end]
    del lines[at:end]
    moved[0] = moved[0].replace("** TODO", "** NEXT")
    writer_at = lines.index("* agent writer")
    lines[writer_at + 6 : writer_at + 6] = moved  # after the writer's 5-line drawer
    edited = "\n".join(lines) + "\n"
    # A stale edit: A moved on (the agent updated it) after the export.
    edited = set_keyword(edited, ids["A"], "CANCELLED")
    await board.tool("writer", "UpdateWorkItem", work_item_id=ids["A"], plan_status="ready")
    edited += "* verdicts\npick up: No such headline\n"
    path = tmp_path / "board.org"
    path.write_text(edited, encoding="utf-8")
    before = {a: await board.head(a) for a in ("writer", "editor")}

    result = board.cli("board", "apply", str(path))
    assert result.exit_code == 1
    refused = {
        int(m[1]): m[2]
        for m in re.finditer(rf"^refused +{re.escape(str(path))}:(\d+) +(.*)$", result.stdout, re.M)
    }
    expect = {
        line_of(edited, ids["A"]): "stale",
        line_of(edited, ids["B"]): "DONE is earned",
        line_of(edited, ids["C"]): "objective edited",
        line_of(edited, unknown): f"unknown :ID: {unknown}",
        line_of(edited, ids["F"]): "a headline of another agent",
        len(edited.splitlines()): "unmatched",
    }
    assert sorted(refused) == sorted(expect), result.stdout
    for line, words in expect.items():
        assert words in refused[line], (line, refused[line])
    assert "applied" not in statuses(result.stdout)
    assert {a: await board.head(a) for a in before} == before
    assert keywords(board.export()) == keywords(first)


async def test_custom_keywords_are_displayed_and_mapped_back(board: Board, tmp_path: Path) -> None:
    ids = await seed(board)
    spec = "ASSIGNED RESEARCH WRITING | PUBLISHED KILLED"
    first = board.export("--keywords", spec)
    assert "#+TODO: ASSIGNED RESEARCH WRITING WAITING BLOCKED | PUBLISHED KILLED\n" in first
    assert [keywords(first)[ids[n]] for n in "ABCEF"] == [
        "WRITING",
        "RESEARCH",
        "ASSIGNED",
        "RESEARCH",
        "ASSIGNED",
    ]
    edited = set_keyword(set_keyword(first, ids["F"], "RESEARCH"), ids["C"], "KILLED")
    path = tmp_path / "board.org"
    path.write_text(edited, encoding="utf-8")
    applied = board.cli("board", "apply", str(path))  # read with the file's #+TODO: line
    assert applied.exit_code == 0, applied.output
    assert sorted(statuses(applied.stdout)) == ["applied"] * 2 + ["unchanged"] * 3
    second = board.export("--keywords", spec)
    assert keywords(second) == {**keywords(first), ids["C"]: "KILLED", ids["F"]: "WRITING"}
    bad = board.cli("board", "--format", "org", "--keywords", "A B | A")
    assert bad.exit_code == 2
    assert "A would name two states" in bad.output


async def test_done_when_and_a_check_block_become_command_checks_both_ways(
    board: Board, tmp_path: Path
) -> None:
    ids = await seed(board)
    first = board.export()
    lines = first.splitlines()
    at = lines.index(f":ID: {ids['B']}")
    lines.insert(at + 1, ":DONE-WHEN: python -m pytest -q")
    _, end = section("\n".join(lines), ids["C"])
    lines[end:end] = ["#+begin_src sh :check", "  make lint", "  make test", "#+end_src"]
    path = tmp_path / "board.org"
    path.write_text("\n".join(lines) + "\n")

    applied = board.cli("board", "apply", str(path))
    assert applied.exit_code == 0, applied.output
    assert sorted(statuses(applied.stdout)) == ["applied"] * 2 + ["unchanged"] * 5, applied.stdout
    items = {
        w["id"]: w
        for w in (await board.http.get("/v1/agents/writer/work-items")).json()["work_items"]
    }
    checks_b = items[ids["B"]]["acceptance"]
    assert [(c["kind"], c["run"], c["set_by"]) for c in checks_b] == [
        ("command", "python -m pytest -q", "operator")
    ]
    assert items[ids["C"]]["acceptance"][0]["run"] == "make lint\nmake test"

    second = board.export()
    at, end = section(second, ids["B"])
    assert ":DONE-WHEN: python -m pytest -q" in second.splitlines()[at:end]
    at, end = section(second, ids["C"])
    assert second.splitlines()[at:end][-4:] == [
        "#+begin_src sh :check",
        "  make lint",
        "  make test",
        "#+end_src",
    ]
    again_path = tmp_path / "again.org"
    again_path.write_text(second)
    again = board.cli("board", "apply", str(again_path))
    assert again.exit_code == 0, again.output
    assert set(statuses(again.stdout)) == {"unchanged"}, again.stdout
