"""Timers and background loops: the poller that moves due timers to the fired streams, and the
periodic runner the scheduler's background work (poller, watchdog, sampler) shares.

Timers live in Redis (`<prefix>:{pNNN}:timers`, score = due time in ms), so they survive any
restart; `lr_timers_due` moves due members and removes them in one step, so any number of
replicas may poll every partition and each timer still fires once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import structlog

from shared.store.client import AnyRedis
from shared.store.protocol import Fn, count
from shared.wire.names import Names

log = structlog.get_logger("longrun.scheduler")

TIMERS_FIRED_MAXLEN = 100_000
"""Per partition; fired entries are consumed within a poll or two, this only bounds an outage."""
TIMERS_DUE_LIMIT = 500
"""Timers moved per partition per call; a full call polls that partition again at once."""


STOP_WAIT_S = 5.0
"""How long `stop` waits for a step in flight before it gives up on it (and logs so)."""


class Periodic:
    """Runs `step` every `interval` seconds until stopped; a failing step is logged and the
    loop goes on, so one bad read never silences the poller or the watchdog.

    Stopped by a flag as well as a cancel: on Python 3.11 a cancel that lands while redis-py
    finishes a command can be swallowed (asyncio.wait_for, gh-86296), and a loop that only
    listened for the cancel then ran on and held the process's shutdown open for good."""

    def __init__(self, name: str, interval: float, step: Callable[[], Awaitable[Any]]) -> None:
        self.name = name
        self.interval = interval
        self.step = step
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def running(self) -> bool:
        """Read by the health check beside the subscribers."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name=f"scheduler-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not task.done():
            log.warning("periodic_stop_timed_out", loop=self.name)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # any failure: log it, keep the loop alive, try again next time
                log.exception("periodic_step_failed", loop=self.name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.interval)


class TimerPoller:
    """Moves every partition's due timers to its fired stream (one pipelined call per round)."""

    def __init__(self, redis: AnyRedis, names: Names, clock: Callable[[], datetime]) -> None:
        self.redis = redis
        self.names = names
        self.clock = clock

    async def step(self) -> int:
        partitions = list(range(self.names.partitions))
        moved = 0
        while partitions:
            now_ms = int(self.clock().timestamp() * 1000)
            pipe = self.redis.pipeline(transaction=False)
            for p in partitions:
                keys = (self.names.timers(p), self.names.timers_fired(p))
                pipe.fcall(Fn.TIMERS_DUE, 2, *keys, now_ms, TIMERS_DUE_LIMIT, TIMERS_FIRED_MAXLEN)
            counts = [count(c) for c in await pipe.execute()]
            moved += sum(counts)
            partitions = [
                p for p, c in zip(partitions, counts, strict=True) if c >= TIMERS_DUE_LIMIT
            ]
        return moved
