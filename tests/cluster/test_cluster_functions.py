"""On a Redis Cluster every primary gets the Functions library, and none is downgraded."""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster

from shared.store.functions import LIBRARY_SOURCE, load_functions
from tests.integration.test_functions_load import DIGEST, VERSION, build


async def loaded(cluster: RedisCluster, node: ClusterNode) -> tuple[int, str]:
    answer: Any = await cluster.execute_command("FCALL_RO", "lr_version", 0, target_nodes=node)
    return int(answer[0]), answer[1].decode()


async def test_every_primary_is_loaded_and_a_newer_one_is_kept(cluster_redis: Any) -> None:
    cluster: RedisCluster = cluster_redis
    first, *rest = cluster.get_primaries()
    assert rest
    try:
        await cluster.execute_command(
            "FUNCTION LOAD", "REPLACE", build(VERSION + 1, "newer"), target_nodes=first
        )
        for node in rest:
            await cluster.execute_command(
                "FUNCTION LOAD", "REPLACE", build(VERSION - 1, "older"), target_nodes=node
            )
        await load_functions(cluster)
        assert await loaded(cluster, first) == (VERSION + 1, "newer")
        for node in rest:
            assert await loaded(cluster, node) == (VERSION, DIGEST)
    finally:
        await cluster.execute_command(
            "FUNCTION LOAD", "REPLACE", LIBRARY_SOURCE, target_nodes=RedisCluster.PRIMARIES
        )
