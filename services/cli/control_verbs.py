"""The operator's verbs that control an agent's life: pause, resume, retire."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.board import Json
from services.cli.verbs import AgentId, api


def _said(view: Json) -> str:
    line = f"{view.get('agent_id')}: {view.get('posture')}"
    why = view.get("why_not_running")
    if isinstance(why, dict) and why.get("kind") in ("paused", "retired"):
        line += f" · {why['kind']}: {why.get('reason')}"
    return line


def pause(
    ctx: typer.Context,
    agent_id: AgentId,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in history).")],
    interrupt: Annotated[
        bool,
        typer.Option(
            "--interrupt",
            help="End the running turn at once instead of after its current round.",
        ),
    ] = False,
) -> None:
    """Pause an agent: no turn starts until `longrun resume`; messages are still taken."""
    with api(ctx) as client:
        view = client.pause(agent_id, reason, interrupt=interrupt)
    typer.echo(_said(view))


def resume(ctx: typer.Context, agent_id: AgentId) -> None:
    """Resume a paused agent: it runs again if it has work."""
    with api(ctx) as client:
        view = client.resume(agent_id)
    typer.echo(_said(view))


def retire(
    ctx: typer.Context,
    agent_id: AgentId,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in history).")],
) -> None:
    """Retire an agent for good: its open WorkItems are cancelled and its tokens refused."""
    with api(ctx) as client:
        view = client.retire(agent_id, reason)
    typer.echo(_said(view))


def register(app: typer.Typer) -> None:
    app.command("pause")(pause)
    app.command("resume")(resume)
    app.command("retire")(retire)
