"""Stream in, use case, stream out: one batch subscriber and one reclaimer per partition, under
the shared consumer policy (`shared.consumer`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from faststream import AckPolicy
from faststream.redis import RedisBroker

from services.ledger.service import Entry, LedgerBusy, LedgerService
from shared.coalesce import Coalescer
from shared.consumer import Delivered, StreamConsumer, Transient, required
from shared.store.client import AnyRedis
from shared.wire.codec import CodecError, decode_body
from shared.wire.commands import Command
from shared.wire.names import Group, Names

ROUND_LIMIT = 200
"""Commands one coalesced round applies at most (whole batches: two full ones). Decisions
between two awaits hold the event loop, so a backlog on every partition must not become one
long round."""
ROUNDS_AT_ONCE = 2
"""Rounds in flight at once: one decides while the other waits for Redis; batches arriving with
both running share the next one. At 1,000 commands/s over 16 partitions most batches hold one
command, and each round costs about the same fixed CPU whatever it carries."""


def decode_command(fields: Mapping[Any, Any]) -> Command:
    """The command in an entry's `m` field (bytes keys as the subscribers read entries raw, str
    keys as callers in this process build them)."""
    body = decode_body(required(fields, "m"))
    if not isinstance(body, Command):
        raise CodecError(f"{body.message_type} is not a ledger command")
    return body


class CommandConsumer:
    """Applies the commands of the partitions' entries. Each entry is acked once applied, in
    the round trip of its reply (MANUAL acks), or once dead-lettered."""

    def __init__(
        self,
        service: LedgerService,
        redis: AnyRedis,
        names: Names,
        *,
        rounds: int = ROUNDS_AT_ONCE,
    ) -> None:
        self.service = service
        self.names = names
        # Partitions' batches that arrive while rounds are running share the next round: one
        # lr_load pipeline, one lr_commit pipeline and one reply pipeline for all of them.
        self.rounds = Coalescer(self._apply_round, limit=ROUND_LIMIT, rounds=rounds)
        self.stream = StreamConsumer(
            redis,
            names,
            service.metrics,
            group=Group.LEDGER,
            decode=decode_command,
            handle=self.apply,
            # Alone means alone: a coalesced round could fail again for another batch's entry.
            handle_alone=self.apply_alone,
            acks=AckPolicy.MANUAL,
        )

    async def apply(self, batch: Sequence[Delivered[Command]]) -> None:
        with _busy_is_transient():
            await self.rounds.submit([((d.stream, d.entry_id), d.value) for d in batch])

    async def apply_alone(self, batch: Sequence[Delivered[Command]]) -> None:
        with _busy_is_transient():
            await self.service.apply_batch(
                [d.value for d in batch], ack=[(d.stream, d.entry_id) for d in batch]
            )

    async def _apply_round(self, items: Sequence[tuple[Entry, Command]]) -> None:
        await self.service.apply_batch([cmd for _, cmd in items], ack=[e for e, _ in items])


@contextmanager
def _busy_is_transient() -> Iterator[None]:
    """A command that kept losing version races is retried later, not dead-lettered."""
    try:
        yield
    except LedgerBusy as busy:
        raise Transient(str(busy)) from busy


def register(
    broker: RedisBroker,
    consumer: CommandConsumer,
    *,
    partitions: Sequence[int],
    consumer_name: str,
    batch_size: int,
    reclaim_idle_ms: int,
) -> list[Any]:
    """One batch subscriber and one reclaimer per partition."""
    subscribers = []
    for p in partitions:
        subscribers += consumer.stream.subscribe(
            broker,
            consumer.names.commands(p),
            consumer=consumer_name,
            size=batch_size,
            idle_ms=reclaim_idle_ms,
        )
    return subscribers
