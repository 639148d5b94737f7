"""Ticks in, turns out: one batch subscriber and one reclaimer per partition feed a bounded pool
of concurrent turns; each tick is acknowledged only when its turn is over.

A subscriber hands a tick to the pool and returns, so one slow turn never holds a partition; it
waits only while every slot is busy, which bounds what a process has fetched but not started.
A tick stays pending while its turn runs, and the turn's lease beat keeps the entry from looking
idle, so other processes' reclaimers take only ticks whose executor died.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker

from services.turn_executor.service import SHUTDOWN_FINISH_S, TurnService
from shared.consumer import TRANSIENT, Delivered, Fields, StreamConsumer, required
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.store.protocol import Fn, flag
from shared.wire.codec import CodecError, decode_body
from shared.wire.names import Group, Names
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.executor")


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


def decode_tick(fields: Fields) -> Tick:
    body = decode_body(required(fields, "m"))
    if not isinstance(body, Tick):
        raise CodecError(f"{body.message_type} is not a tick")
    return body


class TickConsumer:
    """Runs each tick's turn in its own task, at most `concurrency` at once per process. Ticks
    arrive under the shared consumer policy; the turn acknowledges its tick when it is over
    (MANUAL acks)."""

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
        self.consumer = consumer
        self.slots = asyncio.Semaphore(concurrency)
        self.running: set[asyncio.Task[None]] = set()
        self.closing = False
        self.stream = StreamConsumer(
            redis,
            names,
            metrics,
            group=Group.EXECUTOR,
            decode=decode_tick,
            handle=self.start_turns,
            acks=AckPolicy.MANUAL,
        )

    async def start_turns(self, batch: Sequence[Delivered[Tick]]) -> None:
        for tick in batch:
            await self.dispatch(tick)

    async def dispatch(self, tick: Delivered[Tick]) -> None:
        """Start the tick's turn; it waits only while every slot is busy."""
        await self.slots.acquire()
        if self.closing:
            self.slots.release()  # left pending: a live process's reclaimer serves it
            return
        serve = self._serve(tick.stream, tick.entry_id, tick.value, tick.consumer)
        task = asyncio.create_task(serve, name=f"turn-{tick.entry_id}")
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
        # The turn runs after its batch was handed over, so whatever it fails with leaves the
        # tick pending: a reclaimer serves it again, and the delivery cap ends a tick that
        # always fails. Only the log says which kind of failure it was.
        except TRANSIENT as exc:
            log.warning("tick_left_pending", agent_id=tick.agent_id, error=repr(exc))
        except Exception:
            log.exception("turn_crashed", agent_id=tick.agent_id, tick_id=tick.tick_id)

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
    """One batch subscriber and one reclaimer per partition. The batch subscriber's consumer is
    the process's own name, which its turns' leases carry too."""
    subscribers = []
    for p in partitions:
        subscribers += consumer.stream.subscribe(
            broker,
            consumer.names.ticks(p),
            consumer=consumer.consumer,
            size=batch_size,
            idle_ms=reclaim_idle_ms,
        )
    return subscribers
