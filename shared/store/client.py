"""Building a Redis client for a URL: one server, or a Redis Cluster when asked for."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

import hiredis
from redis.asyncio import BlockingConnectionPool, Connection, Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ClusterError, SlotNotCoveredError, TryAgainError

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


def connect(url: str, *, cluster: bool = False, max_connections: int = MAX_CONNECTIONS) -> AnyRedis:
    """Clients answer bytes; callers decode what they read. No connection is made here.
    `max_connections` bounds the pool (per node on a cluster)."""
    if cluster:
        return _cluster(url, max_connections)
    # A blocking pool makes a burst of callers wait for a connection; redis-py's default pool
    # raises MaxConnectionsError past 100 connections, failing sends under load.
    pool = BlockingConnectionPool.from_url(
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
