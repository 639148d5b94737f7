"""Loading longrun's Redis Functions library (shared/store/longrun.lua) into a server."""

from __future__ import annotations

from importlib import resources

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

LIBRARY_SOURCE = resources.files("shared.store").joinpath("longrun.lua").read_text()


async def load_functions(client: Redis | RedisCluster) -> None:
    """FUNCTION LOAD REPLACE on every primary; safe to repeat at every start."""
    if isinstance(client, RedisCluster):
        await client.function_load(LIBRARY_SOURCE, replace=True, target_nodes="primaries")  # type: ignore[call-arg]
        return
    await client.function_load(LIBRARY_SOURCE, replace=True)
