"""The partition layout on a 3-primary cluster: the Function library on every primary, every
partition's keys in one slot, partitions spread over all primaries, and the executor's lease
Functions and ingress's dedup records served by whichever primary owns the agent."""

from __future__ import annotations

from typing import Any

import pytest
from faststream.redis import RedisBroker, RedisClusterBroker
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot
from redis.exceptions import ConnectionError

from services.turn_executor.lease import Leases
from shared.runtime import connect_broker, make_broker, redis_client
from shared.settings import CommonSettings
from shared.store.client import AnyRedis, HiredisPackingConnection
from shared.store.protocol import Fn, count, flag
from shared.wire.names import Names
from tests.cluster.conftest import Cluster, cluster_info


def agent_keys(names: Names, agent_id: str) -> list[str]:
    """Every key the ledger, scheduler and executor touch for one agent in one step."""
    p = names.partition(agent_id)
    return [
        names.agent(agent_id),
        names.items(agent_id),
        names.items_finished(agent_id),
        names.finished_index(agent_id),
        names.class_index(agent_id, "runnable"),
        names.waits(agent_id),
        names.waits_done(agent_id),
        names.idempotency(agent_id, "cmd-1"),
        names.fence(agent_id),
        names.lease(agent_id),
        names.inbox(agent_id),
        names.briefs(agent_id),
        names.reply_briefs(agent_id),
        names.summaries(agent_id),
        names.transcript(agent_id),
        names.evidence(agent_id),
        names.history(agent_id),
        names.segments(agent_id),
        names.item_batches(agent_id),
        names.outstanding_tick(agent_id),
        names.due_rechecks(agent_id),
        names.timer_scheduled(agent_id, 3),
        names.placeholder(agent_id),
        names.agents_index(p),
        names.commands(p),
        names.events(p),
        names.ticks(p),
        names.timers(p),
        names.timers_fired(p),
        names.capability(p, "abc"),
        names.delivery(p, "abc", "d-1"),
    ]


def test_the_cluster_has_three_primaries_covering_every_slot(redis_cluster: Cluster) -> None:
    node = redis_cluster.node(redis_cluster.ports[0])
    info = cluster_info(node)
    node.close()
    assert info["cluster_state"] == "ok"
    assert info["cluster_slots_assigned"] == "16384"
    assert info["cluster_size"] == "3"


async def test_the_function_library_is_on_every_primary(
    redis_cluster: Cluster, cluster_redis: AnyRedis
) -> None:
    assert isinstance(cluster_redis, RedisCluster)
    primaries = {int(n.port) for n in cluster_redis.get_primaries()}
    assert primaries == set(redis_cluster.ports)
    for port in redis_cluster.ports:
        node = redis_cluster.node(port)
        libraries = node.execute_command("FUNCTION LIST", "LIBRARYNAME", "longrun")
        node.close()
        fields = [dict(zip(lib[::2], lib[1::2], strict=True)) for lib in libraries]
        assert [f[b"library_name"] for f in fields] == [b"longrun"]
        assert b"lr_commit" in {
            dict(zip(f[::2], f[1::2], strict=True))[b"name"] for f in fields[0][b"functions"]
        }


@pytest.mark.parametrize("agent_id", ["agent-1", "agent-2", "a" * 60, "ünïcode-agent"])
def test_every_key_of_one_atomic_step_is_in_one_slot(cluster_names: Names, agent_id: str) -> None:
    slots = {key_slot(key.encode()) for key in agent_keys(cluster_names, agent_id)}
    assert len(slots) == 1


def test_partitions_spread_over_every_primary(redis_cluster: Cluster, cluster_names: Names) -> None:
    owners = {
        redis_cluster.node_port_of(cluster_names.commands(p))
        for p in range(cluster_names.partitions)
    }
    assert owners == set(redis_cluster.ports)


async def test_leases_and_fences_work_on_every_primary(
    redis_cluster: Cluster, cluster_redis: AnyRedis, cluster_names: Names
) -> None:
    leases = Leases(cluster_redis, cluster_names, ttl_ms=30_000)
    agents = [f"lease-{i}" for i in range(24)]
    owners = {redis_cluster.node_port_of(cluster_names.lease(a)) for a in agents}
    assert owners == set(redis_cluster.ports)
    for agent in agents:
        first = await leases.acquire(agent, "turn-a")
        assert first == 1
        assert await leases.acquire(agent, "turn-b") is None
        assert await leases.renew(agent, "turn-a")
        assert not await leases.renew(agent, "turn-b")
        await cluster_redis.set(cluster_names.outstanding_tick(agent), b"tick-1")
        assert await leases.release(agent, "turn-a", tick_id="tick-1")
        assert await cluster_redis.get(cluster_names.outstanding_tick(agent)) is None
        assert await leases.acquire(agent, "turn-b") == 2
        assert await leases.holder(agent) == "turn-b"


async def test_stream_functions_work_on_every_primary(
    redis_cluster: Cluster, cluster_redis: AnyRedis, cluster_names: Names
) -> None:
    """lr_xadd_all on each partition's command stream, lr_touch_if_mine and lr_ack_if_mine on
    its tick stream: each call's one key routes it to the primary owning the partition."""
    n = cluster_names
    owners = {redis_cluster.node_port_of(n.ticks(p)) for p in range(n.partitions)}
    assert owners == set(redis_cluster.ports)
    for p in range(n.partitions):
        added = await cluster_redis.fcall(Fn.XADD_ALL, 1, n.commands(p), 1000, "a", "b")  # type: ignore[misc]
        assert count(added) == 2
        await cluster_redis.xgroup_create(n.ticks(p), "g", id="0", mkstream=True)
        entry = await cluster_redis.xadd(n.ticks(p), {"m": "tick"})
        await cluster_redis.xreadgroup("g", "mine", {n.ticks(p): ">"})
        args = ("g", entry, "mine")
        assert flag(await cluster_redis.fcall(Fn.TOUCH_IF_MINE, 1, n.ticks(p), *args))  # type: ignore[misc]
        assert flag(await cluster_redis.fcall(Fn.ACK_IF_MINE, 1, n.ticks(p), *args))  # type: ignore[misc]
        assert (await cluster_redis.xpending(n.ticks(p), "g"))["pending"] == 0


async def test_the_setting_selects_the_cluster_client_and_broker(redis_cluster: Cluster) -> None:
    plain = CommonSettings(redis_url=redis_cluster.url)
    assert not plain.redis_cluster
    single = make_broker(plain)
    assert isinstance(single, RedisBroker)
    assert not isinstance(single, RedisClusterBroker)
    on_cluster = CommonSettings(redis_url=redis_cluster.url, redis_cluster=True)
    broker = make_broker(on_cluster)
    assert isinstance(broker, RedisClusterBroker)
    await connect_broker(broker)
    try:
        # The broker's own client connects like longrun's, on every node.
        own: Any = await broker.connect()
        assert await own.ping()
        assert {int(n.port) for n in own.get_nodes()} == set(redis_cluster.ports)
        assert all(n.connection_class is HiredisPackingConnection for n in own.get_nodes())
    finally:
        await broker.stop()
    client = redis_client(on_cluster)
    assert isinstance(client, RedisCluster)
    try:
        # Every node's connections pack with hiredis, as the single-server client's do.
        assert await client.ping()
        await client.set("{p000}:packing-probe", 1.5, ex=5)
        assert await client.get("{p000}:packing-probe") == b"1.5"
        nodes = client.get_nodes()
        assert {int(n.port) for n in nodes} == set(redis_cluster.ports)
        assert all(n.connection_class is HiredisPackingConnection for n in nodes)
    finally:
        await client.aclose()


def test_the_cluster_setting_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LONGRUN_REDIS_CLUSTER", "true")
    assert CommonSettings().redis_cluster


class _ClosedHandle:
    """A writer whose handle is closed, as uvloop's is after another task closed it."""

    def writelines(self, data: object) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


async def test_a_connection_closed_under_a_command_fails_as_a_connection_error(
    redis_cluster: Cluster,
) -> None:
    """What a node restart does to a command in flight on the cluster client: a ConnectionError
    (retried, and taken for Redis being away), never an AttributeError or RuntimeError."""
    # The cluster client's connections have a socket timeout, which sends through the override.
    conn = HiredisPackingConnection(host="127.0.0.1", port=redis_cluster.ports[0], socket_timeout=5)
    await conn.connect()
    try:
        writer = conn._writer
        assert writer is not None
        conn._writer = _ClosedHandle()  # type: ignore[assignment]
        with pytest.raises(ConnectionError):
            await conn.send_packed_command(conn.pack_command("PING"), check_health=False)
        writer.close()
        await writer.wait_closed()
        conn._writer = None
        with pytest.raises(ConnectionResetError):
            await conn._send_packed_command(conn.pack_command("PING"))
        await conn.connect()
        await conn.send_packed_command(conn.pack_command("PING"), check_health=False)
        assert await conn.read_response() == b"PONG"
    finally:
        await conn.disconnect()
