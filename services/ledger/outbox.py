"""The ledger's outbox: commands one agent's decision owes agents elsewhere (a delegation's
creation, result and cancellation), delivered exactly once without a transaction across
partitions.

1. The decision's commit writes each command into its own partition's outbox (`outbox` hash:
   command id -> envelope; `outbox-due` sorted set: when to check it) in the same `lr_commit` as
   the change that causes it. Nothing is owed that was not committed, and nothing committed is
   forgotten.
2. Right after the commit the ledger appends the command to the target's partition stream (the
   fast path: one pipeline with the replies).
3. `OutboxRelay`, running in every ledger process, takes due entries: if the target has an
   idempotency record for the command id, the command was applied and the entry is dropped;
   otherwise the command is appended again and checked later. A re-send has the same command
   id, so the target applies it once; the rules are idempotent by state as well.
A crash between any two steps leaves the entry due, and the next relay pass (any replica, or
this one after a restart) finishes the delivery. docs/architecture.md has the whole argument.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import structlog
from redis.exceptions import RedisError

from shared.ledger_client import COMMANDS_MAXLEN
from shared.store.client import AnyRedis
from shared.store.protocol import CommitPlan
from shared.wire.codec import CodecError, Envelope, decode_body, encode
from shared.wire.commands import Command
from shared.wire.names import Names

log = structlog.get_logger("longrun.ledger.outbox")

DEFAULT_RETRY_MS = 5_000
"""How long after a send the relay checks that the target applied it (and re-sends if not)."""
RELAY_BATCH = 200
"""Due entries one relay pass takes per partition at most."""

Outgoing = tuple[str, bytes]
"""(target partition's command stream, command envelope)."""


def outbox_writes(
    plan: CommitPlan,
    names: Names,
    agent_id: str,
    commands: Sequence[Command],
    now: datetime,
    *,
    retry_ms: int = DEFAULT_RETRY_MS,
) -> list[Outgoing]:
    """Add the commands to the committing agent's partition outbox (ops of the current command
    in `plan`); returns them as stream entries for the send right after the commit."""
    p = names.partition(agent_id)
    due = str(int(now.timestamp() * 1000) + retry_ms)
    out: list[Outgoing] = []
    for command in commands:
        wire = encode(Envelope(id=f"out_{command.command_id}", at=now, body=command))
        plan.op("hset", names.outbox(p), command.command_id, wire)
        plan.op("zadd", names.outbox_due(p), due, command.command_id)
        out.append((names.commands(names.partition(command.agent_id)), wire))
    return out


def queue_sends(pipe: Any, outgoing: Sequence[Outgoing]) -> None:
    for stream, wire in outgoing:
        pipe.xadd(stream, {"m": wire}, maxlen=COMMANDS_MAXLEN, approximate=True)


class OutboxRelay:
    """Re-sends owed commands until their targets have applied them; drops them after."""

    def __init__(
        self,
        redis: AnyRedis,
        names: Names,
        *,
        clock: Callable[[], datetime],
        retry_ms: int = DEFAULT_RETRY_MS,
        interval_s: float = 1.0,
    ) -> None:
        self.redis = redis
        self.names = names
        self.clock = clock
        self.retry_ms = retry_ms
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="outbox-relay")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        while True:
            try:
                await self.pass_once()
            except (RedisError, OSError) as exc:  # Redis away: the entries wait for it
                log.warning("outbox_relay_failed", error=repr(exc))
            await asyncio.sleep(self.interval_s)

    async def pass_once(self) -> dict[str, int]:
        """One pass over every partition's due entries; returns counts (sent, delivered)."""
        now_ms = int(self.clock().timestamp() * 1000)
        n = self.names
        pipe = self.redis.pipeline(transaction=False)
        for p in range(n.partitions):
            pipe.zrangebyscore(n.outbox_due(p), "-inf", now_ms, start=0, num=RELAY_BATCH)
        due = await pipe.execute()
        owed = [(p, [_text(i) for i in ids]) for p, ids in enumerate(due) if ids]
        if not owed:
            return {"sent": 0, "delivered": 0}
        pipe = self.redis.pipeline(transaction=False)
        for p, ids in owed:
            pipe.hmget(n.outbox(p), ids)
        docs = await pipe.execute()
        entries = [
            (p, command_id, doc)
            for (p, ids), found in zip(owed, docs, strict=True)
            for command_id, doc in zip(ids, found, strict=True)
        ]
        return await self._settle(entries, now_ms)

    async def _settle(
        self, entries: list[tuple[int, str, bytes | None]], now_ms: int
    ) -> dict[str, int]:
        n = self.names
        decoded: list[tuple[int, str, bytes | None, Command | None]] = []
        for p, command_id, doc in entries:
            decoded.append((p, command_id, doc, _command(doc)))
        pipe = self.redis.pipeline(transaction=False)
        for _p, command_id, _doc, cmd in decoded:
            agent = cmd.agent_id if cmd is not None else ""
            pipe.exists(n.idempotency(agent, command_id))
        applied = await pipe.execute()
        pipe = self.redis.pipeline(transaction=False)
        sent = delivered = 0
        for (p, command_id, doc, cmd), done in zip(decoded, applied, strict=True):
            if cmd is None or doc is None or done:
                # Applied (or unreadable: nothing can deliver it) and so no longer owed.
                pipe.zrem(n.outbox_due(p), command_id)
                pipe.hdel(n.outbox(p), command_id)
                delivered += 1
                continue
            pipe.xadd(
                n.commands(n.partition(cmd.agent_id)),
                {"m": doc},
                maxlen=COMMANDS_MAXLEN,
                approximate=True,
            )
            pipe.zadd(n.outbox_due(p), {command_id: now_ms + self.retry_ms}, xx=True)
            sent += 1
        await pipe.execute()
        return {"sent": sent, "delivered": delivered}


def _command(doc: bytes | None) -> Command | None:
    if doc is None:
        return None
    try:
        body = decode_body(doc)
    except CodecError as exc:
        log.error("outbox_entry_unreadable", error=repr(exc))
        return None
    return body if isinstance(body, Command) else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
