"""The callback use case shared by the HTTP route and the callbacks stream: check a delivery,
turn it into one RecordCallback command, send it, and say what the ledger did with it."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Literal

import orjson
from pydantic import ValidationError

from shared.domain.capability import agent_of_token, hash_token
from shared.domain.errors import ErrorKind
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.wire.commands import CallbackSource, RecordCallback
from shared.wire.replies import CommandOutcome, CommandReply

RefusalKind = Literal["forbidden", "invalid_request", "payload_too_large"]
REFUSAL_STATUS: dict[RefusalKind, int] = {
    "forbidden": 403,
    "invalid_request": 400,
    "payload_too_large": 413,
}
UNKNOWN_TOKEN = "unknown capability token"  # noqa: S105 - a message, not a secret


@dataclass(frozen=True, slots=True)
class Delivery:
    token: str
    body: bytes
    content_type: str
    delivery_id: str
    source: CallbackSource


@dataclass(frozen=True, slots=True)
class Accepted:
    delivery_id: str
    disposition: str
    wait_id: str | None = None


class CallbackRefused(Exception):
    """A delivery that changes nothing: the sender learns why (HTTP status or dead-letter)."""

    def __init__(self, kind: RefusalKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message

    @property
    def status(self) -> int:
        return REFUSAL_STATUS[self.kind]


def is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def encode_body(body: bytes, content_type: str) -> tuple[str, Literal["utf-8", "base64"]]:
    """Text stays text; bytes that are not UTF-8 travel as base64. JSON must parse."""
    if is_json(content_type):
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise CallbackRefused(
                "invalid_request", f"the content type is JSON but the body is not: {exc}"
            ) from None
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def callback_command_id(token_hash: str, delivery_id: str) -> str:
    """One command per (capability, delivery): a retried or redelivered delivery, from either
    path, gets the ledger's first answer back instead of a second effect."""
    digest = hashlib.sha256(f"{token_hash}\n{delivery_id}".encode()).hexdigest()
    return f"cb_{digest[:40]}"


def callback_command(delivery: Delivery, max_body_bytes: int) -> RecordCallback:
    """The command for a delivery, or CallbackRefused; pure, so both paths check alike."""
    if len(delivery.body) > max_body_bytes:
        raise CallbackRefused(
            "payload_too_large",
            f"the body has {len(delivery.body)} bytes; at most {max_body_bytes}",
        )
    agent_id = agent_of_token(delivery.token)
    if agent_id is None:
        raise CallbackRefused("forbidden", UNKNOWN_TOKEN)
    body, encoding = encode_body(delivery.body, delivery.content_type)
    token_hash = hash_token(delivery.token)
    try:
        return RecordCallback(
            command_id=callback_command_id(token_hash, delivery.delivery_id),
            agent_id=agent_id,
            token_hash=token_hash,
            delivery_id=delivery.delivery_id,
            content_type=delivery.content_type,
            body=body,
            body_encoding=encoding,
            source=delivery.source,
        )
    except ValidationError:
        # The token names no possible agent id: it cannot be one longrun minted.
        raise CallbackRefused("forbidden", UNKNOWN_TOKEN) from None


def outcome_of(command: RecordCallback, reply: CommandReply) -> Accepted:
    if reply.error is not None:
        # Only the capability's own verdicts are worth repeating; anything else (an agent that
        # does not exist) would tell a stranger what exists.
        known = reply.error.kind is ErrorKind.ACCESS_DENIED
        raise CallbackRefused("forbidden", reply.error.message if known else UNKNOWN_TOKEN)
    result = reply.result or {}
    wait_id = result.get("wait_id")
    disposition = str(result.get("disposition", "duplicate"))
    if reply.outcome is CommandOutcome.DUPLICATE:
        disposition = "duplicate"
    return Accepted(command.delivery_id, disposition, wait_id if isinstance(wait_id, str) else None)


class CallbackIntake:
    def __init__(self, client: LedgerClient, metrics: Metrics, *, max_body_bytes: int) -> None:
        self.client = client
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def accept(self, delivery: Delivery) -> Accepted:
        """Record one delivery; raises CallbackRefused (counted as rejected) or a transient
        error (LedgerTimeout, Redis down: nothing is known to have changed)."""
        try:
            command = callback_command(delivery, self.max_body_bytes)
            accepted = outcome_of(command, await self.client.send(command))
        except CallbackRefused:
            self.metrics.callbacks.labels(outcome="rejected").inc()
            raise
        self.metrics.callbacks.labels(outcome=accepted.disposition).inc()
        return accepted
