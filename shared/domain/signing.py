"""Signed history heads: an Ed25519 signature over an agent's chain tip, and the checks that
prove a history still passes through a head saved earlier (an anchor).

The hash chain alone catches a partial edit, but whoever can write Redis can rewrite a whole
history and re-chain it. A signed head saved outside longrun (an anchor) pins the hash at one
`seq`: a later rewrite of anything up to that event changes that hash, and the check fails.

Signed bytes: the canonical JSON (sorted keys, no spaces, UTF-8) of
`{agent_id, at, hash, key_id, seq}`. Keys are raw 32-byte Ed25519 keys in standard base64; a
key's id is the first 16 hex digits of the SHA-256 of its public key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from pydantic import Field, ValidationError

from shared.domain.base import NonEmptyStr, Record, UtcDatetime
from shared.domain.history import GENESIS_HASH, format_at, verify

KEY_BYTES = 32


class SigningKeyError(ValueError):
    """A key that is not a base64 raw 32-byte Ed25519 key."""


class SignedHead(Record):
    """An agent's history tip at `seq` (`hash` is that event's hash; the genesis hash at seq 0),
    signed at `at` by the key `key_id`."""

    agent_id: NonEmptyStr
    seq: int = Field(ge=0)
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    at: UtcDatetime
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    signature: str = Field(min_length=1)


class PublicKeyInfo(Record):
    key_id: str
    algorithm: str = "ed25519"
    public_key: str
    first_seen: UtcDatetime


def _decode_key(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise SigningKeyError(f"the {what} is not base64") from None
    if len(raw) != KEY_BYTES:
        raise SigningKeyError(f"the {what} is {len(raw)} bytes, not {KEY_BYTES}")
    return raw


def key_id_of(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:16]


def head_message(agent_id: str, seq: int, head_hash: str, at: datetime, key_id: str) -> bytes:
    doc: dict[str, Any] = {
        "agent_id": agent_id,
        "at": format_at(at),
        "hash": head_hash,
        "key_id": key_id,
        "seq": seq,
    }
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


class SigningKey:
    """The ledger's private key: signs heads; names itself by `key_id`."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        public_raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public_key = base64.b64encode(public_raw).decode()
        self.key_id = key_id_of(public_raw)

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_base64(cls, text: str) -> SigningKey:
        return cls(Ed25519PrivateKey.from_private_bytes(_decode_key(text, "signing key")))

    def private_base64(self) -> str:
        raw = self._private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return base64.b64encode(raw).decode()

    def sign_head(self, agent_id: str, seq: int, head_hash: str, at: datetime) -> SignedHead:
        message = head_message(agent_id, seq, head_hash, at, self.key_id)
        signature = base64.b64encode(self._private.sign(message)).decode()
        return SignedHead(
            agent_id=agent_id,
            seq=seq,
            hash=head_hash,
            at=at,
            key_id=self.key_id,
            signature=signature,
        )


def public_key_id(public_key: str) -> str:
    """The id of a base64 public key (SigningKeyError if it is not one)."""
    return key_id_of(_decode_key(public_key, "public key"))


def signature_valid(head: SignedHead, public_key: str) -> bool:
    """The head's signature checks with `public_key` (and the key is the one the head names)."""
    raw = _decode_key(public_key, "public key")
    if key_id_of(raw) != head.key_id:
        return False
    try:
        signature = base64.b64decode(head.signature, validate=True)
        message = head_message(head.agent_id, head.seq, head.hash, head.at, head.key_id)
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, message)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True


def parse_anchor(doc: Mapping[str, Any]) -> SignedHead:
    """A saved head, or ValueError saying what is wrong with it."""
    try:
        return SignedHead.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "the anchor"
        raise ValueError(f"not a signed head: {where}: {first['msg']}") from None


class AnchorFailure(StrEnum):
    SIGNATURE = "signature"
    """The signature does not check with the key (or the key is not the one named)."""
    NOT_ON_CHAIN = "not_on_chain"
    """The history no longer holds the anchor's hash at the anchor's seq."""
    CHAIN_BROKEN = "chain_broken"
    """An event does not recompute (its index is named: before or after the anchor)."""


class AnchorCheck(Record):
    ok: bool
    failure: AnchorFailure | None = None
    message: str
    count: int
    first_bad_index: int | None = None


def check_chain_through(events: Sequence[Mapping[str, Any]], anchor: SignedHead) -> AnchorCheck:
    """The history passes through the anchor (the same hash at its seq) and its chain recomputes
    from the start to the end. Events are the whole history, oldest first (seq 1, 2, ...)."""
    count = len(events)
    if anchor.seq > count:
        return AnchorCheck(
            ok=False,
            failure=AnchorFailure.NOT_ON_CHAIN,
            message=f"head not on the chain: the anchor is at seq {anchor.seq} but the history "
            f"has {count} events",
            count=count,
        )
    held = GENESIS_HASH if anchor.seq == 0 else events[anchor.seq - 1].get("hash")
    if held != anchor.hash:
        return AnchorCheck(
            ok=False,
            failure=AnchorFailure.NOT_ON_CHAIN,
            message=f"head not on the chain: event seq {anchor.seq} has hash {held}, the anchor "
            f"has {anchor.hash}",
            count=count,
            first_bad_index=max(anchor.seq - 1, 0),
        )
    result = verify(events)
    if not result.ok:
        assert result.first_bad_index is not None
        where = "after" if result.first_bad_index >= anchor.seq else "before"
        return AnchorCheck(
            ok=False,
            failure=AnchorFailure.CHAIN_BROKEN,
            message=f"chain broken {where} the anchor: first bad event at index "
            f"{result.first_bad_index} (seq {result.first_bad_index + 1})",
            count=count,
            first_bad_index=result.first_bad_index,
        )
    return AnchorCheck(
        ok=True,
        message=f"ok: the history passes through seq {anchor.seq} ({anchor.hash[:16]}…) and its "
        f"{count} events recompute",
        count=count,
    )
