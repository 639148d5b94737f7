"""Building a Redis client for a URL: one server, or a Redis Cluster when asked for."""

from __future__ import annotations

from typing import Any, TypeAlias

import hiredis
from redis.asyncio import Connection, Redis
from redis.asyncio.cluster import RedisCluster

AnyRedis: TypeAlias = Redis | RedisCluster


class HiredisPackingConnection(Connection):
    """Packs commands with hiredis in C. redis-py's asyncio connection packs in Python and
    re-joins its buffer once per argument, which is quadratic in the size of the long Function
    calls the ledger makes (it dominated the ledger's CPU profile)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        # repr() keeps every digit of a float (sorted-set scores); hiredis would round.
        packed = tuple(repr(a) if isinstance(a, float) else a for a in args)
        pack: Any = hiredis.pack_command  # its stubs type a one-element tuple only
        return [pack(packed)]


def connect(url: str, *, cluster: bool = False) -> AnyRedis:
    """Clients answer bytes; callers decode what they read. No connection is made here."""
    if cluster:
        return RedisCluster.from_url(url, decode_responses=False)
    return Redis.from_url(
        url,
        decode_responses=False,
        health_check_interval=30,
        connection_class=HiredisPackingConnection,
    )
