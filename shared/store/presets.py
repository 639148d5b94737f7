"""Presets in Redis: one global hash, name -> PresetRecord JSON (`Names.presets`).

Ingress writes them (operator routes, `longrun apply` with `kind: preset`) with an optimistic
transaction on that one key, so two PUTs of one name never both take the same version; tool-call
senders read them when an agent spawns a child with `preset`. No ledger decision reads them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.exceptions import WatchError

from shared.domain.presets import PresetRecord
from shared.domain.specs import AgentSpec
from shared.store.client import AnyRedis
from shared.wire.names import Names


@dataclass(frozen=True, slots=True)
class PresetPut:
    record: PresetRecord
    created: bool
    changed: bool


async def get_preset(redis: AnyRedis, names: Names, name: str) -> PresetRecord | None:
    doc = await redis.hget(names.presets, name)
    return PresetRecord.model_validate_json(doc) if doc else None


async def list_presets(redis: AnyRedis, names: Names) -> list[PresetRecord]:
    """Every preset, by name."""
    docs = await redis.hgetall(names.presets)
    records = (PresetRecord.model_validate_json(d) for d in docs.values())
    return sorted(records, key=lambda r: r.name)


async def put_preset(
    redis: AnyRedis, names: Names, name: str, spec: AgentSpec, now: datetime
) -> PresetPut:
    """Store `spec` under `name`: a new preset is version 1, a changed spec the next version,
    an identical one changes nothing."""
    key = names.presets
    while True:
        async with redis.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(key)
                doc = await pipe.hget(key, name)
                old = PresetRecord.model_validate_json(doc) if doc else None
                if old is not None and old.spec == spec:
                    return PresetPut(old, created=False, changed=False)  # the reset unwatches
                version = 1 if old is None else old.version + 1
                record = PresetRecord(name=name, spec=spec, version=version, updated_at=now)
                start: Any = pipe.multi  # redis-py leaves it untyped
                start()
                pipe.hset(key, name, record.model_dump_json())
                await pipe.execute()
                return PresetPut(record, created=old is None, changed=True)
            except WatchError:
                continue
