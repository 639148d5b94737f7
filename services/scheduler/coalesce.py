"""Group commit for the event path: batches that arrive while one is being decided are decided
together in the next round, so concurrent partitions share one snapshot read and one publish
instead of a Redis round trip each.

Each partition's subscriber hands its decoded batch to `submit` and waits for the round that
carries it. No round waits for company: a batch arriving when nothing runs starts a round at
once. A failing combined round is run again batch by batch, so a batch only ever fails for its
own entries (decisions are recomputed from state, so running a batch twice publishes nothing
twice: the marker admits one tick, command ids are per state, timers arm once per event).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class RoundCancelled(RuntimeError):
    """The submitter whose task ran the round was cancelled before the round ended."""


def _future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


@dataclass(eq=False)
class _Ticket(Generic[T]):
    items: Sequence[T]
    woken: asyncio.Future[None] = field(default_factory=_future)
    """Resolved when the round that carried the items ended, or when this ticket is to lead."""
    lead: bool = False
    error: BaseException | None = None


class Coalescer(Generic[T]):
    """Runs `run` over the items of every `submit` waiting when a round starts."""

    def __init__(self, run: Callable[[Sequence[T]], Awaitable[object]], *, limit: int) -> None:
        self._run = run
        self.limit = limit
        """Items a round takes at most (a batch is never split): decisions between two awaits
        hold the event loop, so a backlog on every partition must not become one long round."""
        self._queue: list[_Ticket[T]] = []
        self._busy = False
        self.rounds = 0
        """Rounds run so far (for tests and measurements)."""

    async def submit(self, items: Sequence[T]) -> None:
        """Returns once a round carrying `items` succeeded; raises what their own run raised."""
        me = _Ticket(items)
        self._queue.append(me)
        if self._busy:
            try:
                await me.woken
            except asyncio.CancelledError:
                if me.lead:  # stopped after being asked to lead: ask the next one instead
                    self._queue.remove(me)
                    self._pass_lead()
                raise
            if not me.lead:
                if me.error is not None:
                    raise me.error
                return
        self._busy = True
        batch = self._take()
        ended = False
        try:
            await self._round(batch)
            ended = True
        finally:
            self._hand_over(batch, ended=ended)
        if me.error is not None:
            raise me.error

    def _take(self) -> list[_Ticket[T]]:
        """The waiting batches, oldest first (the leader's own is the oldest), up to the limit."""
        count, taken = 0, 0
        for ticket in self._queue:
            if taken and count + len(ticket.items) > self.limit:
                break
            count += len(ticket.items)
            taken += 1
        batch, self._queue = self._queue[:taken], self._queue[taken:]
        return batch

    async def _round(self, batch: list[_Ticket[T]]) -> None:
        self.rounds += 1
        try:
            await self._run([item for ticket in batch for item in ticket.items])
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
            for ticket in batch:
                await self._alone(ticket)

    async def _alone(self, ticket: _Ticket[T]) -> None:
        try:
            await self._run(ticket.items)
        except Exception as exc:
            ticket.error = exc

    def _hand_over(self, batch: list[_Ticket[T]], *, ended: bool) -> None:
        """Wake the round's other submitters, then the first one waiting, to lead the next."""
        for ticket in batch:
            if not ticket.woken.done():
                if not ended and ticket.error is None:
                    # The leader was cancelled mid-round (shutdown): the others retry theirs.
                    ticket.error = RoundCancelled("the round carrying this batch was cancelled")
                ticket.woken.set_result(None)
        self._pass_lead()

    def _pass_lead(self) -> None:
        while self._queue:
            first = self._queue[0]
            if not first.woken.done():
                first.lead = True
                first.woken.set_result(None)
                return
            self._queue.pop(0)  # its subscriber was stopped: the entries stay pending
        self._busy = False
