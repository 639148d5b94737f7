"""Consumer-group plumbing every service shares: groups created at `0` before faststream starts,
unique consumer names, the dead-letter stream, and subscriber health.

faststream creates a missing group at `$`, which skips entries written before the group existed,
and never redelivers a failed entry by itself (FASTSTREAM-NOTES 1, 4); these helpers close both
holes together with a reclaiming subscriber per stream.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from redis.exceptions import ResponseError

from shared.store.client import AnyRedis
from shared.wire.names import Names

log = structlog.get_logger("longrun.streams")

DEAD_LETTER_MAXLEN = 100_000
DELIVERY_CAP = 5
"""Deliveries after which an entry is poison: it goes to the dead-letter stream, with why."""


def consumer_name(service: str) -> str:
    """Unique per process, so a restarted process never shares a pending list with a dead one."""
    return f"{service}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


async def ensure_groups(redis: AnyRedis, streams: Iterable[str], group: str) -> None:
    for stream in streams:
        try:
            await redis.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


async def dead_letter(
    redis: AnyRedis,
    names: Names,
    *,
    fields: Mapping[Any, Any],
    reason: str,
    source_stream: str,
    source_id: str,
) -> None:
    """Move an entry aside with its original fields, the reason, and where it came from."""
    entry = {_text(k): _text(v) for k, v in fields.items()}
    entry.update(reason=reason[:2000], source_stream=source_stream, source_id=source_id)
    await redis.xadd(names.dead_letter, entry, maxlen=DEAD_LETTER_MAXLEN, approximate=True)  # type: ignore[arg-type]
    log.warning("dead_lettered", source_stream=source_stream, source_id=source_id, reason=reason)


def subscribers_running(subscribers: Iterable[Any]) -> bool:
    """A subscriber that stopped (NOGROUP, crash) makes the service unhealthy (NOTES 6)."""
    subs = list(subscribers)
    return bool(subs) and all(getattr(s, "running", False) for s in subs)
