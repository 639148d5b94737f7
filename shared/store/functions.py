"""Loading longrun's Redis Functions library (shared/store/longrun.lua) into a server."""

from __future__ import annotations

from importlib import resources

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

LIBRARY_SOURCE = resources.files("shared.store").joinpath("longrun.lua").read_text()


async def load_functions(client: Redis | RedisCluster) -> None:
    """FUNCTION LOAD REPLACE on every primary; safe to repeat at every start."""
    if isinstance(client, RedisCluster):
        # Each primary runs the Functions for the slots it owns, so each needs the library;
        # replicas receive it through replication (and refuse FUNCTION LOAD).
        await client.execute_command(
            "FUNCTION LOAD", "REPLACE", LIBRARY_SOURCE, target_nodes=RedisCluster.PRIMARIES
        )
        return
    await client.function_load(LIBRARY_SOURCE, replace=True)
