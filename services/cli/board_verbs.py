"""`longrun board`: show the board (a table, the org mirror, JSON), and `longrun board apply` an
edited org mirror back as operator commands."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from services.cli.board import AgentBoard, board_table, render_json
from services.cli.org.apply import run_board_apply
from services.cli.org.keywords import KeywordError, KeywordSet
from services.cli.org.render import render_org
from services.cli.verbs import api


class BoardFormat(StrEnum):
    TABLE = "table"
    ORG = "org"
    JSON = "json"


class BoardGroup(TyperGroup):
    """`longrun board [ID] [--format F]` shows the board and `longrun board apply FILE` applies
    one: arguments that name no subcommand are `show`'s (so an agent named `apply` is shown with
    `longrun board show apply`)."""

    # `ctx` is typer's vendored click Context, whose module is private: typed loosely here.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["show", *args]
        return super().parse_args(ctx, args)


board_app = typer.Typer(
    cls=BoardGroup,
    help="The WorkItem board: `longrun board [ID] [--format table|org|json]` shows it, "
    "`longrun board apply FILE.org` applies the operator's edits of its org mirror.",
)

Keywords = Annotated[
    str | None,
    typer.Option(
        "--keywords",
        help="The operator's org keywords by position, e.g. "
        '"ASSIGNED RESEARCH WRITING | PUBLISHED KILLED" (for TODO NEXT DOING WAITING BLOCKED '
        "| DONE CANCELLED).",
    ),
]


def _keyword_set(spec: str | None) -> KeywordSet:
    try:
        return KeywordSet.parse(spec) if spec is not None else KeywordSet()
    except KeywordError as exc:
        raise typer.BadParameter(str(exc), param_hint="--keywords") from None


@board_app.command("show")
def show(
    ctx: typer.Context,
    agent_id: Annotated[str | None, typer.Argument(help="One agent; all when omitted.")] = None,
    format_: Annotated[BoardFormat, typer.Option("--format", help="Output format.")] = (
        BoardFormat.TABLE
    ),
    keywords: Keywords = None,
) -> None:
    """The WorkItem board: a table, the org mirror (which `board apply` reads back), or JSON."""
    chosen = _keyword_set(keywords)
    with api(ctx) as client:
        ids = [agent_id] if agent_id else [a["agent_id"] for a in client.list_agents()]
        boards = [
            AgentBoard(client.get_agent(i), client.list_work_items(i)["work_items"]) for i in ids
        ]
    if format_ is BoardFormat.ORG:
        typer.echo(render_org(boards, chosen), nl=False)
    elif format_ is BoardFormat.JSON:
        typer.echo(render_json(boards))
    else:
        console = Console(emoji=False)
        for one in boards:
            console.print(board_table(one))
        if not boards:
            typer.echo("no agents yet: create one with `longrun agent create ID`")


@board_app.command("apply")
def apply_org(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="An org file `board --format org` wrote, edited.")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be applied; send nothing.")
    ] = False,
    keywords: Keywords = None,
) -> None:
    """Apply the operator's edits of an exported org board as operator commands.

    A keyword moved to NEXT or DOING picks the item, the current item moved to TODO is put
    down, CANCELLED cancels, a new headline under an agent asks that agent to take it on, and
    the lines of a `* verdicts` block (`pick up: <headline>`, `put down: ...`, `cancel: ...`)
    do the same by headline. One line per headline: applied, unchanged or refused (with why);
    exit 1 when anything is refused."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.echo(f"error: cannot read {file}: {exc}", err=True)
        raise typer.Exit(1) from None
    with api(ctx) as client:
        code = run_board_apply(
            client, str(file), text, keywords=keywords, dry_run=dry_run, echo=typer.echo
        )
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.add_typer(board_app, name="board")
