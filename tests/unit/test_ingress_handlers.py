"""The callbacks stream consumer without Redis: entry parsing, dead-lettering with the reason,
transient failures left pending, and a parser that survives bytes that are not UTF-8."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.ingress.handlers import CallbackConsumer, parse_entry
from services.ingress.service import Accepted, CallbackRefused, Delivery
from shared.ledger_client import LedgerTimeout
from shared.metrics import build_metrics
from shared.wire.commands import CallbackSource
from shared.wire.names import Names

TOKEN = "agent-1~" + "s" * 32
STREAM = "t:callbacks"


def test_an_entry_with_bytes_fields_becomes_a_stream_delivery() -> None:
    parsed = parse_entry(
        {
            b"token": TOKEN.encode(),
            b"body": b"\xff\x00",
            b"content_type": b"application/octet-stream",
            b"delivery_id": b"d-1",
            b"trace": b"ignored",
        }
    )
    assert parsed == Delivery(
        TOKEN, b"\xff\x00", "application/octet-stream", "d-1", CallbackSource.STREAM
    )


def test_missing_body_and_content_type_have_defaults() -> None:
    parsed = parse_entry({"token": TOKEN, "delivery_id": "d-1"})
    assert (parsed.body, parsed.content_type) == (b"", "application/octet-stream")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"delivery_id": "d"}, "missing token"),
        ({"token": "", "delivery_id": "d"}, "invalid token"),
        ({"token": TOKEN}, "missing delivery_id"),
        ({"token": TOKEN, "delivery_id": ""}, "invalid delivery_id"),
        ({"token": TOKEN, "delivery_id": "d" * 201}, "invalid delivery_id"),
        ({"__data__": b"\x89FS"}, "missing token"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_field(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(CallbackRefused) as refused:
        parse_entry(fields)
    assert refused.value.kind == "invalid_request"
    assert refused.value.message.startswith(message)


class FakeRedis:
    def __init__(self) -> None:
        self.added: list[tuple[str, dict[str, Any]]] = []

        self.acked: list[str] = []

    async def xadd(self, stream: str, fields: dict[str, Any], **_: Any) -> bytes:
        self.added.append((stream, fields))
        return b"1-0"

    async def xack(self, _stream: str, _group: str, entry_id: str) -> int:
        self.acked.append(entry_id)
        return 1


class FakeIntake:
    """Accepts deliveries by id: `refuse-*` is refused, `slow-*` times out; admits `limited`
    tokens `allowance` times."""

    def __init__(self, allowance: int = 0) -> None:
        self.seen: list[str] = []
        self.allowance = allowance

    def admit(self, token: str) -> float:
        if not token.startswith("limited"):
            return 0.0
        self.allowance -= 1
        return 0.0 if self.allowance >= 0 else 2.5

    async def accept(self, delivery: Delivery) -> Accepted:
        self.seen.append(delivery.delivery_id)
        if delivery.delivery_id.startswith("refuse"):
            raise CallbackRefused("forbidden", "unknown capability token")
        if delivery.delivery_id.startswith("slow"):
            raise LedgerTimeout("no reply")
        return Accepted(delivery.delivery_id, "triggered", "wait_1")


def consumer() -> tuple[CallbackConsumer, FakeRedis, FakeIntake, CollectorRegistry]:
    redis, intake, registry = FakeRedis(), FakeIntake(), CollectorRegistry()
    names = Names(prefix="t", partitions=4)
    built = CallbackConsumer(intake, redis, names, build_metrics(registry))  # type: ignore[arg-type]
    return built, redis, intake, registry


async def test_bad_entries_are_dead_lettered_with_reason_and_source() -> None:
    built, redis, intake, registry = consumer()
    entries = [
        {b"token": TOKEN.encode(), b"delivery_id": b"ok-1"},
        {b"token": TOKEN.encode()},
        {b"token": TOKEN.encode(), b"delivery_id": b"refuse-1", b"body": b"x"},
        {b"token": TOKEN.encode(), b"delivery_id": b"ok-2"},
    ]
    await built.stream.consume(STREAM, ["1-0", "2-0", "3-0", "4-0"], entries)
    assert intake.seen == ["ok-1", "refuse-1", "ok-2"]
    letters = {fields["source_id"]: fields for stream, fields in redis.added}
    assert {stream for stream, _ in redis.added} == {"t:dead-letter"}
    assert letters["2-0"]["reason"] == "invalid_request: missing delivery_id"
    assert letters["3-0"]["reason"] == "forbidden: unknown capability token"
    assert letters["3-0"]["body"] == "x"
    assert letters["3-0"]["source_stream"] == "t:callbacks"
    dead = registry.get_sample_value(
        "longrun_dead_lettered_total", {"stream": "t:callbacks", "reason": "forbidden"}
    )
    assert dead == 1


async def test_a_transient_failure_leaves_the_batch_pending_after_the_rest_ran() -> None:
    built, redis, intake, _ = consumer()
    entries = [
        {"token": TOKEN, "delivery_id": "slow-1"},
        {"token": TOKEN, "delivery_id": "ok-1"},
        {"token": TOKEN, "delivery_id": "refuse-1"},
    ]
    with pytest.raises(LedgerTimeout):
        await built.stream.consume(STREAM, ["1-0", "2-0", "3-0"], entries)
    assert intake.seen == ["slow-1", "ok-1", "refuse-1"]
    assert [fields["source_id"] for _, fields in redis.added] == ["3-0"]


async def test_an_entry_over_its_capabilitys_rate_limit_is_dead_lettered_not_lost() -> None:
    built, redis, intake, registry = consumer()
    intake.allowance = 1
    limited = "limited~" + "s" * 32
    entries = [
        {"token": limited, "delivery_id": "ok-1"},
        {"token": limited, "delivery_id": "ok-2", "body": "kept"},
        {"token": TOKEN, "delivery_id": "ok-3"},
    ]
    await built.stream.consume(STREAM, ["1-0", "2-0", "3-0"], entries)
    assert intake.seen == ["ok-1", "ok-3"]
    [(stream, letter)] = redis.added
    assert stream == "t:dead-letter"
    assert letter["reason"].startswith("rate_limited: over this capability's callback rate")
    assert (letter["source_id"], letter["delivery_id"], letter["body"]) == ("2-0", "ok-2", "kept")
    dead = registry.get_sample_value(
        "longrun_dead_lettered_total", {"stream": "t:callbacks", "reason": "rate_limited"}
    )
    assert dead == 1
