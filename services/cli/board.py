"""Renders agents' WorkItem views as a rich table or JSON, and the parts the org mirror shares
(keywords, todo progress; the mirror itself is `services.cli.org.render`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from services.cli.checks import check_lines
from services.cli.org.keywords import LONGRUN_KEYWORDS

Json = dict[str, Any]

ORG_KEYWORDS = LONGRUN_KEYWORDS
_TODO_MARK = {"completed": "x", "in_progress": ">", "pending": " "}
_KEYWORD_STYLE = {
    "TODO": "yellow",
    "NEXT": "green",
    "DOING": "bold green",
    "WAITING": "cyan",
    "BLOCKED": "red",
    "DONE": "dim green",
    "CANCELLED": "dim",
}


@dataclass(frozen=True, slots=True)
class AgentBoard:
    """One agent and its WorkItem views (GetWorkItem shape, todo lists included)."""

    agent: Json
    work_items: Sequence[Json]

    @property
    def agent_id(self) -> str:
        return str(self.agent.get("agent_id", "?"))


def org_keyword(view: Json, *, next_id: str | None = None) -> str:
    """The headline keyword of a WorkItem view (the org grammar of docs/contract.md §10):
    DOING the current runnable item, NEXT the queued runnable item `next_id` (see
    `next_offered`), TODO the other queued runnable items, WAITING any waiting state, DONE
    completed with outcome done, CANCELLED completed with outcome cancelled, BLOCKED everything
    else."""
    state = str(view.get("scheduling_state", ""))
    if state == "completed":
        return "CANCELLED" if view.get("outcome") == "cancelled" else "DONE"
    if state == "runnable":
        if view.get("is_current"):
            return "DOING"
        return "NEXT" if view.get("id") == next_id else "TODO"
    if state.startswith("waiting_"):
        return "WAITING"
    return "BLOCKED"


def next_offered(views: Iterable[Json]) -> str | None:
    """The queued runnable item the scheduler offers first: the ranking's order for queued
    items (least recently updated, then oldest, then id)."""
    queued = [v for v in views if v.get("candidate_class") == "queued_runnable"]
    if not queued:
        return None
    first = min(
        queued, key=lambda v: (_instant(v, "updated_at"), _instant(v, "created_at"), v["id"])
    )
    return str(first["id"])


def _instant(view: Json, key: str) -> datetime:
    return datetime.fromisoformat(str(view[key]))


def org_closed(view: Json) -> str | None:
    """The org planning line of a finished item: completion is an item's last write."""
    if view.get("state") != "completed" or not view.get("updated_at"):
        return None
    return _instant(view, "updated_at").strftime("CLOSED: [%Y-%m-%d %a %H:%M]")


def one_line(text: object, limit: int | None = None) -> str:
    flat = " ".join(str(text or "").split())
    if limit is not None and len(flat) > limit:
        return flat[: limit - 1] + "…"
    return flat


def todo_progress(view: Json) -> tuple[int, int]:
    todos = view.get("todo_list") or []
    done = sum(1 for t in todos if t.get("state") == "completed")
    return done, len(todos)


# ---------------------------------------------------------------- table


def board_table(board: AgentBoard) -> Table:
    """One row per WorkItem: keyword, id, todo progress, objective over what happens now."""
    agent = board.agent
    title = Text(f"agent {board.agent_id}  ·  posture {agent.get('posture', '?')}")
    table = Table(title=title, title_justify="left", expand=False)
    # Ids and keywords are copied into other commands: never wrap them.
    table.add_column("", no_wrap=True)
    table.add_column("work item", no_wrap=True)
    table.add_column("todos", no_wrap=True, justify="right")
    table.add_column("objective / now", overflow="fold", min_width=24)
    offered = next_offered(board.work_items)
    for view in board.work_items:
        keyword = org_keyword(view, next_id=offered)
        done, total = todo_progress(view)
        # Plain Text cells: a `[...]` in an objective or blocker is not rich markup.
        what = Text(one_line(view.get("objective"), 80), style="bold")
        what.append("\n" + _now_or_blocker(view), style="dim")
        table.add_row(
            Text(keyword, style=_KEYWORD_STYLE[keyword]),
            Text(str(view.get("id", "?"))),
            Text(f"{done}/{total}" if total else "-"),
            what,
        )
    if not board.work_items:
        table.add_row("", "(no work items)", "", "")
    return table


def _now_or_blocker(view: Json) -> str:
    origin = view.get("delegated_from")
    via = (
        f"↳ from {origin.get('agent_id')}/{origin.get('work_item_id')} · "
        if isinstance(origin, dict)
        else ""
    )
    return via + _now(view)


def _now(view: Json) -> str:
    verification = view.get("verification") or {}
    if view.get("state") == "open" and verification.get("status") == "verifying":
        awaited = [line for line in check_lines(view) if line.endswith(": awaited")]
        return one_line("verifying: " + "; ".join(a.removesuffix(": awaited") for a in awaited), 80)
    if view.get("state") == "completed":
        return one_line(view.get("result_summary") or "(no report)", 60)
    if view.get("blocked_by"):
        waits = ", ".join(str(w.get("wake")) for w in view.get("active_waits") or [])
        suffix = f" [{waits}]" if waits else ""
        return one_line(view["blocked_by"], 50) + suffix
    todo = view.get("current_todo")
    return one_line(todo.get("text"), 60) if isinstance(todo, dict) else ""


def todo_lines(view: Json) -> list[str]:
    """Todos as `[x] text` lines for terminal output."""
    return [
        f"[{_TODO_MARK.get(str(t.get('state')), '?')}] {one_line(t.get('text'))}"
        for t in view.get("todo_list") or []
    ]


# ---------------------------------------------------------------- json


def render_json(boards: Iterable[AgentBoard]) -> str:
    payload = {
        "agents": [{"agent": board.agent, "work_items": list(board.work_items)} for board in boards]
    }
    return json.dumps(payload, indent=2, sort_keys=True)
