"""Ticks in, turns out: one batch subscriber and one reclaimer per partition feed a bounded pool
of concurrent turns; each tick is acknowledged only when its turn is over.

A subscriber hands a tick to the pool and returns, so one slow turn never holds a partition; it
waits only while every slot is busy, which bounds what a process has fetched but not started.
A tick stays pending while its turn runs, and the turn's lease beat keeps the entry from looking
idle, so other processes' reclaimers take only ticks whose executor died (NOTES 2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker
from faststream.redis.annotations import RedisBatchStreamMessage, RedisStreamMessage
from redis.exceptions import RedisError

from services.turn_executor.service import SHUTDOWN_FINISH_S, TurnService
from shared.ledger_client import LedgerTimeout
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.store.protocol import Fn, flag
from shared.streams import DELIVERY_CAP, Subscription, dead_letter
from shared.wire.codec import CodecError, decode_body
from shared.wire.names import Group, Names
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.executor")

TRANSIENT = (RedisError, LedgerTimeout, OSError)
"""Errors that leave the tick pending: another attempt (here or elsewhere) will serve it."""


class _Ack:
    """Acknowledges a settled tick's entry if this delivery still owns it, in the round trip
    that releases the turn's lease and tick marker (a Settlement)."""

    def __init__(self, stream: str, args: list[str]) -> None:
        self.stream = stream
        self.args = args
        self.acked: bool | None = None

    def queue(self, pipe: Any) -> None:
        pipe.fcall(Fn.ACK_IF_MINE, 1, self.stream, *self.args)

    def answered(self, answer: Any) -> None:
        self.acked = flag(answer)


def decode_tick(fields: Mapping[str, Any]) -> Tick:
    raw = fields.get("m")
    if raw is None:
        raise CodecError("entry has no 'm' field (ticks carry one envelope in 'm')")
    body = decode_body(raw)
    if not isinstance(body, Tick):
        raise CodecError(f"{body.message_type} is not a tick")
    return body


class TickConsumer:
    """Runs each tick's turn in its own task, at most `concurrency` at once per process."""

    def __init__(
        self,
        service: TurnService,
        redis: AnyRedis,
        names: Names,
        metrics: Metrics,
        *,
        consumer: str,
        concurrency: int,
    ) -> None:
        self.service = service
        self.redis = redis
        self.names = names
        self.metrics = metrics
        self.consumer = consumer
        self.slots = asyncio.Semaphore(concurrency)
        self.running: set[asyncio.Task[None]] = set()
        self.closing = False

    async def dispatch(
        self, stream: str, entry_id: str, fields: Mapping[str, Any], *, via: str
    ) -> None:
        """Start the tick's turn; `via` is the consumer this delivery came through."""
        try:
            tick = decode_tick(fields)
        except CodecError as err:
            await self.poison(stream, entry_id, fields, f"undecodable: {err}")
            return
        await self.slots.acquire()
        if self.closing:
            self.slots.release()  # left pending: a live process's reclaimer serves it
            return
        serve = self._serve(stream, entry_id, tick, via)
        task = asyncio.create_task(serve, name=f"turn-{entry_id}")
        self.running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        self.slots.release()

    async def _serve(self, stream: str, entry_id: str, tick: Tick, via: str) -> None:
        args = [Group.EXECUTOR, entry_id, via]

        async def touch() -> object:
            # A JUSTID claim resets the entry's idle time without counting a delivery.
            return flag(await self.redis.fcall(Fn.TOUCH_IF_MINE, 1, stream, *args))

        ack = _Ack(stream, args)
        try:
            served = await self.service.run(tick, touch, ack)
            if served.settled and not ack.acked:
                log.info("tick_left_to_new_owner", agent_id=tick.agent_id, tick_id=tick.tick_id)
        except TRANSIENT as exc:
            log.warning("tick_left_pending", agent_id=tick.agent_id, error=repr(exc))
        except Exception:
            log.exception("turn_crashed", agent_id=tick.agent_id, tick_id=tick.tick_id)

    async def poison(
        self, stream: str, entry_id: str, fields: Mapping[str, Any], reason: str
    ) -> None:
        await dead_letter(
            self.redis,
            self.names,
            fields=fields,
            reason=reason,
            source_stream=stream,
            source_id=entry_id,
        )
        await self.redis.xack(stream, Group.EXECUTOR, entry_id)
        label = reason.split(":", maxsplit=1)[0]
        self.metrics.dead_lettered.labels(stream=stream, reason=label).inc()

    async def close(self, grace_s: float) -> None:
        """Stop taking ticks; give running turns `grace_s` to end, then interrupt the rest."""
        self.closing = True
        if self.running:
            await asyncio.wait(set(self.running), timeout=grace_s)
        for task in list(self.running):
            task.cancel()
        if self.running:
            # Bounded: on Python 3.11 a cancel can be swallowed mid-Redis-call (gh-86296).
            await asyncio.wait(set(self.running), timeout=SHUTDOWN_FINISH_S + 1)


def register(
    broker: RedisBroker,
    consumer: TickConsumer,
    *,
    partitions: Sequence[int],
    batch_size: int,
    reclaim_idle_ms: int,
) -> list[Any]:
    """One batch subscriber and one reclaimer per partition (one factory call each, NOTES 13)."""
    subscribers = []
    for p in partitions:
        stream = consumer.names.ticks(p)
        subscribers.append(_batch_subscriber(broker, consumer, stream, batch_size))
        subscribers.append(_reclaimer(broker, consumer, stream, reclaim_idle_ms))
    return subscribers


def _batch_subscriber(broker: RedisBroker, consumer: TickConsumer, stream: str, size: int) -> Any:
    sub = broker.subscriber(
        stream=Subscription(
            stream,
            group=Group.EXECUTOR,
            consumer=consumer.consumer,
            batch=True,
            max_records=size,
            polling_interval=1000,
        ),
        ack_policy=AckPolicy.MANUAL,  # the turn acks its tick when it is over
    )

    @sub
    async def handle(body: list[dict[str, Any]]) -> None:
        # The message from the broker's context, looked up at call time: a `msg` parameter is
        # resolved by fast_depends in a worker thread on every call (as in the ledger).
        msg: RedisBatchStreamMessage = broker.context.get_local("message")
        ids = [i.decode() for i in msg.raw_message["message_ids"]]
        for entry_id, fields in zip(ids, body, strict=True):
            await consumer.dispatch(stream, entry_id, fields, via=consumer.consumer)

    return sub


def _reclaimer(broker: RedisBroker, consumer: TickConsumer, stream: str, idle_ms: int) -> Any:
    reclaimer = f"{consumer.consumer}-reclaim"
    sub = broker.subscriber(
        stream=Subscription(
            stream,
            group=Group.EXECUTOR,
            consumer=reclaimer,
            min_idle_time=idle_ms,
            polling_interval=1000,
        ),
        ack_policy=AckPolicy.MANUAL,
    )

    @sub
    async def reclaim(body: dict[str, Any], msg: RedisStreamMessage) -> None:
        entry_id = msg.raw_message["message_ids"][0].decode()
        deliveries = await msg.get_delivery_count()
        if deliveries > DELIVERY_CAP:
            await consumer.poison(stream, entry_id, body, f"delivery cap: {deliveries} deliveries")
            return
        log.info("tick_reclaimed", stream=stream, entry_id=entry_id, deliveries=deliveries)
        await consumer.dispatch(stream, entry_id, body, via=reclaimer)

    return sub
