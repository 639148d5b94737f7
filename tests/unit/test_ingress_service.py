"""The callback use case without Redis: which deliveries become which command, how the ledger's
reply reads to the sender, and what is counted."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.ingress.ratelimit import RateLimiter
from services.ingress.service import (
    UNKNOWN_TOKEN,
    Accepted,
    CallbackIntake,
    CallbackRefused,
    Delivery,
    callback_command,
    encode_body,
    is_json,
    outcome_of,
)
from shared.domain.capability import hash_token
from shared.domain.errors import ErrorKind, ToolErrorBody
from shared.metrics import build_metrics
from shared.wire.commands import CallbackSource, RecordCallback
from shared.wire.replies import CommandOutcome, CommandReply

TOKEN = "agent-1~" + "s" * 32
LIMIT = 1024


def delivery(**overrides: Any) -> Delivery:
    values: dict[str, Any] = {
        "token": TOKEN,
        "body": b'{"ok": true}',
        "content_type": "application/json",
        "delivery_id": "d-1",
        "source": CallbackSource.HTTP,
    }
    values.update(overrides)
    return Delivery(**values)


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("application/vnd.github+json", True),
        ("application/problem+json", True),
        ("text/json", False),
        ("text/plain", False),
        ("application/octet-stream", False),
        ("", False),
    ],
)
def test_json_content_types(content_type: str, expected: bool) -> None:
    assert is_json(content_type) is expected


def test_text_stays_text_and_other_bytes_travel_as_base64() -> None:
    assert encode_body("héllo".encode(), "text/plain") == ("héllo", "utf-8")
    raw = bytes([0xFF, 0x00, 0x80])
    body, encoding = encode_body(raw, "application/octet-stream")
    assert encoding == "base64"
    assert base64.b64decode(body) == raw
    assert encode_body(b"", "text/plain") == ("", "utf-8")


@pytest.mark.parametrize("body", [b"{nope", b"", b"\xff\xfe", b"[1,"])
def test_a_json_content_type_needs_a_json_body(body: bytes) -> None:
    with pytest.raises(CallbackRefused) as refused:
        encode_body(body, "application/json")
    assert refused.value.kind == "invalid_request"
    assert refused.value.status == 400


def test_a_delivery_becomes_one_record_callback() -> None:
    command = callback_command(delivery(), LIMIT)
    assert isinstance(command, RecordCallback)
    assert command.agent_id == "agent-1"
    assert command.token_hash == hash_token(TOKEN)
    assert (command.delivery_id, command.body, command.body_encoding) == (
        "d-1",
        '{"ok": true}',
        "utf-8",
    )
    assert command.source is CallbackSource.HTTP


def test_the_command_id_is_one_per_capability_and_delivery_whatever_the_path() -> None:
    http = callback_command(delivery(), LIMIT)
    stream = callback_command(delivery(source=CallbackSource.STREAM, body=b"[]"), LIMIT)
    assert http.command_id == stream.command_id
    other_delivery = callback_command(delivery(delivery_id="d-2"), LIMIT)
    other_token = callback_command(delivery(token="agent-1~" + "t" * 32), LIMIT)
    assert len({http.command_id, other_delivery.command_id, other_token.command_id}) == 3
    assert len(http.command_id) <= 200


@pytest.mark.parametrize(
    "token", ["no-separator", "agent-1~short", "~" + "s" * 20, "bad agent~" + "s" * 20]
)
def test_a_token_longrun_could_not_have_minted_is_forbidden(token: str) -> None:
    with pytest.raises(CallbackRefused) as refused:
        callback_command(delivery(token=token), LIMIT)
    assert (refused.value.kind, refused.value.message) == ("forbidden", UNKNOWN_TOKEN)


def test_a_body_over_the_limit_is_refused_first() -> None:
    with pytest.raises(CallbackRefused) as refused:
        callback_command(delivery(token="nope", body=b"x" * (LIMIT + 1)), LIMIT)
    assert refused.value.kind == "payload_too_large"
    assert refused.value.status == 413


def reply(outcome: CommandOutcome, result: dict[str, Any] | None = None, **error: Any) -> Any:
    body = ToolErrorBody(**error) if error else None
    return CommandReply(command_id="c", outcome=outcome, result=result, error=body)


def test_the_ledgers_answer_becomes_the_disposition() -> None:
    command = callback_command(delivery(), LIMIT)
    triggered = {"delivery_id": "d-1", "disposition": "triggered", "wait_id": "wait_1"}
    assert outcome_of(command, reply(CommandOutcome.APPLIED, triggered)) == Accepted(
        "d-1", "triggered", "wait_1"
    )
    inbox = {"delivery_id": "d-1", "disposition": "delivered_to_inbox"}
    assert outcome_of(command, reply(CommandOutcome.APPLIED, inbox)).disposition == (
        "delivered_to_inbox"
    )
    # A replayed command returns the first result, which reads as a duplicate.
    replayed = outcome_of(command, reply(CommandOutcome.DUPLICATE, triggered))
    assert (replayed.disposition, replayed.wait_id) == ("duplicate", "wait_1")
    seen = {"delivery_id": "d-1", "disposition": "duplicate"}
    assert outcome_of(command, reply(CommandOutcome.APPLIED, seen)).disposition == "duplicate"


def test_rejections_are_forbidden_and_say_only_what_the_capability_allows() -> None:
    command = callback_command(delivery(), LIMIT)
    cancelled = reply(
        CommandOutcome.REJECTED, kind=ErrorKind.ACCESS_DENIED, message="the wait was cancelled"
    )
    with pytest.raises(CallbackRefused) as refused:
        outcome_of(command, cancelled)
    assert (refused.value.kind, refused.value.message) == ("forbidden", "the wait was cancelled")
    no_agent = reply(
        CommandOutcome.REJECTED,
        kind=ErrorKind.WORK_ITEM_ACCESS_DENIED,
        message="agent 'agent-1' does not exist",
    )
    with pytest.raises(CallbackRefused) as hidden:
        outcome_of(command, no_agent)
    assert hidden.value.message == UNKNOWN_TOKEN


class FakeClient:
    def __init__(self, answer: CommandReply) -> None:
        self.answer = answer
        self.sent: list[Any] = []

    async def send(self, command: Any) -> CommandReply:
        self.sent.append(command)
        return self.answer


def counted(registry: CollectorRegistry, outcome: str) -> float:
    value = registry.get_sample_value("longrun_callbacks_total", {"outcome": outcome})
    return value or 0.0


async def test_intake_counts_every_outcome() -> None:
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    triggered = {"delivery_id": "d-1", "disposition": "triggered", "wait_id": "wait_1"}
    client = FakeClient(reply(CommandOutcome.APPLIED, triggered))
    intake = CallbackIntake(client, metrics, max_body_bytes=LIMIT)  # type: ignore[arg-type]
    assert (await intake.accept(delivery())).disposition == "triggered"
    with pytest.raises(CallbackRefused):
        await intake.accept(delivery(body=b"{bad"))
    assert len(client.sent) == 1  # the refused one never reached the ledger
    assert counted(registry, "triggered") == 1
    assert counted(registry, "rejected") == 1


class GatedClient(FakeClient):
    """Answers only when the gate opens, the way a ledger round trip overlaps a second request;
    like the real client, every waiter of one command id gets the same first reply."""

    def __init__(self, answer: CommandReply) -> None:
        super().__init__(answer)
        self.gate = asyncio.Event()

    async def send(self, command: Any) -> CommandReply:
        self.sent.append(command)
        await self.gate.wait()
        return self.answer


async def test_identical_deliveries_in_flight_at_once_trigger_once_and_count_once() -> None:
    registry = CollectorRegistry()
    triggered = {"delivery_id": "d-1", "disposition": "triggered", "wait_id": "wait_1"}
    client = GatedClient(reply(CommandOutcome.APPLIED, triggered))
    intake = CallbackIntake(client, build_metrics(registry), max_body_bytes=LIMIT)  # type: ignore[arg-type]
    first = asyncio.create_task(intake.accept(delivery()))
    second = asyncio.create_task(intake.accept(delivery()))
    other = asyncio.create_task(intake.accept(delivery(delivery_id="d-2")))
    await asyncio.sleep(0)
    client.gate.set()
    answers = await asyncio.gather(first, second, other)
    assert [a.disposition for a in answers[:2]] == ["triggered", "duplicate"]
    assert answers[1] == Accepted("d-1", "duplicate", "wait_1")
    assert [c.delivery_id for c in client.sent] == ["d-1", "d-2"]
    assert counted(registry, "triggered") == 2  # d-1 once, d-2 once
    assert counted(registry, "duplicate") == 1
    # Settled: a later retry of d-1 asks the ledger again (which answers duplicate itself).
    await intake.accept(delivery())
    assert len(client.sent) == 3


async def test_a_caller_that_goes_away_does_not_cancel_the_shared_answer() -> None:
    registry = CollectorRegistry()
    triggered = {"delivery_id": "d-1", "disposition": "triggered", "wait_id": "wait_1"}
    client = GatedClient(reply(CommandOutcome.APPLIED, triggered))
    intake = CallbackIntake(client, build_metrics(registry), max_body_bytes=LIMIT)  # type: ignore[arg-type]
    first = asyncio.create_task(intake.accept(delivery()))
    await asyncio.sleep(0)
    second = asyncio.create_task(intake.accept(delivery()))
    await asyncio.sleep(0)
    first.cancel()
    client.gate.set()
    assert (await second).disposition == "duplicate"
    assert len(client.sent) == 1


def test_admit_takes_from_one_bucket_per_capability_and_counts_refusals() -> None:
    registry = CollectorRegistry()
    now = [0.0]
    limiter = RateLimiter(1.0, 2, clock=lambda: now[0])
    intake = CallbackIntake(
        FakeClient(reply(CommandOutcome.APPLIED, {})),  # type: ignore[arg-type]
        build_metrics(registry),
        max_body_bytes=LIMIT,
        limiter=limiter,
    )
    assert [intake.admit(TOKEN) for _ in range(3)] == [0.0, 0.0, 1.0]
    assert intake.admit("agent-2~" + "t" * 32) == 0.0
    assert counted(registry, "rejected") == 1
    now[0] = 1.0
    assert intake.admit(TOKEN) == 0.0
    unlimited = CallbackIntake(
        FakeClient(reply(CommandOutcome.APPLIED, {})),
        build_metrics(CollectorRegistry()),
        max_body_bytes=LIMIT,
    )  # type: ignore[arg-type]
    assert all(unlimited.admit(TOKEN) == 0.0 for _ in range(100))
