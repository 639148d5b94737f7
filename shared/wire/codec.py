"""The one codec: typed messages inside a versioned envelope, as orjson bytes.

Anything that is not a known type at a known version, or whose body does not validate, raises
CodecError, so consumers can dead-letter it with a reason instead of crashing.
"""

from __future__ import annotations

import re
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

import orjson
from pydantic import ValidationError, create_model

from shared.domain.base import NonEmptyStr, Record, UtcDatetime
from shared.wire.commands import COMMANDS
from shared.wire.events import EVENTS, LedgerEvents
from shared.wire.message import Message
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick, TimerFired


class CodecError(ValueError):
    """The bytes are not a message this version of longrun understands."""


class Envelope(Record):
    """Message id, type, schema version, time, correlation and causation ids, and the body."""

    id: NonEmptyStr
    at: UtcDatetime
    correlation_id: str | None = None
    causation_id: str | None = None
    body: Message

    @property
    def type(self) -> str:
        return self.body.message_type

    @property
    def version(self) -> int:
        return self.body.version


_REGISTRY: dict[tuple[str, int], type[Message]] = {}


def register(cls: type[Message]) -> type[Message]:
    key = (cls.message_type, cls.version)
    if key in _REGISTRY and _REGISTRY[key] is not cls:
        raise RuntimeError(f"message type {key} registered twice")
    _REGISTRY[key] = cls
    return cls


_ALL: tuple[type[Message], ...] = (
    *COMMANDS,
    *EVENTS,
    LedgerEvents,
    Tick,
    TimerFired,
    CommandReply,
)
for _cls in _ALL:
    register(_cls)


def known_types() -> dict[tuple[str, int], type[Message]]:
    return dict(_REGISTRY)


def encode(envelope: Envelope) -> bytes:
    body = envelope.body
    doc = {
        "id": envelope.id,
        "type": body.message_type,
        "version": body.version,
        "at": envelope.at.isoformat(),
        "correlation_id": envelope.correlation_id,
        "causation_id": envelope.causation_id,
        "body": body.model_dump(mode="json"),
    }
    return orjson.dumps(doc)


@lru_cache(maxsize=64)
def _isoformat(at: datetime) -> str:
    return at.isoformat()


def encode_built(cls: type[Message], *, id: str, at: datetime, body: dict[str, Any]) -> bytes:
    """Encode a body the caller built from already-validated parts (the ledger's sealed
    history events), skipping a second validation; consumers still validate on decode. The
    time's text is remembered: the ledger stamps a whole wave's replies and events with one."""
    doc = {
        "id": id,
        "type": cls.message_type,
        "version": cls.version,
        "at": _isoformat(at),
        "correlation_id": None,
        "causation_id": None,
        "body": body,
    }
    return orjson.dumps(doc)


def _parse(raw: bytes | str) -> dict[str, Any]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CodecError(f"envelope must be a JSON object, got {type(doc).__name__}")
    return doc


def _lookup(doc: dict[str, Any]) -> type[Message]:
    kind, version = doc.get("type"), doc.get("version")
    if not isinstance(kind, str) or not isinstance(version, int) or isinstance(version, bool):
        raise CodecError("envelope needs a string 'type' and an integer 'version'")
    cls = _REGISTRY.get((kind, version))
    if cls is None:
        known = sorted(v for (t, v) in _REGISTRY if t == kind)
        if known:
            raise CodecError(f"unknown version {version} of {kind!r} (known: {known})")
        raise CodecError(f"unknown message type {kind!r}")
    return cls


_ENVELOPE_FIELDS = frozenset(
    {"id", "type", "version", "at", "correlation_id", "causation_id", "body"}
)

_HEAD = re.compile(rb'\{"id":"(?:[^"\\]|\\.)*","type":"([a-z_]{1,64})","version":([0-9]{1,6}),')
"""How `encode` starts every envelope: the type is known before anything is parsed."""


def _typed_envelope(cls: type[Message]) -> type[Record]:
    """The envelope of one message type, validated from JSON bytes in one pass."""
    fields: dict[str, Any] = {
        "id": (NonEmptyStr, ...),
        "type": (Literal[cls.message_type], ...),
        "version": (Literal[cls.version], ...),
        "at": (UtcDatetime, ...),
        "correlation_id": (str | None, None),
        "causation_id": (str | None, None),
        "body": (cls, ...),
    }
    return create_model(f"{cls.__name__}Envelope", __base__=Record, **fields)


_TYPED: dict[bytes, type[Record]] = {
    b"%s:%d" % (cls.message_type.encode(), cls.version): _typed_envelope(cls)
    for cls in _REGISTRY.values()
}


def decode_body(raw: bytes | str) -> Message:
    """The message of an envelope, validated like `decode` does, at about half the cost for what
    `encode` wrote: pydantic reads the bytes itself, in one pass, instead of validating the
    objects orjson made of them. Anything else, text included (what subscribers read is bytes),
    goes through `decode`, which words the error."""
    head = _HEAD.match(raw) if isinstance(raw, bytes) else None
    model = _TYPED.get(b"%s:%s" % head.groups()) if head is not None else None
    if model is not None:
        try:
            body: Message = model.model_validate_json(raw).__dict__["body"]
            return body
        except ValidationError:
            pass
    return decode(raw).body


def decode(raw: bytes | str) -> Envelope:
    doc = _parse(raw)
    unknown = set(doc) - _ENVELOPE_FIELDS
    if unknown:
        raise CodecError(f"unknown envelope fields: {sorted(unknown)}")
    cls = _lookup(doc)
    try:
        body = cls.model_validate(doc.get("body"))
        return Envelope.model_validate(
            {
                "id": doc.get("id"),
                "at": doc.get("at"),
                "correlation_id": doc.get("correlation_id"),
                "causation_id": doc.get("causation_id"),
                "body": body,
            }
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(body)"
        raise CodecError(
            f"invalid {doc['type']} v{doc['version']}: {where}: {first['msg']}"
        ) from None
