"""Building a Redis client for a URL: one server, or a Redis Cluster when asked for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, TypeAlias

import hiredis
from redis.asyncio import BlockingConnectionPool, Connection, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ClusterError, SlotNotCoveredError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

AnyRedis: TypeAlias = Redis | RedisCluster

CLUSTER_UNAVAILABLE: tuple[type[Exception], ...] = (
    ClusterError,
    TryAgainError,
    SlotNotCoveredError,
)
"""What a Redis Cluster answers while a primary is down or slots move (CLUSTERDOWN, TRYAGAIN, an
uncovered slot), once redis-py's own retries are spent. Like a lost connection they say nothing
about the command: consumers leave its entry pending for a retry, never dead-letter it."""

MAX_CONNECTIONS = 256
POOL_WAIT_SECONDS = 20.0


_PLAIN = frozenset({str, bytes, int})


class HiredisPackingConnection(Connection):
    """Packs commands with hiredis in C. redis-py's asyncio connection packs in Python and
    re-joins its buffer once per argument, which is quadratic in the size of the long Function
    calls the ledger makes (it dominated the ledger's CPU profile)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]  # a command name, which redis-py may pass as "NAME SUBCOMMAND"
        if (" " if isinstance(first, str) else b" ") in first:
            args = (*first.split(), *args[1:])
        # repr() keeps every digit of a float (sorted-set scores); hiredis would round. Most
        # calls carry only text, bytes and ints: look at the few distinct types first.
        types = set(map(type, args))
        if not types <= _PLAIN and any(issubclass(t, float) for t in types):
            args = tuple(repr(a) if isinstance(a, float) else a for a in args)
        pack: Any = hiredis.pack_command  # its stubs type a one-element tuple only
        return [pack(args)]

    async def _send_packed_command(self, command: Iterable[bytes]) -> None:
        """A socket closed under a command in flight fails as a connection error.

        redis-py's cluster client drops a node's connections when the node fails, also those
        another task is using at that moment (a blocking read, a Function call). That task then
        writes to a writer that is gone (AttributeError) or to a closed uvloop handle
        (RuntimeError), which callers would take for a failure of their command and not retry:
        the ledger would dead-letter a command Redis never saw. As an OSError it becomes the
        ConnectionError redis-py retries and callers treat as Redis being away.
        """
        writer = self._writer
        if writer is None:
            raise ConnectionResetError("the connection was closed while in use")
        try:
            writer.writelines(command)
            await writer.drain()
        except RuntimeError as exc:
            raise ConnectionResetError(f"the connection was closed while in use: {exc}") from exc


class BoundedPool(BlockingConnectionPool):
    """BlockingConnectionPool's contract without its cost per call: at most `max_connections`
    connections, and a caller finding them all in use waits up to `timeout` for one.

    redis-py's blocking pool checks a connection out under an asyncio.Condition and a timeout
    timer, and both of its pools record observability metrics and dispatch a release event on
    every call: a measured part of the caller's CPU per Redis call (docs/benchmarks.md), more
    on the cold caches of a process woken at low rates, where a wake-up makes three to five
    calls. A semaphore bounds
    the connections instead, and a free slot is taken without waiting or arming a timer.
    Checkout connects a closed connection and replaces one with unread data (see `_ready`).
    longrun uses neither redis-py's observability nor its streaming credential providers,
    which the release event serves.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = asyncio.Semaphore(self.max_connections)

    def reset(self) -> None:
        super().reset()  # type: ignore[no-untyped-call]
        self._slots = asyncio.Semaphore(self.max_connections)

    async def get_connection(
        self, command_name: Any = None, *keys: Any, **options: Any
    ) -> AbstractConnection:
        await self._take_slot()
        connection: AbstractConnection | None = None
        try:
            if self._in_maintenance:  # a MOVING notification may be rewriting the pool
                async with self._lock:
                    connection = self._check_out()
            else:
                connection = self._check_out()
            await self._ready(connection)
        except BaseException:
            if connection is None:
                self._slots.release()
            else:
                await self.release(connection)
            raise
        return connection

    async def _take_slot(self) -> None:
        if not self._slots.locked():
            await self._slots.acquire()  # returns at once: a slot is free
            return
        try:
            async with asyncio.timeout(self.timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise RedisConnectionError("No connection available.") from None

    @staticmethod
    async def _ready(connection: AbstractConnection) -> None:
        """Connected, with nothing unread: a reply left by a caller that went away, or the
        end of a socket the server closed, would be read by the next command as its own.
        redis-py's `ensure_connection` skips this check whenever maintenance notifications are
        on, which they are by default ("auto"), even over RESP2 where none can arrive."""
        await connection.connect()  # type: ignore[no-untyped-call]
        if await connection.can_read():
            await connection.disconnect()
            await connection.connect()  # type: ignore[no-untyped-call]
            if await connection.can_read():
                raise RedisConnectionError("the connection has unread data after reconnecting")

    def _check_out(self) -> AbstractConnection:
        connection = (
            self._available_connections.pop()
            if self._available_connections
            else self.make_connection()  # type: ignore[no-untyped-call]
        )
        self._in_use_connections.add(connection)
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        if connection not in self._in_use_connections:
            # Checked out before a reset: not this pool's to keep.
            await connection.disconnect()
            return
        self._in_use_connections.remove(connection)
        try:
            if connection.should_reconnect():  # type: ignore[no-untyped-call]
                await connection.disconnect()
        finally:  # even when cancelled: a closed connection reconnects at its next checkout
            self._available_connections.append(connection)
            self._slots.release()


def connect(url: str, *, cluster: bool = False, max_connections: int = MAX_CONNECTIONS) -> AnyRedis:
    """Clients answer bytes; callers decode what they read. No connection is made here.
    `max_connections` bounds the pool (per node on a cluster)."""
    if cluster:
        return _cluster(url, max_connections)
    # A bounded pool makes a burst of callers wait for a connection; redis-py's default pool
    # raises MaxConnectionsError past 100 connections, failing sends under load.
    pool = BoundedPool.from_url(
        url,
        max_connections=max_connections,
        timeout=POOL_WAIT_SECONDS,
        decode_responses=False,
        health_check_interval=30,
        connection_class=HiredisPackingConnection,
    )
    # from_pool: the client owns the pool, so aclose() closes its connections; a client built
    # with Redis(connection_pool=pool) leaves them open (unclosed sockets at shutdown).
    return Redis.from_pool(pool)


def _cluster(url: str, max_connections: int) -> RedisCluster:
    """A cluster client seeded by `url`; it discovers the other nodes on first use.

    Each node gets its own pool of up to `max_connections`; past it redis-py's cluster client
    raises instead of waiting, so callers size it for their peak. RedisCluster takes no connection
    class, so `use_packing_connections` puts it into what every node is built from.
    """
    client = RedisCluster.from_url(
        url, decode_responses=False, max_connections=max_connections, health_check_interval=30
    )
    return use_packing_connections(client)


def use_packing_connections(client: RedisCluster) -> RedisCluster:
    """Make every node of a cluster client, known or discovered later, connect with
    HiredisPackingConnection (also for its handling of a socket closed in flight). Call it
    before the client's first command."""
    client.nodes_manager.connection_kwargs["connection_class"] = HiredisPackingConnection
    for node in (*client.startup_nodes, *client.nodes_manager.startup_nodes.values()):
        node.connection_class = HiredisPackingConnection
    return client


def stored(values: Iterable[bytes | str]) -> list[bytes]:
    """Values as Redis holds them (longrun's clients never decode answers)."""
    return [v if isinstance(v, bytes) else v.encode() for v in values]
