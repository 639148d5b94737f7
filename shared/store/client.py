"""Building a Redis client for a URL: one server, or a Redis Cluster when asked for."""

from __future__ import annotations

from typing import TypeAlias

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

AnyRedis: TypeAlias = Redis | RedisCluster


def connect(url: str, *, cluster: bool = False) -> AnyRedis:
    """Clients answer bytes; callers decode what they read. No connection is made here."""
    if cluster:
        return RedisCluster.from_url(url, decode_responses=False)
    return Redis.from_url(url, decode_responses=False, health_check_interval=30)
