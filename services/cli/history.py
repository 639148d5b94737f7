"""`longrun history` (verify, anchor) and `longrun keygen`: the hash chain and its signed heads.

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

from services.cli.verbs import AgentId, api
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
    if answer.get("ok") is True:
        typer.echo(
            f"history of {agent_id}: ok ({answer.get('count')} events, head {answer.get('head')})"
        )
        return
    raise _fail(
        f"history of {agent_id}: NOT ok, first bad event at index "
        f"{answer.get('first_bad_index')} of {answer.get('count')}"
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
