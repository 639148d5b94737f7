"""Renders agents' WorkItem views as a rich table, a one-way org mirror (contract §10), or JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from services.cli.checks import check_lines

Json = dict[str, Any]

ORG_KEYWORDS = ("TODO", "NEXT", "DOING", "WAITING", "BLOCKED", "DONE", "CANCELLED")
_CHECKBOX = {"completed": "[X]", "in_progress": "[-]", "pending": "[ ]"}
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


# ---------------------------------------------------------------- org mirror


def render_org(boards: Iterable[AgentBoard]) -> str:
    """The org mirror: a generated, read-only outline; editing it changes nothing. A delegated
    WorkItem whose delegating item is on the board is a sub-headline of that item."""
    boards = list(boards)
    lines = [
        "#+TITLE: longrun board",
        "#+TODO: TODO NEXT DOING WAITING BLOCKED | DONE CANCELLED",
        "# Generated by `longrun board --format org`: a one-way mirror of the ledger.",
        "# Edits here change nothing; the ledger is the record.",
    ]
    children = delegated_children(boards)
    for board in boards:
        lines.append("")
        lines.extend(_org_agent(board, children))
    return "\n".join(lines) + "\n"


Children = dict[str, list[tuple[str, Json]]]
"""Delegating WorkItem id -> (agent id, view) of the items delegated from it."""


def delegated_children(boards: Sequence[AgentBoard]) -> Children:
    """Delegated items whose delegating item is on the board, by that item's id."""
    shown = {str(v.get("id")) for b in boards for v in b.work_items}
    children: Children = {}
    for board in boards:
        for view in board.work_items:
            origin = view.get("delegated_from")
            if isinstance(origin, dict) and origin.get("work_item_id") in shown:
                children.setdefault(str(origin["work_item_id"]), []).append((board.agent_id, view))
    return children


def _org_tree(view: Json, children: Children, level: int, next_id: str | None) -> list[str]:
    lines = org_work_item(view, level, next_id=next_id)
    for agent_id, child in children.get(str(view.get("id")), []):
        nested = _org_tree(child, children, level + 1, None)
        nested[0] = f"{nested[0]}  :{agent_id.replace('-', '_')}:"
        lines.extend(nested)
    return lines


def _org_agent(board: AgentBoard, children: Children | None = None) -> list[str]:
    agent = board.agent
    props = {
        "AGENT_ID": board.agent_id,
        "LOOP": agent.get("loop"),
        "POSTURE": agent.get("posture"),
        "CURRENT": agent.get("current_work_item_id"),
    }
    lines = [f"* agent {board.agent_id}", *_properties(props)]
    offered = next_offered(board.work_items)
    nested = {str(v.get("id")) for kids in (children or {}).values() for _, v in kids}
    for view in board.work_items:
        if str(view.get("id")) not in nested:
            lines.extend(_org_tree(view, children or {}, 2, offered))
    return lines


def org_work_item(view: Json, level: int = 2, *, next_id: str | None = None) -> list[str]:
    """One headline, its CLOSED line when finished, its properties, its todos as a checkbox
    list, and its report."""
    done, total = todo_progress(view)
    cookie = f" [{done}/{total}]" if total else ""
    tag = "  :current:" if view.get("is_current") else ""
    title = one_line(view.get("objective")) or "(no objective)"
    lines = [f"{'*' * level} {org_keyword(view, next_id=next_id)} {title}{cookie}{tag}"]
    closed = org_closed(view)
    if closed is not None:
        lines.append(closed)
    lines.extend(_properties(_org_properties(view)))
    for todo in view.get("todo_list") or []:
        mark = _CHECKBOX.get(str(todo.get("state")), "[ ]")
        lines.append(f"- {mark} {one_line(todo.get('text'))}")
    if view.get("result_summary"):
        # Indented so that a report line starting with `*` can never become a headline.
        lines.append("#+begin_quote")
        lines.extend(f"  {line}".rstrip() for line in str(view["result_summary"]).splitlines())
        lines.append("#+end_quote")
    return lines


def _org_properties(view: Json) -> dict[str, object]:
    props: dict[str, object] = {
        "ID": view.get("id"),
        "READINESS": view.get("readiness"),
        "SCHEDULING_STATE": view.get("scheduling_state"),
        "CANDIDATE_CLASS": view.get("candidate_class"),
        "PLAN_STATUS": view.get("plan_status"),
        "REVISION": view.get("revision"),
        "BLOCKER": one_line(view.get("blocked_by")) or None,
        "RECHECK_AT": view.get("recheck_at"),
    }
    plan = view.get("plan_artifact")
    if isinstance(plan, dict):
        props["PLAN"] = plan.get("relative_path")
    origin = view.get("delegated_from")
    if isinstance(origin, dict):
        props["DELEGATED_FROM"] = f"{origin.get('agent_id')} {origin.get('work_item_id')}"
        props["DELEGATION"] = origin.get("delegation_id")
    verification = view.get("verification") or {}
    if view.get("state") == "open" and verification.get("status") == "verifying":
        props["GATE"] = "verifying"
    for index, line in enumerate(check_lines(view), start=1):
        props[f"CHECK_{index}"] = line
    waits = view.get("active_waits") or []
    for index, wait in enumerate(waits, start=1):
        key = "WAIT" if len(waits) == 1 else f"WAIT_{index}"
        props[key] = _wait_text(wait)
    return props


def _wait_text(wait: Json) -> str:
    parts = [str(wait.get("wake")), str(wait.get("id"))]
    parts.append(f"triggers={wait.get('trigger_count', 0)}")
    if wait.get("resource"):
        parts.append(f"resource={wait['resource']}")
    if wait.get("wake_at"):
        parts.append(f"wake_at={wait['wake_at']}")
    reason = one_line(wait.get("reason"))
    return " ".join(parts) + (f" — {reason}" if reason else "")


def _properties(props: dict[str, object]) -> list[str]:
    body = [f":{key}: {value}" for key, value in props.items() if value not in (None, "")]
    return [":PROPERTIES:", *body, ":END:"]


# ---------------------------------------------------------------- json


def render_json(boards: Iterable[AgentBoard]) -> str:
    payload = {
        "agents": [{"agent": board.agent, "work_items": list(board.work_items)} for board in boards]
    }
    return json.dumps(payload, indent=2, sort_keys=True)
