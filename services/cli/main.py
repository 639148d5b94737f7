"""The `longrun` command: `up`, `demo` and the operator's verbs, wired as one typer app."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

from services.cli import history, runs
from services.cli.board_verbs import register as register_board
from services.cli.client import DEFAULT_URL
from services.cli.control_verbs import register as register_control
from services.cli.demo import DemoOptions, run_demo
from services.cli.gate_verbs import register as register_gate
from services.cli.up import UpOptions, run_up
from services.cli.verbs import Connection, register


class Provider(StrEnum):
    SCRIPTED = "scripted"
    OPENAI = "openai"


app = typer.Typer(
    name="longrun",
    help="longrun: a runtime for long-lived AI agents whose durable unit of work is the WorkItem.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    ctx: typer.Context,
    url: Annotated[
        str, typer.Option(envvar="LONGRUN_URL", help="Where longrun's HTTP API answers.")
    ] = DEFAULT_URL,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="LONGRUN_OPERATOR_TOKEN", help="The operator token.", show_default=False
        ),
    ] = None,
) -> None:
    """Run longrun (`up`, `demo`) and operate it over its HTTP API."""
    given = ctx.obj if isinstance(ctx.obj, Connection) else Connection()
    ctx.obj = Connection(url=url, token=token, transport=given.transport)


RedisUrl = Annotated[
    str | None,
    typer.Option(help="Use this Redis (default: REDIS_URL, else a private redis-server)."),
]


@app.command()
def up(
    redis_url: RedisUrl = None,
    http_port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="Ingress port (default LONGRUN_HTTP_PORT or 8080; 0: free)."
        ),
    ] = None,
    executors: Annotated[int, typer.Option(min=1, max=64, help="Turn-executor processes.")] = 1,
    provider: Annotated[
        Provider | None, typer.Option(help="Model provider (default LONGRUN_PROVIDER or scripted).")
    ] = None,
) -> None:
    """Run the four services as separate processes until SIGINT/SIGTERM."""
    options = UpOptions(
        redis_url=redis_url,
        http_port=http_port,
        executors=executors,
        provider=provider.value if provider else None,
    )
    raise typer.Exit(run_up(options, sys.stdout, sys.stderr))


@app.command()
def demo(
    redis_url: Annotated[
        str | None, typer.Option(help="Use this Redis (default: a private redis-server).")
    ] = None,
    http_port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Ingress port (default: a free one).")
    ] = None,
) -> None:
    """Bring up the stack and run a scripted agent through a whole WorkItem, end to end."""
    code = run_demo(DemoOptions(redis_url=redis_url, http_port=http_port), Console(emoji=False))
    raise typer.Exit(code)


register(app)
register_gate(app)
register_control(app)
register_board(app)
history.register(app)
runs.register(app)


def main() -> None:
    app()
