"""Terminal views of `work list` (a ranked table) and `work show` (one WorkItem in full)."""

from __future__ import annotations

from typing import Protocol

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from services.cli.board import (
    Json,
    next_offered,
    one_line,
    org_keyword,
    todo_lines,
    todo_progress,
)
from services.cli.checks import check_lines, verification_line
from shared.domain.memory import covers_text, within
from shared.domain.records import NoteCovers


def work_list_table(agent_id: str, answer: Json) -> Table:
    """One row per WorkItem in ranking order: keyword, id, todos, objective over its class."""
    title = (
        f"{agent_id}: {answer.get('returned', 0)} of {answer.get('total_matching', 0)} "
        f"WorkItems (filter {answer.get('filter', 'all')})"
    )
    table = Table(title=Text(title), title_justify="left")
    # Ids and keywords are copied into other commands: never wrap them.
    table.add_column("", no_wrap=True)
    table.add_column("work item", no_wrap=True)
    table.add_column("todos", no_wrap=True, justify="right")
    table.add_column("objective / class · state", overflow="fold", min_width=24)
    views = answer.get("work_items") or []
    offered = next_offered(views)
    for view in views:
        done, total = todo_progress(view)
        what = Text(one_line(view.get("objective"), 80), style="bold")
        what.append(f"\n{view.get('candidate_class')} · {view.get('scheduling_state')}", "dim")
        table.add_row(
            Text(org_keyword(view, next_id=offered)),
            Text(str(view.get("id"))),
            Text(f"{done}/{total}" if total else "-"),
            what,
        )
    return table


def _facts(view: Json) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    plan = view.get("plan_artifact") or {}
    rows = [
        ("objective", one_line(view.get("objective"))),
        (
            "state",
            f"{view.get('state')} · {view.get('scheduling_state')} · "
            f"{view.get('readiness')} · {view.get('candidate_class')}",
        ),
        ("current", "yes" if view.get("is_current") else "no"),
        (
            "plan",
            f"{view.get('plan_status')} · {plan.get('relative_path')} "
            f"({plan.get('bytes')} bytes, sha256 {str(plan.get('sha256'))[:12]}…)",
        ),
        ("blocker", one_line(view.get("blocked_by")) or "-"),
        ("recheck at", str(view.get("recheck_at") or "-")),
        ("revision", str(view.get("revision"))),
        ("delegated from", _origin(view)),
        ("updated", str(view.get("updated_at"))),
    ]
    for wait in view.get("active_waits") or []:
        rows.append(
            (
                "wait",
                f"{wait.get('wake')} {wait.get('id')} triggers="
                f"{wait.get('trigger_count')}: {one_line(wait.get('reason'))}",
            )
        )
    rows += [("check", line) for line in check_lines(view)]
    if verification_line(view):
        rows.append(("verification", str(verification_line(view))))
    if view.get("result_summary"):
        rows.append(("report", str(view["result_summary"])))
    for key, value in rows:
        grid.add_row(key, Text(value))
    return grid


def _origin(view: Json) -> str:
    origin = view.get("delegated_from")
    if not isinstance(origin, dict):
        return "-"
    return (
        f"{origin.get('agent_id')} {origin.get('work_item_id')} ({origin.get('delegation_id')}): "
        f"{one_line(origin.get('reason'))}"
    )


Tree = list[tuple[int, Json]]
"""Delegations under a WorkItem, depth first: (depth, delegation record)."""


def delegation_lines(tree: Tree) -> str:
    lines = ["delegations:"]
    for depth, record in tree:
        report = f" — {one_line(record.get('report'), 60)}" if record.get("report") else ""
        lines.append(
            f"{'  ' * depth}↳ {record.get('status')} {record.get('child_agent_id')} "
            f"{record.get('child_work_item_id')}: {one_line(record.get('objective'), 60)}{report}"
        )
    return "\n".join(lines)


TRACE_SHOWN = 40
"""Recorded entries `work show` prints of the trace (the newest)."""


class Pages(Protocol):
    def transcript(
        self, agent_id: str, work_item_id: str, after: int = 0, limit: int = 1000
    ) -> Json: ...


def recent_trace(client: Pages, agent_id: str, work_item_id: str, notes: list[Json]) -> list[Json]:
    """The item's newest recorded entries of the agent's own (assistant and tool) that no
    process note covers yet: the trace its next turn starts from."""
    covered = NoteCovers.model_validate(notes[-1]["covers"]) if notes else None
    kept: list[Json] = []
    after = 0
    while True:
        page = client.transcript(agent_id, work_item_id, after=after)
        entries = page.get("entries") or []
        kept += [
            e
            for e in entries
            if e.get("role") != "user"
            and not within(covered, str(e.get("turn_id")), int(e.get("round") or 0))
        ]
        kept = kept[-TRACE_SHOWN:]
        if not entries or page.get("next_after", after) == after:
            return kept
        after = int(page["next_after"])


def _trace_line(entry: Json) -> str:
    tool = entry.get("tool_name")
    kind = "result" if entry.get("role") == "tool" else ("call" if tool else "assistant")
    head = f"{entry.get('turn_id')} r{entry.get('round')} {kind}{' ' + tool if tool else ''}"
    return f"{head}: {one_line(entry.get('content'), 160)}"


def _memory_parts(view: Json, trace: list[Json]) -> list[Table | Text]:
    parts: list[Table | Text] = []
    for note in view.get("process_notes") or []:
        covers = covers_text(NoteCovers.model_validate(note["covers"]))
        head = f"\nprocess note {note.get('id')} ({covers}):"
        parts.append(Text(head + "\n" + str(note.get("text"))))
    if trace:
        parts.append(Text("\nprocess trace (newest last):\n" + "\n".join(map(_trace_line, trace))))
    return parts


def work_detail(view: Json, tree: Tree | None = None, trace: list[Json] | None = None) -> Panel:
    parts: list[Table | Text] = [_facts(view)]
    if tree:
        parts.append(Text("\n" + delegation_lines(tree)))
    todos = todo_lines(view)
    if todos:
        parts.append(Text("\n" + "\n".join(todos)))
    plan = (view.get("plan_artifact") or {}).get("preview")
    if plan:
        parts.append(Text("\nplan preview:\n" + str(plan)))
    parts += _memory_parts(view, trace or [])
    return Panel(Group(*parts), title=Text(f"{org_keyword(view)} {view.get('id')}"), expand=False)
