"""`longrun runs AGENT [WI]`: what ran (one line per WorkItem, newest first, in the manner of
a `telemetry` command) and, for one WorkItem, what broke (a line per failed step with its seq)."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
import typer

from services.cli.verbs import AgentId, JsonFlag, api

Json = dict[str, Any]
COLUMNS: tuple[str, ...] = ("WORK_ITEM", "STATE", "TURNS", "ROUNDS", "CALLS", "ERRORS")
COLUMNS += ("CHECKS_FAILED", "CRASHES", "TOKENS", "MS")


def _tokens(run: Json) -> int:
    tokens = run.get("tokens") or {}
    return int(tokens.get("input") or 0) + int(tokens.get("output") or 0)


def run_row(run: Json) -> tuple[str, ...]:
    return (
        str(run["work_item_id"]),
        str(run["state"]),
        *(str(run[k]) for k in ("turns", "rounds", "tool_calls", "tool_errors")),
        *(str(run[k]) for k in ("checks_failed", "crashes")),
        str(_tokens(run)),
        str(run["wall_ms"]),
    )


def table(runs: list[Json]) -> list[str]:
    """A header line, then one line per run, columns aligned."""
    rows = [COLUMNS, *(run_row(run) for run in runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return [" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def run_lines(run: Json) -> list[str]:
    """One WorkItem: its figures on one line, then `! seq N kind: detail` per failed step."""
    head = (
        f"{run['work_item_id']} state={run['state']} turns={run['turns']} "
        f"rounds={run['rounds']} calls={run['tool_calls']} errors={run['tool_errors']} "
        f"checks_failed={run['checks_failed']} crashes={run['crashes']} "
        f"tokens={_tokens(run)} wall_ms={run['wall_ms']} "
        f"first_at={run['first_at']} last_at={run['last_at']}"
    )
    steps = [
        f"! seq {s['seq']} {s['kind']}: {' '.join(str(s['detail']).split())}"
        for s in run.get("failed_steps") or []
    ]
    return [head, *steps]


def runs(
    ctx: typer.Context,
    agent_id: AgentId,
    work_item_id: Annotated[
        str | None, typer.Argument(help="A WorkItem id (wi_...): its run and failed steps.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="WorkItems listed.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """What ran on each WorkItem (turns, rounds, tool calls and errors, failed checks, crashes,
    tokens, milliseconds), newest first; with a WorkItem id, what broke in it."""
    with api(ctx) as client:
        if work_item_id:
            answer = client.run(agent_id, work_item_id)
        else:
            answer = client.runs(agent_id, limit)
    if as_json:
        typer.echo(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode())
        return
    lines = run_lines(answer) if work_item_id else table(answer["runs"])
    for line in lines:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
