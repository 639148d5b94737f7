"""Stream in, use case, stream out: one batch subscriber and one reclaimer per partition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from services.ledger.service import Entry, LedgerBusy, LedgerService
from shared.coalesce import Coalescer
from shared.store.client import CLUSTER_UNAVAILABLE, AnyRedis
from shared.streams import (
    dead_letter,
    stream_subscribers,
)
from shared.wire.codec import CodecError, decode_body
from shared.wire.commands import Command
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.ledger")

TRANSIENT: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    LedgerBusy,
    OSError,
    *CLUSTER_UNAVAILABLE,
)
"""Errors that leave entries pending for the reclaimer instead of dead-lettering them."""

ROUND_LIMIT = 200
"""Commands one coalesced round applies at most (whole batches: two full ones). Decisions
between two awaits hold the event loop, so a backlog on every partition must not become one
long round."""
ROUNDS_AT_ONCE = 2
"""Rounds in flight at once: one decides while the other waits for Redis; batches arriving with
both running share the next one. At 1,000 commands/s over 16 partitions most batches hold one
command, and each round costs about the same fixed CPU whatever it carries."""


def decode_command(fields: Mapping[Any, Any]) -> Command:
    """The command in an entry's `m` field: bytes keys as the subscribers read entries raw,
    str keys as callers in this process build them."""
    raw = fields.get(b"m", fields.get("m"))
    if raw is None:
        raise CodecError("entry has no 'm' field (longrun commands carry one envelope in 'm')")
    body = decode_body(raw)
    if not isinstance(body, Command):
        raise CodecError(f"{body.message_type} is not a ledger command")
    return body


class CommandConsumer:
    """Decodes entries, applies commands, dead-letters what can never be applied."""

    def __init__(
        self,
        service: LedgerService,
        redis: AnyRedis,
        names: Names,
        *,
        rounds: int = ROUNDS_AT_ONCE,
    ) -> None:
        self.service = service
        self.redis = redis
        self.names = names
        # Partitions' batches that arrive while rounds are running share the next round: one
        # lr_load pipeline, one lr_commit pipeline and one reply pipeline for all of them.
        self.rounds = Coalescer(self._apply_round, limit=ROUND_LIMIT, rounds=rounds)

    async def consume(
        self, stream: str, ids: Sequence[str], entries: Sequence[Mapping[Any, Any]]
    ) -> None:
        """Apply the entries' commands; each entry is XACKed once applied or dead-lettered (the
        subscribers use AckPolicy.MANUAL so the ack rides with the replies' round trip). On a
        transient error nothing is acked: the entries stay pending for the reclaimer."""
        commands: list[tuple[str, Mapping[str, Any], Command]] = []
        for entry_id, fields in zip(ids, entries, strict=True):
            try:
                commands.append((entry_id, fields, decode_command(fields)))
            except CodecError as err:
                await self.poison(stream, entry_id, fields, f"undecodable: {err}")
        if not commands:
            return
        try:
            await self.rounds.submit([((stream, entry_id), cmd) for entry_id, _, cmd in commands])
        except TRANSIENT:
            raise
        except Exception:
            log.exception("batch_failed_retrying_one_by_one", stream=stream, size=len(commands))
            await self._one_by_one(stream, commands)

    async def _one_by_one(
        self, stream: str, commands: list[tuple[str, Mapping[str, Any], Command]]
    ) -> None:
        """Isolate the entry that breaks a batch so the others still apply now."""
        for entry_id, fields, cmd in commands:
            try:
                await self.service.apply_batch([cmd], ack=[(stream, entry_id)])
            except TRANSIENT:
                raise
            except Exception as exc:
                await self.poison(stream, entry_id, fields, f"command failed: {exc!r}")

    async def _apply_round(self, items: Sequence[tuple[Entry, Command]]) -> None:
        await self.service.apply_batch([cmd for _, cmd in items], ack=[e for e, _ in items])

    async def over_cap(
        self, stream: str, entry_id: str, fields: Mapping[Any, Any], deliveries: int
    ) -> None:
        await self.poison(stream, entry_id, fields, f"delivery cap: {deliveries} deliveries")

    async def poison(
        self, stream: str, entry_id: str, fields: Mapping[Any, Any], reason: str
    ) -> None:
        await dead_letter(
            self.redis,
            self.names,
            fields=fields,
            reason=reason,
            source_stream=stream,
            source_id=entry_id,
        )
        await self.redis.xack(stream, Group.LEDGER, entry_id)
        self.service.metrics.dead_lettered.labels(
            stream=stream, reason=reason.split(":", maxsplit=1)[0]
        ).inc()


def register(
    broker: RedisBroker,
    consumer: CommandConsumer,
    *,
    partitions: Sequence[int],
    consumer_name: str,
    batch_size: int,
    reclaim_idle_ms: int,
) -> list[Any]:
    """One batch subscriber and one reclaimer per partition. MANUAL acks: an entry is acked
    once applied or dead-lettered, in the round trip of its reply (`CommandConsumer.consume`)."""
    subscribers = []
    for p in partitions:
        subscribers += stream_subscribers(
            broker,
            consumer.names.commands(p),
            group=Group.LEDGER,
            consumer=consumer_name,
            size=batch_size,
            idle_ms=reclaim_idle_ms,
            ack_policy=AckPolicy.MANUAL,
            consume=consumer.consume,
            over_cap=consumer.over_cap,
        )
    return subscribers
