"""Group commit: batches that arrive while the allowed number of rounds is running are handled
together in the next round, so concurrent partitions share one round's Redis round trips instead
of paying them each (the scheduler's event path, the ledger's command path), and concurrent
senders share one pipeline (the ledger client's command writes, through `post`).

Each partition's subscriber hands its decoded batch to `submit` and waits for the round that
carries it. No round waits for company: a batch arriving with a round slot free starts a round
at once. Rounds may overlap (one decides while another waits for Redis). A failing combined
round is run again batch by batch, so a batch only ever fails for its own entries; the round
function must therefore be safe to run twice over the same items (the scheduler recomputes from
state, the ledger answers a repeated command id from its stored reply).
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
    batch: list[_Ticket[T]] | None = None
    """Set when this ticket is to lead a round: the tickets that round carries (itself first)."""
    error: BaseException | None = None


class Coalescer(Generic[T]):
    """Runs `run` over the items of the `submit`s waiting when a round slot frees up."""

    def __init__(
        self, run: Callable[[Sequence[T]], Awaitable[object]], *, limit: int, rounds: int
    ) -> None:
        self._run = run
        self.limit = limit
        """Items a round takes at most (a batch is never split): decisions between two awaits
        hold the event loop, so a backlog on every partition must not become one long round."""
        self.slots = rounds
        """Rounds running at once: more overlap Redis waits with decisions, fewer share more."""
        self._queue: list[_Ticket[T]] = []
        self._running = 0
        self.rounds = 0
        """Rounds run so far (for tests and measurements)."""
        self._posted: set[asyncio.Task[None]] = set()
        """Tasks of posted items (the loop holds tasks weakly)."""
        self._starting = False

    async def submit(self, items: Sequence[T]) -> None:
        """Returns once a round carrying `items` succeeded; raises what their own run raised."""
        me = _Ticket(items)
        if self._running < self.slots:  # nothing waits while a slot is free
            self._running += 1
            me.batch = [me]
        else:
            self._queue.append(me)
        await self._serve(me)

    def post(self, items: Sequence[T]) -> asyncio.Task[None]:
        """`submit` in a task of its own, its place in line taken now: with one round at a time,
        items posted later reach `run` after these, and the round carrying them runs whether or
        not the poster waits for it. The first round starts on the next loop iteration with
        everything posted until then."""
        me = _Ticket(items)
        self._queue.append(me)
        task = asyncio.create_task(self._serve(me), name="coalesced-post")
        self._posted.add(task)
        task.add_done_callback(self._forget)
        if not self._starting and self._running < self.slots:
            self._starting = True
            asyncio.get_running_loop().call_soon(self._start)
        return task

    def _forget(self, task: asyncio.Task[None]) -> None:
        """A posted task ended. Its error counts as seen: a poster that wants it awaits the
        task (or, like the ledger client, learns the outcome per item from the round)."""
        self._posted.discard(task)
        if not task.cancelled():
            task.exception()

    def _start(self) -> None:
        self._starting = False
        if self._running < self.slots:
            batch = self._take()
            if batch:
                self._running += 1
                self._appoint(batch)

    async def _serve(self, me: _Ticket[T]) -> None:
        if me.batch is None:
            try:
                await me.woken
            except asyncio.CancelledError:
                if me.batch is not None:  # stopped after being asked to lead
                    self._resign(me)
                raise
        if me.batch is not None:
            batch, me.batch = me.batch, None  # the batch holds its leader: no cycle to collect
            await self._lead(batch)
        if me.error is not None:
            raise me.error

    async def _lead(self, batch: list[_Ticket[T]]) -> None:
        ended = False
        try:
            await self._round(batch)
            ended = True
        finally:
            for ticket in batch:
                if not ticket.woken.done():
                    if not ended and ticket.error is None:
                        # The leader was cancelled mid-round (shutdown): the others retry.
                        ticket.error = RoundCancelled("the round carrying this batch was cancelled")
                    ticket.woken.set_result(None)
            self._next()

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

    def _next(self) -> None:
        """Start a round for the waiting batches in the slot just freed, or free the slot."""
        batch = self._take()
        if batch:
            self._appoint(batch)
        else:
            self._running -= 1

    def _take(self) -> list[_Ticket[T]]:
        """Waiting batches, oldest first, up to the limit; those whose subscriber was stopped
        are dropped (their entries stay pending)."""
        batch: list[_Ticket[T]] = []
        count = 0
        while self._queue:
            ticket = self._queue[0]
            if ticket.woken.done():
                self._queue.pop(0)
                continue
            if batch and count + len(ticket.items) > self.limit:
                break
            batch.append(self._queue.pop(0))
            count += len(ticket.items)
        return batch

    def _appoint(self, batch: list[_Ticket[T]]) -> None:
        leader = batch[0]
        leader.batch = batch
        leader.woken.set_result(None)

    def _resign(self, me: _Ticket[T]) -> None:
        """A ticket asked to lead was stopped first: the rest of its batch needs a leader."""
        assert me.batch is not None
        rest = [t for t in me.batch if t is not me and not t.woken.done()]
        if rest:
            self._appoint(rest)
        else:
            self._next()
