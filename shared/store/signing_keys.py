"""The public keys history heads were signed with, kept in one global hash so that a head signed
by any ledger (or by a key since rotated away) can still be checked."""

from __future__ import annotations

from datetime import datetime

from shared.domain.signing import PublicKeyInfo, SigningKey
from shared.store.client import AnyRedis
from shared.wire.names import Names


async def publish_public_key(redis: AnyRedis, names: Names, key: SigningKey, now: datetime) -> None:
    """Add the key's public half (first publication kept: `first_seen` never moves)."""
    info = PublicKeyInfo(key_id=key.key_id, public_key=key.public_key, first_seen=now)
    await redis.hsetnx(names.signing_keys, key.key_id, info.model_dump_json())


async def public_keys(redis: AnyRedis, names: Names) -> list[PublicKeyInfo]:
    raw = await redis.hgetall(names.signing_keys)
    keys = [PublicKeyInfo.model_validate_json(value) for value in raw.values()]
    return sorted(keys, key=lambda k: (k.first_seen, k.key_id))
