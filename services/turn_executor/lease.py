"""Turn leases: one per agent, taken with a fresh fencing token, renewed while the turn runs,
dropped only by their owner; and the outstanding-tick marker the scheduler sets.

All of it goes through longrun's Redis Functions (docs/streams.md), so taking a lease and minting
its token is one atomic step, and a late renew or release never touches a newer owner's lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Protocol

import structlog
from redis.exceptions import RedisError

from shared.domain.control import ends_turn_now
from shared.store.client import AnyRedis
from shared.store.protocol import Fn, flag, token
from shared.wire.names import Names

log = structlog.get_logger("longrun.executor")


class Settlement(Protocol):
    """A step that settles a served tick (the executor acknowledges its stream entry), run in
    the round trip that clears the tick marker, right after it."""

    def queue(self, pipe: Any) -> None: ...

    def answered(self, answer: Any) -> None: ...


class LeaseLost(Exception):
    """The lease expired or was taken over: the turn must stop writing and end."""


class Leases:
    def __init__(self, redis: AnyRedis, names: Names, *, ttl_ms: int) -> None:
        self.redis = redis
        self.names = names
        self.ttl_ms = ttl_ms

    async def acquire(self, agent_id: str, owner: str) -> int | None:
        """The fencing token of a new lease, or None while another turn holds one."""
        keys = (self.names.lease(agent_id), self.names.fence(agent_id))
        return token(await self.redis.fcall(Fn.LEASE_ACQUIRE, 2, *keys, owner, self.ttl_ms))

    async def acquire_then(
        self, agent_id: str, owner: str, reads: Callable[[Any], object]
    ) -> tuple[int | None, list[Any]]:
        """`acquire` plus the reads `reads` queues on the pipeline, in one round trip. Redis runs
        them after the acquire, so with the lease taken they see what the last holder left."""
        pipe = self.redis.pipeline(transaction=False)
        keys = (self.names.lease(agent_id), self.names.fence(agent_id))
        pipe.fcall(Fn.LEASE_ACQUIRE, 2, *keys, owner, self.ttl_ms)
        reads(pipe)
        acquired, *answers = await pipe.execute()
        return token(acquired), answers

    async def renew(self, agent_id: str, owner: str) -> bool:
        lease = self.names.lease(agent_id)
        return flag(await self.redis.fcall(Fn.LEASE_RENEW, 1, lease, owner, self.ttl_ms))

    async def renew_reading_control(self, agent_id: str, owner: str) -> tuple[bool, str]:
        """`renew`, and the operator's control signal for the agent's running turn
        (shared.domain.control), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.fcall(Fn.LEASE_RENEW, 1, self.names.lease(agent_id), owner, self.ttl_ms)
        pipe.hget(self.names.agent(agent_id), "control")
        renewed, signal = await pipe.execute()
        text = signal.decode() if isinstance(signal, bytes) else (signal or "")
        return flag(renewed), text

    async def release(
        self,
        agent_id: str,
        owner: str,
        *,
        tick_id: str | None = None,
        then: Settlement | None = None,
    ) -> bool:
        """Drop the lease if still ours and, with `tick_id`, the tick marker if it still names
        that tick (then `then`'s step), in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.fcall(Fn.LEASE_RELEASE, 1, self.names.lease(agent_id), owner)
        if tick_id is not None:
            pipe.fcall(Fn.TICK_RELEASE, 1, self.names.outstanding_tick(agent_id), tick_id)
            if then is not None:
                then.queue(pipe)
        done = await pipe.execute()
        if tick_id is not None and then is not None:
            then.answered(done[-1])
        return flag(done[0])

    async def holder(self, agent_id: str) -> str | None:
        raw = await self.redis.get(self.names.lease(agent_id))
        return raw.decode() if isinstance(raw, bytes) else raw

    async def release_tick(
        self, agent_id: str, tick_id: str, *, then: Settlement | None = None
    ) -> bool:
        """Clear the outstanding-tick marker if it still names this tick (then `then`'s step)."""
        marker = self.names.outstanding_tick(agent_id)
        if then is None:
            return flag(await self.redis.fcall(Fn.TICK_RELEASE, 1, marker, tick_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.fcall(Fn.TICK_RELEASE, 1, marker, tick_id)
        then.queue(pipe)
        done, answer = await pipe.execute()
        then.answered(answer)
        return flag(done)


KEEPER_STOP_S = 5.0
"""How long leaving a turn waits for a renew already on the wire before giving up on it."""


class LeaseKeeper:
    """Renews a held lease every ttl/3 while the turn works, and runs `touch` beside it (the
    executor uses it to keep its tick entry from looking idle to other processes' reclaimers).

    A renew that finds another owner sets `lost`; the turn checks it between steps. Each renew
    also reads the operator's control signal: an interrupt naming `turn_id` sets `stop_now`,
    which the round loop races its model call and tool calls against. A renew that
    fails on the network is retried at the next beat: the lease still has two beats to live.
    Beats are timer callbacks, so a turn shorter than a beat costs no task at all. The keeper is
    stopped by a flag and by cancelling its timer, never by cancelling a renew in flight: on
    Python 3.11 a cancel that lands while redis-py finishes a write is swallowed (asyncio.wait_for,
    gh-86296), which would leave the keeper renewing a finished turn's lease forever.
    """

    def __init__(
        self,
        leases: Leases,
        agent_id: str,
        owner: str,
        touch: Callable[[], Awaitable[object]] | None = None,
        *,
        turn_id: str | None = None,
    ) -> None:
        self.leases = leases
        self.agent_id = agent_id
        self.owner = owner
        self.touch = touch
        self.turn_id = turn_id
        self.lost = asyncio.Event()
        self.stop_now = asyncio.Event()
        """The operator interrupted this turn (pause with interrupt, or retire)."""
        self._stopped = False
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"the lease of {self.agent_id} is no longer held by {self.owner}")

    def _arm(self) -> None:
        """Schedule the next beat."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.leases.ttl_ms / 3000, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self._stopped:
            self._task = asyncio.create_task(self._beat(), name=f"lease-{self.agent_id}")

    async def _beat(self) -> None:
        try:
            renewed, signal = await self.leases.renew_reading_control(self.agent_id, self.owner)
            if not renewed:
                self.lost.set()
                log.warning("lease_lost", agent_id=self.agent_id, owner=self.owner)
                return
            if self.turn_id is not None and ends_turn_now(signal, self.turn_id):
                log.info("turn_interrupted", agent_id=self.agent_id, turn_id=self.turn_id)
                self.stop_now.set()
            if self.touch is not None:
                await self.touch()
        except (RedisError, OSError) as exc:
            log.warning("lease_renew_failed", agent_id=self.agent_id, error=repr(exc))
        if not self._stopped:
            self._arm()

    async def __aenter__(self) -> LeaseKeeper:
        self._arm()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task}, timeout=KEEPER_STOP_S)
            if not self._task.done():
                self._task.cancel()  # best effort; the lease is released right after anyway
