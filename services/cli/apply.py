"""`longrun apply -f FILE [--dry-run]`: make the agents and presets of a YAML file exist with
their specs, and `longrun agent show ID`: one agent's state, spec and model usage.

Apply plans every entry first (reading each one's current spec) and refuses the whole file on a
schema error or a loop change before anything is written; then it creates or updates the entries
whose plan says so. One line per agent: `created ID`, `updated ID (fields)` or `unchanged ID`;
one per preset (`kind: preset`): `created preset NAME`, `updated preset NAME (fields)` or
`unchanged preset NAME`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from services.cli.client import ApiError, LongrunClient
from shared.agents_file import AgentEntry, AgentsFileError, Entry, PresetEntry, read_agents_file
from shared.domain.specs import AgentSpec, changed_fields


@dataclass(frozen=True, slots=True)
class Step:
    """What applying one entry does: `action` is created, updated or unchanged."""

    entry: Entry
    action: str
    changed: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        entry = self.entry
        what = entry.id if isinstance(entry, AgentEntry) else f"preset {entry.name}"
        if self.action == "updated":
            return f"updated {what} ({', '.join(self.changed)})"
        return f"{self.action} {what}"


def plan_step(name: str, line: int, entry: AgentEntry, current: dict[str, Any] | None) -> Step:
    """Compare one entry with the agent as it is now (None: it does not exist)."""
    if current is None:
        return Step(entry, "created")
    loop = current.get("loop")
    if entry.loop is not None and entry.loop.value != loop:
        raise AgentsFileError(
            f"{name}:{line}: agent {entry.id!r} runs the {loop} loop; "
            "an agent's loop never changes after creation"
        )
    if entry.spec is None:
        return Step(entry, "unchanged")
    changed = changed_fields(AgentSpec.model_validate(current.get("spec") or {}), entry.spec)
    return Step(entry, "updated", tuple(changed)) if changed else Step(entry, "unchanged")


def plan_preset(entry: PresetEntry, current: dict[str, Any] | None) -> Step:
    """Compare one preset with the stored one (None: there is none)."""
    if current is None:
        return Step(entry, "created")
    changed = changed_fields(AgentSpec.model_validate(current.get("spec") or {}), entry.spec)
    return Step(entry, "updated", tuple(changed)) if changed else Step(entry, "unchanged")


def plan(client: LongrunClient, path: Path) -> list[Step]:
    located = read_agents_file(path)
    return [
        plan_step(str(path), line, entry, client.find_agent(entry.id))
        if isinstance(entry, AgentEntry)
        else plan_preset(entry, client.find_preset(entry.name))
        for line, entry in located
    ]


def carry_out(client: LongrunClient, step: Step) -> list[str]:
    """Apply one planned step; the lines to print (a created agent's token is shown once)."""
    entry = step.entry
    if step.action == "unchanged":
        return [step.line]
    if isinstance(entry, PresetEntry):
        client.put_preset(entry.name, entry.spec.model_dump(mode="json"))
        return [step.line]
    spec = entry.spec.model_dump(mode="json") if entry.spec is not None else None
    loop = entry.loop.value if entry.loop is not None else None
    answer = client.put_agent(entry.id, loop, spec)
    if "agent_token" in answer:
        return [f"created {entry.id}", f"agent-token {entry.id} {answer['agent_token']}"]
    return [step.line]


FileOption = Annotated[
    Path,
    typer.Option(
        "-f",
        "--file",
        help="A YAML list of agents {id, loop?, spec?} and presets {kind: preset, name, spec}.",
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print what would change; change nothing.")]


def run_apply(client: LongrunClient, path: Path, *, dry_run: bool) -> None:
    """Plan the whole file (exit 1 on the first bad line), then apply it unless dry."""
    try:
        steps = plan(client, path)
    except AgentsFileError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    for step in steps:
        for text in [step.line] if dry_run else carry_out(client, step):
            typer.echo(text)


def show_agent(client: LongrunClient, agent_id: str) -> None:
    """The agent's state and spec as JSON, then its model usage when the API reports it."""
    agent = client.get_agent(agent_id)
    try:
        usage: Any = client.usage(agent_id)
    except ApiError as exc:
        if exc.status != 404 or exc.kind == "agent_not_found":
            raise
        usage = None  # a longrun without the usage route
    typer.echo(json.dumps({**agent, "usage": usage}, indent=2, sort_keys=True))
