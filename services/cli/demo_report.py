"""What the demo found at the end of its scenario, the checks that decide its exit code, and how
it is shown: the board, the org mirror and a short summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from services.cli.board import AgentBoard, board_table, one_line, todo_progress
from services.cli.client import Json
from services.cli.org.render import render_org


@dataclass(frozen=True)
class Outcome:
    agent_id: str
    agent: Json
    work_item: Json
    work_items: Sequence[Json]
    briefs: Json
    verify: Json
    events: Sequence[str] = ()
    """The types of the WorkItem's history events, in order."""
    missing: list[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "missing", missing_evidence(self))

    @property
    def result_briefs(self) -> list[Json]:
        return [b for b in self.briefs.get("briefs") or [] if b.get("kind") == "result"]


def missing_evidence(outcome: Outcome) -> list[str]:
    """Everything a really completed scenario shows; an empty list means it did."""
    item, missing = outcome.work_item, []
    if item.get("state") != "completed":
        missing.append(f"WorkItem {item.get('id')} is {item.get('state')}, not completed")
    summary = (item.get("result_summary") or "").strip()
    if not summary:
        missing.append("the completed WorkItem has no result_summary (no promoted report)")
    if not any(b.get("text") == item.get("result_summary") for b in outcome.result_briefs):
        missing.append("no result brief carrying the completion report")
    if outcome.verify.get("ok") is not True:
        missing.append(f"history verify is not ok: {outcome.verify}")
    if todo_progress(item)[1] < 2:
        missing.append("the WorkItem had fewer than two todos (no multi-step plan)")
    return missing


# The WorkItem's story; turn bookkeeping (transcripts, turn starts and ends) is left out.
STORY_EVENTS = frozenset(
    {
        "work_item_created",
        "work_item_picked",
        "work_item_updated",
        "wait_created",
        "wait_triggered",
        "work_item_completed",
        "brief_recorded",
    }
)


def timeline(types: Sequence[str]) -> str:
    """The story's event types in order, runs of one type collapsed: `a → b (3) → c`."""
    parts = []
    for kind, run in groupby(t for t in types if t in STORY_EVENTS):
        count = sum(1 for _ in run)
        parts.append(f"{kind} ({count})" if count > 1 else kind)
    return " → ".join(parts)


def show_outcome(outcome: Outcome, console: Console) -> None:
    board = AgentBoard(outcome.agent, outcome.work_items)
    console.rule("board")
    console.print(board_table(board))
    console.rule("org mirror (longrun board --format org)")
    # Org properties look like emoji codes (`:ID:`): print the mirror verbatim, unwrapped.
    console.print(
        render_org([board]), markup=False, highlight=False, emoji=False, soft_wrap=True, end=""
    )
    console.rule("summary")
    console.print(Panel(_summary(outcome), title=Text(f"agent {outcome.agent_id}"), expand=False))


def _summary(outcome: Outcome) -> Table:
    item, verify = outcome.work_item, outcome.verify
    done, total = todo_progress(item)
    plan = item.get("plan_artifact") or {}
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows = [
        ("work item", str(item.get("id"))),
        ("objective", one_line(item.get("objective"))),
        (
            "state",
            f"{item.get('state')} (plan {item.get('plan_status')}, revision "
            f"{item.get('revision')})",
        ),
        ("todos", f"{done}/{total} completed"),
        ("plan file", f"{plan.get('relative_path')} ({plan.get('bytes')} bytes)"),
        ("turns", str(outcome.agent.get("turn_index"))),
        ("report", one_line(item.get("result_summary")) or "(none)"),
        ("result briefs", str(len(outcome.result_briefs))),
        ("timeline", timeline(outcome.events) or "-"),
        (
            "history",
            f"ok={verify.get('ok')} events={verify.get('count')} "
            f"head={str(verify.get('head'))[:16]}…",
        ),
    ]
    for key, value in rows:
        grid.add_row(key, Text(value))
    return grid
