"""The command round trip: send a command to its partition's stream, await the ledger's reply.

Each process owns one reply stream; a reader task resolves waiting futures by command id. A
command unanswered within the timeout is sent again with the same command id: the ledger applies
it at most once and answers the duplicate with the first reply. The commands of one send are
appended to their stream by one command, so a waiting ledger reads them in one batch.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast

import structlog
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.coalesce import Coalescer
from shared.store.client import AnyRedis
from shared.store.protocol import Fn
from shared.wire.codec import CodecError, Envelope, decode_body, encode
from shared.wire.commands import Command
from shared.wire.names import Names
from shared.wire.replies import CommandReply

log = structlog.get_logger("longrun.ledger_client")

COMMANDS_MAXLEN = 500_000
"""Per partition; sized for a long ledger outage (an entry trimmed unread is lost, consumer
rule 8 in docs/architecture.md)."""
_TRIM: dict[str, Any] = {"maxlen": COMMANDS_MAXLEN, "approximate": True}


READ_BLOCK_MS = 1000
"""How long one read of the reply stream waits for a reply."""

STOP_WAIT_S = 5.0
"""How long `stop` waits for the read in flight (one blocking read, or a socket timeout) before
it gives up on the reader and logs so."""

WRITE_BATCH = 256
"""Sends per pipeline at most, so one large group cannot hold a connection for long."""

_Queued = tuple[list[tuple[str, dict[Any, Any]]], "asyncio.Future[None]"]
"""One send's stream entries, in order, and what its sender awaits."""


def _queue_entries(pipe: Any, entries: list[tuple[str, dict[Any, Any]]]) -> int:
    """Queue one send's entries on the pipeline; returns how many replies they get."""
    streams = {stream for stream, _ in entries}
    if len(entries) > 1 and len(streams) == 1:
        bodies = [fields["m"] for _, fields in entries]
        # One call, not an XADD each: a reader blocked on the stream then gets them in one batch.
        pipe.fcall(Fn.XADD_ALL, 1, entries[0][0], COMMANDS_MAXLEN, *bodies)
        return 1
    for stream, fields in entries:
        pipe.xadd(stream, fields, **_TRIM)
    return len(entries)


class LedgerTimeout(Exception):
    """The ledger did not answer in time; the command may still apply (it is idempotent)."""


class LedgerClient:
    def __init__(
        self,
        redis: AnyRedis,
        names: Names,
        *,
        clock: Callable[[], datetime],
        new_id: Callable[[str], str],
        timeout: float = 5.0,
        attempts: int = 3,
    ) -> None:
        self.redis = redis
        self.names = names
        self.clock = clock
        self.new_id = new_id
        self.timeout = timeout
        self.attempts = attempts
        self.reply_stream = names.replies(secrets.token_hex(8))
        self._waiting: dict[str, list[asyncio.Future[CommandReply]]] = {}
        self._writes = Coalescer(self._write_batch, limit=WRITE_BATCH, rounds=1)
        """Sends queued while a write is in flight go together in the next pipeline."""
        self._reader: asyncio.Task[None] | None = None
        self._stop_reading = asyncio.Event()
        """The running reader's stop flag (each reader gets its own)."""

    async def start(self) -> None:
        self._start_reader()

    def _start_reader(self) -> None:
        if self._reader is None:
            self._stop_reading = asyncio.Event()
            self._reader = asyncio.create_task(
                self._read_replies(self._stop_reading), name="ledger-replies"
            )

    async def stop(self) -> None:
        """Stop reading replies (by a flag as well as a cancel), then delete the reply stream.

        On Python 3.11 a cancel that lands while redis-py finishes writing a command is swallowed
        (asyncio.wait_for, gh-86296; redis-py writes through it whenever a socket timeout is set,
        as on every Redis Cluster connection): a reader that only listened for the cancel read on
        for good and held its owner's shutdown open. The flag ends it after the read in flight,
        which blocks for `READ_BLOCK_MS` at most."""
        reader = self._reader
        if reader is not None:
            self._stop_reading.set()
            reader.cancel()
            await asyncio.wait({reader}, timeout=STOP_WAIT_S)
            if not reader.done():
                log.warning("reply_reader_stop_timed_out", stream=self.reply_stream)
            elif not reader.cancelled() and reader.exception() is not None:
                log.warning("reply_reader_failed", error=repr(reader.exception()))
            self._reader = None
        await self.redis.delete(self.reply_stream)

    @property
    def running(self) -> bool:
        return self._reader is not None and not self._reader.done()

    async def _read_replies(self, stopping: asyncio.Event) -> None:
        last = "0-0"
        while not stopping.is_set():
            try:
                found = await self.redis.xread(
                    {self.reply_stream: last}, count=500, block=READ_BLOCK_MS
                )
            except (ConnectionError, OSError, RedisConnectionError, RedisTimeoutError) as exc:
                # redis-py's connection errors are not OSErrors: without them a Redis restart
                # would end this reader for good and every later send would time out.
                log.warning("reply_read_failed", error=repr(exc))
                await asyncio.sleep(0.5)
                continue
            for _stream, entries in cast(list[Any], found or []):
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    self._resolve(fields)

    def _resolve(self, fields: dict[bytes, bytes]) -> None:
        try:
            reply = decode_body(fields[b"m"])
        except (CodecError, KeyError) as exc:
            log.warning("bad_reply", error=repr(exc))
            return
        if not isinstance(reply, CommandReply):
            return
        for future in self._waiting.pop(reply.command_id, []):
            if not future.done():
                future.set_result(reply)

    async def publish(self, *commands: Command) -> None:
        """Send without waiting (the sender does not need the answer), in one round trip."""
        if commands:
            await self._enqueue(commands)

    def _enqueue(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        """Queue the commands for their partitions' streams, in this order, behind everything
        queued before; the future resolves once they are written. Sends queued while a write is
        in flight go together in the next pipeline: one write and one round trip for all of them
        (turns resume in bursts, as a read brings many replies at once), and no added delay
        when idle (the first leaves on the next loop iteration)."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writes.post([([self._entry(c) for c in commands], written)])
        return written

    async def _write_batch(self, batch: Sequence[_Queued]) -> None:
        """One pipeline for the batch's sends; each sender learns its own entries' outcome (this
        never raises for one, so the coalescer never runs a send twice)."""
        pipe = self.redis.pipeline(transaction=False)
        calls = [_queue_entries(pipe, entries) for entries, _ in batch]
        try:
            results = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:
            for _, written in batch:
                written.cancel()
            raise
        except Exception as exc:  # the whole round trip failed: every sender learns why
            results = [exc] * sum(calls)
        at = 0
        for (_, written), n in zip(batch, calls, strict=True):
            mine, at = results[at : at + n], at + n
            if written.done():
                continue  # its sender went away; the entries were still written
            failed = next((r for r in mine if isinstance(r, Exception)), None)
            if failed is not None:
                written.set_exception(failed)
            else:
                written.set_result(None)

    def _entry(self, command: Command) -> tuple[str, dict[Any, Any]]:
        stream = self.names.commands(self.names.partition(command.agent_id))
        body = encode(Envelope(id=self.new_id("msg_"), at=self.clock(), body=command))
        return stream, {"m": body}

    async def send(self, command: Command) -> CommandReply:
        """Send and await the reply, resending on timeout; raises LedgerTimeout at the end."""
        (reply,) = await self.send_all([command])
        return reply

    async def send_all(
        self, commands: Sequence[Command], *, published: Sequence[Command] = ()
    ) -> list[CommandReply]:
        """Send `published` (unanswered), then `commands`, in one round trip and in this order,
        and await every command's reply; unanswered ones are resent on timeout with the same
        command ids. Raises LedgerTimeout at the end."""
        if not commands:
            await self.publish(*published)
            return []
        return await self._replies(*self._queue(commands, published))

    def queue_all(
        self, commands: Sequence[Command], *, published: Sequence[Command] = ()
    ) -> asyncio.Task[list[CommandReply]]:
        """`send_all` as a task, with the commands queued before this returns: whatever this
        process sends afterwards reaches the streams after them, so a caller can go on working
        while the replies travel and still keep its commands in order."""
        return asyncio.ensure_future(self._replies(*self._queue(commands, published)))

    def _queue(
        self, commands: Sequence[Command], published: Sequence[Command]
    ) -> tuple[list[Command], list[asyncio.Future[CommandReply]], asyncio.Future[None]]:
        self._start_reader()
        loop = asyncio.get_running_loop()
        sent = [c.model_copy(update={"reply_to": self.reply_stream}) for c in commands]
        written = self._enqueue([*published, *sent])  # first: it raises if one cannot be encoded
        futures: list[asyncio.Future[CommandReply]] = []
        for command in sent:
            future: asyncio.Future[CommandReply] = loop.create_future()
            self._waiting.setdefault(command.command_id, []).append(future)
            futures.append(future)
        return sent, futures, written

    async def _replies(
        self,
        sent: list[Command],
        futures: list[asyncio.Future[CommandReply]],
        written: asyncio.Future[None],
    ) -> list[CommandReply]:
        todo = sent
        try:
            for attempt in range(self.attempts):
                if attempt:
                    written = self._enqueue(todo)
                await written
                # asyncio.wait leaves the futures alone on timeout: no shield, no extra task.
                _done, pending = await asyncio.wait(futures, timeout=self.timeout)
                if not pending:
                    return [future.result() for future in futures]
                todo = [c for c, f in zip(sent, futures, strict=True) if not f.done()]
                for command in todo:
                    log.warning("ledger_reply_timeout", command_id=command.command_id)
            late = ", ".join(c.command_id for c in todo)
            raise LedgerTimeout(f"no reply to {late} after {self.attempts} sends")
        finally:
            for command, future in zip(sent, futures, strict=True):
                waiting = self._waiting.get(command.command_id, [])
                if future in waiting:
                    waiting.remove(future)
                    if not waiting:
                        self._waiting.pop(command.command_id, None)
