"""The operator's verbs that end, judge or put down a WorkItem: cancel, approve, reject,
put-down."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.board import Json
from services.cli.checks import check_lines, verification_line
from services.cli.verbs import AgentId, WorkItemId, api


def _said(view: Json) -> str:
    outcome = view.get("outcome") or view.get("scheduling_state")
    line = f"{view.get('id')}: {view.get('state')} · {outcome}"
    verification = verification_line(view)
    return line + (f" · verification {verification}" if verification else "")


def cancel(
    ctx: typer.Context,
    agent_id: AgentId,
    work_item_id: WorkItemId,
    reason: Annotated[str, typer.Option("--reason", help="Why it is dropped (kept in history).")],
) -> None:
    """Cancel an open WorkItem: it ends with outcome cancelled and no result."""
    with api(ctx) as client:
        view = client.cancel_work_item(agent_id, work_item_id, reason)
    typer.echo(_said(view))


def put_down(
    ctx: typer.Context,
    agent_id: AgentId,
    work_item_id: WorkItemId,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in history).")],
) -> None:
    """Take focus off the agent's current WorkItem; it stays open, the agent picks next."""
    with api(ctx) as client:
        view = client.put_down_work_item(agent_id, work_item_id, reason)
    typer.echo(f"{_said(view)} · put down")


def approve(
    ctx: typer.Context,
    agent_id: AgentId,
    work_item_id: WorkItemId,
    note: Annotated[str, typer.Option("--note", help="Why it passes.")] = "",
) -> None:
    """Pass the operator_approval checks of a verifying WorkItem, or complete one held for the
    operator after its attempts were spent (with its last report)."""
    with api(ctx) as client:
        view = client.verdict(agent_id, work_item_id, passed=True, note=note)
    typer.echo(_said(view))


def reject(
    ctx: typer.Context,
    agent_id: AgentId,
    work_item_id: WorkItemId,
    note: Annotated[str, typer.Option("--note", help="What is wrong: the agent reads it.")],
) -> None:
    """Fail the operator_approval checks, or send a held WorkItem back with fresh attempts: the
    item is runnable again and the agent told why."""
    with api(ctx) as client:
        view = client.verdict(agent_id, work_item_id, passed=False, note=note)
    typer.echo(_said(view))
    for line in check_lines(view):
        typer.echo(f"  {line}")


def register(app: typer.Typer) -> None:
    app.command("cancel")(cancel)
    app.command("put-down")(put_down)
    app.command("approve")(approve)
    app.command("reject")(reject)
