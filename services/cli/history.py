"""`longrun history` (show, verify, anchor) and `longrun keygen`: the events with each external
call's derived outcome, the hash chain and its signed heads.

`verify` asks longrun to recompute the chain; `verify --anchor FILE` does the work itself, from
the events it reads: the anchor's signature (with `--public-key`, or the key longrun lists under
the anchor's key id), that the history still holds the anchor's hash at the anchor's seq, and
that the whole chain recomputes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from services.cli.board import Json
from services.cli.verbs import AgentId, JsonFlag, api
from shared.domain.signing import (
    SigningKey,
    SigningKeyError,
    check_chain_through,
    parse_anchor,
    public_key_id,
    signature_valid,
)

history_app = typer.Typer(help="An agent's hash-chained history.", no_args_is_help=True)

AnchorOption = Annotated[
    Path | None,
    typer.Option(
        "--anchor",
        help="A head saved by `longrun history anchor`: check the history still passes it.",
        exists=True,
        dir_okay=False,
    ),
]
PublicKeyOption = Annotated[
    str | None,
    typer.Option(
        "--public-key",
        help="Base64 Ed25519 public key to check the anchor's signature with (default: the key "
        "longrun lists under the anchor's key id; pass it to trust nothing longrun stores).",
    ),
]


def _fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(1)


@history_app.command("verify")
def history_verify(
    ctx: typer.Context,
    agent_id: AgentId,
    anchor: AnchorOption = None,
    public_key: PublicKeyOption = None,
) -> None:
    """Recompute the history's hash chain; exit 1 when it is not intact (or, with --anchor,
    when it no longer passes through the saved head)."""
    if anchor is not None:
        _verify_against_anchor(ctx, agent_id, anchor, public_key)
        return
    with api(ctx) as client:
        answer = client.history_verify(agent_id)
    archived = answer.get("archived") or 0
    where = f", {archived} of them archived" if archived else ""
    if answer.get("ok") is True:
        typer.echo(
            f"history of {agent_id}: ok ({answer.get('count')} events{where}, head "
            f"{answer.get('head')})"
        )
        return
    index = answer.get("first_bad_index")
    seq = answer.get("first_bad_seq") or (index + 1 if isinstance(index, int) else None)
    part = "an archived segment" if isinstance(seq, int) and seq <= archived else "Redis"
    raise _fail(
        f"history of {agent_id}: NOT ok, first bad event at index {index} (seq {seq}, in "
        f"{part}) of {answer.get('count')}"
    )


def _verify_against_anchor(
    ctx: typer.Context, agent_id: str, path: Path, public_key: str | None
) -> None:
    try:
        head = parse_anchor(json.loads(path.read_text()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise _fail(f"anchor {path}: {exc}") from None
    if head.agent_id != agent_id:
        raise _fail(f"anchor {path} is a head of {head.agent_id!r}, not of {agent_id!r}")
    with api(ctx) as client:
        if public_key is None:
            listed = {k["key_id"]: k["public_key"] for k in client.signing_keys()}
            public_key = listed.get(head.key_id)
            if public_key is None:
                raise _fail(
                    f"signature: longrun lists no public key {head.key_id}; pass --public-key"
                )
        events = client.history_all(agent_id)
    try:
        good = signature_valid(head, public_key)
    except SigningKeyError as exc:
        raise _fail(f"--public-key: {exc}") from None
    if not good:
        raise _fail(
            f"signature: the anchor's signature does not verify with key "
            f"{public_key_id(public_key)} (the anchor names {head.key_id})"
        )
    check = check_chain_through(events, head)
    if not check.ok:
        raise _fail(f"history of {agent_id}: {check.message}")
    typer.echo(f"history of {agent_id}: {check.message}; signature by key {head.key_id} good")


@history_app.command("show")
def history_show(
    ctx: typer.Context,
    agent_id: AgentId,
    after: Annotated[int, typer.Option(min=0, help="Events with seq > this.")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Events at most.")] = 100,
    as_json: JsonFlag = False,
) -> None:
    """The agent's history events, ascending; each external call with its outcome (derived by
    the server: `unknown` once the turn that started it ended without recording one)."""
    with api(ctx) as client:
        page = client.history(agent_id, after=after, limit=limit)
    if as_json:
        typer.echo(json.dumps(page, indent=2, sort_keys=True))
        return
    outcomes = page.get("call_outcomes") or {}
    for event in page.get("events", []):
        typer.echo(history_line(event, outcomes))


def history_line(event: Json, outcomes: Json) -> str:
    """One event: seq, time, type, WorkItem; an external call's server, tool and outcome."""
    data = event.get("data") or {}
    line = f"{event.get('seq')}  {event.get('at')}  {event.get('type')}"
    if event.get("work_item_id"):
        line += f"  {event['work_item_id']}"
    if event.get("type") == "tool_call_started":
        outcome = outcomes.get(str(data.get("call_id")), "?")
        line += f"  {data.get('server')}__{data.get('tool')} {data.get('call_id')}"
        line += f"  outcome: {outcome}"
    elif event.get("type") == "tool_call_finished":
        line += f"  {data.get('call_id')}  outcome: {data.get('outcome')}"
    return line


@history_app.command("anchor")
def history_anchor(ctx: typer.Context, agent_id: AgentId) -> None:
    """Print the agent's history head signed by the ledger, as JSON: save it
    (`> head.json`) and check against it later with `history verify --anchor`."""
    with api(ctx) as client:
        head = client.history_head(agent_id)
    typer.echo(json.dumps(head, indent=2, sort_keys=True))


def keygen() -> None:
    """Make an Ed25519 signing key: prints the private key (for LONGRUN_SIGNING_KEY) on stdout,
    and its id and public key on stderr."""
    key = SigningKey.generate()
    typer.echo(key.private_base64())
    typer.echo(f"longrun signing-key-id {key.key_id}", err=True)
    typer.echo(f"longrun public-key {key.public_key}", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(history_app, name="history")
    app.command("keygen")(keygen)
