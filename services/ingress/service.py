"""The callback use case shared by the HTTP route and the callbacks stream: check a delivery,
turn it into one RecordCallback command, send it, and say what the ledger did with it."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass
from typing import Literal

import orjson
from pydantic import ValidationError

from services.ingress.ratelimit import RateLimiter
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
DUPLICATE = "duplicate"


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
    disposition = str(result.get("disposition", DUPLICATE))
    if reply.outcome is CommandOutcome.DUPLICATE:
        disposition = DUPLICATE
    return Accepted(command.delivery_id, disposition, wait_id if isinstance(wait_id, str) else None)


class CallbackIntake:
    """The callback use case for both paths; one instance per process.

    Identical deliveries in flight at once (same capability, same delivery id) share one ledger
    round trip: the ledger client hands every waiter of a command id the first reply, so without
    this both callers would be told `triggered` and the metric would count twice.
    """

    def __init__(
        self,
        client: LedgerClient,
        metrics: Metrics,
        *,
        max_body_bytes: int,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.limiter = limiter
        self._in_flight: dict[str, asyncio.Future[Accepted]] = {}

    def admit(self, token: str) -> float:
        """Take one token from the capability's bucket: 0.0 when admitted, else the seconds to
        wait (and the delivery is counted as rejected). One bucket per capability for HTTP and
        the stream alike."""
        if self.limiter is None:
            return 0.0
        wait = self.limiter.take(hash_token(token))
        if wait > 0:
            self.metrics.callbacks.labels(outcome="rejected").inc()
        return wait

    async def accept(self, delivery: Delivery) -> Accepted:
        """Record one delivery; raises CallbackRefused (counted as rejected) or a transient
        error (LedgerTimeout, Redis down: nothing is known to have changed)."""
        try:
            command = callback_command(delivery, self.max_body_bytes)
            accepted = await self._once(command)
        except CallbackRefused:
            self.metrics.callbacks.labels(outcome="rejected").inc()
            raise
        self.metrics.callbacks.labels(outcome=accepted.disposition).inc()
        return accepted

    async def _once(self, command: RecordCallback) -> Accepted:
        first = self._in_flight.get(command.command_id)
        if first is not None:
            # Shielded: a caller that goes away must not cancel the others' answer.
            accepted = await asyncio.shield(first)
            return Accepted(accepted.delivery_id, DUPLICATE, accepted.wait_id)
        task = asyncio.ensure_future(self._send(command))
        self._in_flight[command.command_id] = task
        task.add_done_callback(lambda done: self._settled(command.command_id, done))
        return await asyncio.shield(task)

    async def _send(self, command: RecordCallback) -> Accepted:
        return outcome_of(command, await self.client.send(command))

    def _settled(self, command_id: str, task: asyncio.Future[Accepted]) -> None:
        self._in_flight.pop(command_id, None)
        if not task.cancelled():
            task.exception()  # retrieved here too, in case every caller went away
