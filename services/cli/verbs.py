"""The operator's everyday verbs over the HTTP API: agent, apply, send, work, callback (the board
is `board_verbs`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console

from services.cli.apply import DryRun, FileOption, run_apply, show_agent
from services.cli.board import Json
from services.cli.client import DEFAULT_URL, ApiError, Callback, LongrunClient, Unreachable
from services.cli.replies import wait_for_answer
from services.cli.work_views import recent_trace, work_detail, work_list_table
from shared.domain.records import AgentLoop
from shared.domain.views import ListFilter

UNAUTHORIZED_HINT = (
    "set LONGRUN_OPERATOR_TOKEN to the token `longrun up` printed "
    "(its `longrun operator-token <token>` line)"
)


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the verbs talk to; tests put a transport here (`CliRunner.invoke(..., obj=...)`)."""

    url: str = DEFAULT_URL
    token: str | None = None
    transport: httpx.BaseTransport | None = None

    def client(self) -> LongrunClient:
        return LongrunClient(self.url, self.token, transport=self.transport)


def connection(ctx: typer.Context) -> Connection:
    obj = ctx.find_object(Connection)
    return obj if obj is not None else Connection()


@contextmanager
def api(ctx: typer.Context) -> Iterator[LongrunClient]:
    """A client whose failures become one clear line on stderr and exit code 1."""
    client = connection(ctx).client()
    try:
        yield client
    except Unreachable as exc:
        typer.echo(f"error: {exc} (is `longrun up` running? set LONGRUN_URL)", err=True)
        raise typer.Exit(1) from None
    except ApiError as exc:
        hint = f"; {UNAUTHORIZED_HINT}" if exc.status == 401 else ""
        typer.echo(f"error: {exc}{hint}", err=True)
        raise typer.Exit(1) from None
    finally:
        client.close()


def _echo_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True))


AgentId = Annotated[str, typer.Argument(help="The agent's id.")]
WorkItemId = Annotated[str, typer.Argument(help="A WorkItem id (wi_...).")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the raw JSON answer.")]

agent_app = typer.Typer(help="Create and inspect agents.", no_args_is_help=True)
work_app = typer.Typer(help="List and show an agent's WorkItems.", no_args_is_help=True)


@agent_app.command("create")
def agent_create(
    ctx: typer.Context,
    agent_id: AgentId,
    loop: Annotated[
        AgentLoop, typer.Option(help="builtin: longrun runs its turns; external: its own loop.")
    ] = AgentLoop.BUILTIN,
) -> None:
    """Create an agent (idempotent); its token and callback URL are shown once."""
    with api(ctx) as client:
        answer = client.put_agent(agent_id, loop.value)
    fresh = "agent_token" in answer
    typer.echo(
        f"agent {answer.get('agent_id', agent_id)} {'created' if fresh else 'exists'} "
        f"(loop {answer.get('loop', loop.value)})"
    )
    if fresh:
        typer.echo(f"agent-token {answer['agent_token']}  (shown once)")
    if answer.get("callback_url"):
        typer.echo(f"callback-url {answer['callback_url']}")


@agent_app.command("list")
def agent_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every agent with its posture and current WorkItem."""
    with api(ctx) as client:
        agents = client.list_agents()
    if as_json:
        _echo_json({"agents": agents})
        return
    for agent in agents:
        typer.echo(
            f"{agent.get('agent_id')}  {agent.get('loop')}  {agent.get('posture')}  "
            f"current={agent.get('current_work_item_id') or '-'}"
        )


@agent_app.command("show")
def agent_show(ctx: typer.Context, agent_id: AgentId) -> None:
    """The agent's state (posture, wake budget, inbox, counts by readiness), spec and usage."""
    with api(ctx) as client:
        show_agent(client, agent_id)


def apply(ctx: typer.Context, file: FileOption, dry_run: DryRun = False) -> None:
    """Create or update the agents of a YAML file; one line per agent."""
    with api(ctx) as client:
        run_apply(client, file, dry_run=dry_run)


def send(
    ctx: typer.Context,
    agent_id: AgentId,
    text: Annotated[str, typer.Argument(help="The operator message.")],
    *,
    work_item: Annotated[
        str | None, typer.Option("--work-item", help="Answer this WorkItem's question.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the agent's reply and print it.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, help="Seconds --wait waits for the reply.")
    ] = 300.0,
) -> None:
    """Send an operator message; it wakes the agent. With --wait, print the agent's reply."""
    with api(ctx) as client:
        answer = client.send_message(agent_id, text, work_item)
        message_id = str(answer.get("message_id"))
        sent = f"message {message_id} sent to {agent_id}"
        if not wait:
            typer.echo(sent)
            return
        typer.echo(sent, err=True)  # stdout carries the reply alone
        found = wait_for_answer(client, agent_id, message_id, timeout)
    if found is None:
        typer.echo(f"error: no reply from {agent_id} within {timeout:g}s", err=True)
        raise typer.Exit(1)
    if found.failed:
        typer.echo(f"error: the message was not delivered: {found.text}", err=True)
        raise typer.Exit(1)
    typer.echo(found.text)


@work_app.command("list")
def work_list(
    ctx: typer.Context,
    agent_id: AgentId,
    filter_: Annotated[ListFilter, typer.Option("--filter", help="Which WorkItems.")] = (
        ListFilter.ALL
    ),
    limit: Annotated[int, typer.Option(min=1, help="WorkItems at most (read page by page).")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """The agent's WorkItems in ranking order."""
    with api(ctx) as client:
        answer = client.list_work_items(agent_id, filter_.value, limit)
    if as_json:
        _echo_json(answer)
        return
    Console(emoji=False).print(work_list_table(agent_id, answer))


@work_app.command("show")
def work_show(
    ctx: typer.Context, agent_id: AgentId, work_item_id: WorkItemId, as_json: JsonFlag = False
) -> None:
    """One WorkItem: state, plan, todos, blocker, waits, report, then its process notes and
    the trace its next turn would start from (recorded rounds no note covers yet)."""
    with api(ctx) as client:
        answer = client.get_work_item(agent_id, work_item_id, notes=True)
        view = answer.get("work_item") or {}
        tree = delegation_tree(client, agent_id, work_item_id)
        trace = recent_trace(client, agent_id, work_item_id, view.get("process_notes") or [])
    if as_json:
        delegations = [record for _, record in tree]
        _echo_json({**answer, "delegations": delegations, "process_trace": trace})
        return
    Console(emoji=False).print(work_detail(view, tree, trace))


def delegation_tree(
    client: LongrunClient, agent_id: str, work_item_id: str, depth: int = 0
) -> list[tuple[int, Json]]:
    """The delegations made from a WorkItem, and from the items they made, depth first."""
    tree: list[tuple[int, Json]] = []
    for record in client.delegations(agent_id, "out"):
        if record.get("parent_work_item_id") != work_item_id:
            continue
        tree.append((depth, record))
        if record.get("child_work_item_id") is None:
            continue  # a spawned child not bound yet made nothing from it
        child, item = str(record["child_agent_id"]), str(record["child_work_item_id"])
        tree += delegation_tree(client, child, item, depth + 1)
    return tree


def callback(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="A capability callback URL (…/v1/callbacks/<token>).")],
    data: Annotated[str, typer.Option(help="Body: JSON or text; @path reads a file.")] = "{}",
    idempotency_key: Annotated[str | None, typer.Option(help="Dedups retried deliveries.")] = None,
) -> None:
    """POST a callback to a capability URL (no operator token is sent)."""
    body = Path(data[1:]).read_text() if data.startswith("@") else data
    with api(ctx) as client:
        answer = client.post_callback(url, Callback.from_text(body, idempotency_key))
    _echo_json(answer)


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")
    app.command("apply")(apply)
    app.command("send")(send)
    app.add_typer(work_app, name="work")
    app.command("callback")(callback)
