"""The WorkItem summary every turn starts from: the current WorkItem in full, the ranked
candidates, recently completed items with their reports, and the agent-scope waits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from shared.domain import views
from shared.domain.records import AgentState, TodoItem, WaitingIntent, WorkItem
from shared.domain.views import CandidateClass, Ranked


def ts(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quoted(text: str, prefix: str = "  ") -> list[str]:
    return [f"{prefix}{line}".rstrip() for line in text.splitlines()] or [f"{prefix}(empty)"]


def todo_line(todo: TodoItem) -> str:
    return f"[{todo.state.value}] {todo.text}"


def _triggers(wait: WaitingIntent) -> str:
    new = wait.trigger_count - wait.reviewed_trigger_count
    fresh = f", {new} new" if new > 0 else ""
    last = f", last {ts(wait.last_triggered_at)}" if wait.last_triggered_at else ""
    return f"triggered {wait.trigger_count}x{fresh}{last}"


def _wait_line(wait: WaitingIntent) -> str:
    parts = [f"{wait.id} ({wait.wake.value}): {wait.reason}"]
    if wait.resource is not None:
        parts.append(f"resource {wait.resource}")
    if wait.wake_at is not None:
        parts.append(f"wakes at {ts(wait.wake_at)}")
    if wait.is_triggered:
        parts.append(_triggers(wait))
    if wait.callback_url is not None:
        parts.append(f"callback_url {wait.callback_url}")
    return "- " + "; ".join(parts)


def _plan_lines(item: WorkItem) -> list[str]:
    plan = item.plan_artifact
    marker = "complete" if plan.preview_complete else "truncated, read the file for the rest"
    return [
        f"plan_artifact: {plan.relative_path} ({plan.bytes} bytes, sha256 {plan.sha256[:12]}, "
        f"updated {ts(plan.updated_at)})",
        f"plan path: {plan.path}",
        f"plan preview ({marker}):",
        *_quoted(plan.preview, "> "),
    ]


def _current_lines(item: WorkItem, waits: Sequence[WaitingIntent], now: datetime) -> list[str]:
    lines = [
        "## Current WorkItem",
        f"id: {item.id}",
        f"objective: {item.objective}",
        f"state: {item.state.value}",
        f"plan_status: {item.plan_status.value}",
        f"readiness: {views.readiness(item, waits).value}",
    ]
    origin = item.delegated_from
    if origin is not None:
        lines.append(
            f"origin: delegated by agent {origin.agent_id} (from its WorkItem "
            f"{origin.work_item_id}, delegation {origin.delegation_id}) because: {origin.reason}"
        )
        lines.append("  (completing this item sends your report back to that agent)")
    if item.blocked_by is not None:
        lines.append(f"blocked_by: {item.blocked_by}")
    if item.recheck_at is not None:
        due = " (due)" if item.recheck_at <= now else ""
        lines.append(f"recheck_at: {ts(item.recheck_at)}{due}")
    lines += _plan_lines(item)
    lines.append("todo_list:" if item.todo_list else "todo_list: (empty)")
    lines += [f"- {todo_line(todo)}" for todo in item.todo_list]
    mine = views.active_waits_of(item, waits)
    lines.append("active waits:" if mine else "active waits: (none)")
    return lines + [_wait_line(wait) for wait in mine]


def _candidate_line(entry: Ranked, waits: Sequence[WaitingIntent]) -> str:
    item = entry.item
    parts = [f"- {item.id}: {item.objective}", f"plan_status {item.plan_status.value}"]
    if item.delegated_from is not None:
        parts.append(f"delegated by {item.delegated_from.agent_id}: {item.delegated_from.reason}")
    if item.blocked_by is not None:
        parts.append(f"blocked_by: {item.blocked_by}")
    triggered = [w for w in views.active_waits_of(item, waits) if w.is_triggered]
    parts += [f"wait {w.id} ({w.wake.value}) {_triggers(w)}" for w in triggered]
    todo = views.current_todo(item)
    if todo is not None:
        parts.append(f"todo {todo_line(todo)}")
    first_line = next(iter(item.plan_artifact.preview.strip().splitlines()), "")
    if first_line:
        parts.append(f"plan: {first_line[:160]}")
    return " | ".join(parts)


def _completed_lines(entries: Sequence[Ranked], total: int) -> list[str]:
    lines = ["", f"## Recently completed (showing {len(entries)} of {total})"]
    for entry in entries:
        lines.append(f"- {entry.item.id}: {entry.item.objective}")
        lines += ["  report:", *_quoted(entry.item.result_summary or "", "    ")]
    return lines


def _candidate_lines(
    others: Sequence[Ranked], waits: Sequence[WaitingIntent], completed_total: int | None
) -> list[str]:
    shown = views.prompt_candidates(others)
    totals = {cls: sum(1 for e in others if e.candidate_class is cls) for cls in shown}
    recent = CandidateClass.COMPLETED_RECENT
    if completed_total is not None and recent in totals:
        totals[recent] = max(totals[recent], completed_total)
    lines: list[str] = []
    for cls, entries in shown.items():
        if cls is CandidateClass.COMPLETED_RECENT:
            lines += _completed_lines(entries, totals[cls])
            continue
        lines += ["", f"## {cls.value} (showing {len(entries)} of {totals[cls]})"]
        lines += [_candidate_line(entry, waits) for entry in entries]
    return lines


CANDIDATES_LEFT_OUT = (
    "\n## Other WorkItems: left out to fit the model's context window (ListWorkItems shows them)"
)


def summary_text(
    agent: AgentState,
    items: Sequence[WorkItem],
    waits: Sequence[WaitingIntent],
    now: datetime,
    *,
    candidates: bool = True,
    completed_total: int | None = None,
) -> str:
    """The first user message: the current WorkItem, the candidates (unless the context guard
    left them out), the agent-scope waits. `items` are the open WorkItems and the recently
    completed ones the summary shows, `completed_total` how many recently completed there are
    in all (None: count them in `items`)."""
    current_id = agent.current_work_item_id
    current = next((item for item in items if item.id == current_id), None)
    lines = [f"# WorkItems of {agent.agent_id} at {ts(now)}", ""]
    if current is None:
        lines.append("## Current WorkItem: none (PickWorkItem to focus one, or CreateWorkItem)")
    else:
        lines += _current_lines(current, waits, now)
    ranked = [e for e in views.rank(items, waits, current_id) if e.item.id != current_id]
    if candidates:
        lines += _candidate_lines(ranked, waits, completed_total)
    elif ranked:
        lines.append(CANDIDATES_LEFT_OUT)
    agent_waits = [w for w in waits if w.is_active and w.work_item_id is None]
    if agent_waits:
        lines += ["", "## Agent-scope waits"]
        lines += [_wait_line(wait) for wait in agent_waits]
    return "\n".join(lines)
