"""A 3-primary Redis Cluster on loopback ports, started by the tests themselves.

Three `redis-server --cluster-enabled yes` processes in a temporary directory, joined with
`redis-cli --cluster create ... --cluster-replicas 0`, shared by every test of the session (each
test writes under its own key prefix) and torn down at the end. Every test here is marked
`cluster`.
"""

from __future__ import annotations

import random
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis as sync_redis
from redis.cluster import RedisCluster as SyncCluster

from shared.store.client import AnyRedis, connect
from shared.store.functions import load_functions
from shared.wire.names import Names
from tests.integration.conftest import client, ledger, reads

__all__ = ["client", "ledger", "reads"]  # the integration tier's, on this tier's redis and names
PRIMARIES = 3
BUS_OFFSET = 10_000
"""Redis Cluster nodes talk to each other on their port + 10000."""


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(count: int) -> list[int]:
    """Random ports whose cluster-bus ports are free too (the bus must stay below 65536)."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randint(20_000, 50_000)
        if port not in chosen and _free(port) and _free(port + BUS_OFFSET):
            chosen.append(port)
    return chosen


@dataclass
class Cluster:
    """The running cluster: its node ports, the seed URL services get, and its processes."""

    ports: list[int]
    workdir: Path
    procs: list[subprocess.Popen[bytes]]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def sync(self) -> SyncCluster:
        return SyncCluster(host="127.0.0.1", port=self.ports[0])

    def node_port_of(self, key: str) -> int:
        """The port of the primary that owns `key`'s slot."""
        client = self.sync()
        try:
            return int(client.get_node_from_key(key).port)
        finally:
            client.close()

    def node(self, port: int) -> sync_redis.Redis:
        return sync_redis.Redis(host="127.0.0.1", port=port)

    def kill9_and_restart(self, port: int) -> float:
        """SIGKILL the node on `port`, start it again on its directory (its nodes.conf keeps its
        identity and slots, its AOF its data); seconds until the cluster is ok again."""
        began = time.monotonic()
        index = self.ports.index(port)
        self.procs[index].kill()
        self.procs[index].wait(timeout=10)
        self.procs[index] = _start_node(port, self.workdir)
        _wait(lambda: _pings(port), f"redis-server on {port} after its restart")
        _wait(lambda: _cluster_ok(self.ports), "cluster_state:ok after a restart", within=60)
        return time.monotonic() - began

    def wait_ok(self) -> None:
        _wait(lambda: _cluster_ok(self.ports), "cluster_state:ok on every node", within=60)

    def log_tail(self) -> str:
        logs = sorted(self.workdir.glob("*/redis.log"))
        return "\n".join(f"{p}: {p.read_text()[-2000:]}" for p in logs)


def _start_node(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    home = workdir / str(port)
    home.mkdir(parents=True, exist_ok=True)
    argv = [
        shutil.which("redis-server") or "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(home),
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
        "--save",
        "",
        # A node killed with SIGKILL and restarted keeps every write it acknowledged.
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--maxmemory-policy",
        "noeviction",
        "--logfile",
        str(home / "redis.log"),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603


def _wait(predicate: object, what: str, within: float = 30.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except sync_redis.RedisError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _pings(port: int) -> bool:
    client = sync_redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    try:
        return bool(client.ping())
    finally:
        client.close()


def cluster_info(node: sync_redis.Redis) -> dict[str, str]:
    """CLUSTER INFO as text fields (redis-py parses it, with types that vary by version)."""
    parsed = node.execute_command("CLUSTER INFO")
    return {str(k): v.decode() if isinstance(v, bytes) else str(v) for k, v in parsed.items()}


def _cluster_ok(ports: list[int]) -> bool:
    for port in ports:
        client = sync_redis.Redis(host="127.0.0.1", port=port)
        try:
            info = cluster_info(client)
        finally:
            client.close()
        if info["cluster_state"] != "ok" or info["cluster_known_nodes"] != str(len(ports)):
            return False
    return True


def start_cluster(workdir: Path, primaries: int = PRIMARIES) -> Cluster:
    missing = [b for b in ("redis-server", "redis-cli") if shutil.which(b) is None]
    assert not missing, f"{missing} not on PATH: install redis-server (it brings redis-cli)"
    ports = free_cluster_ports(primaries)
    procs = [_start_node(port, workdir) for port in ports]
    cluster = Cluster(ports=ports, workdir=workdir, procs=procs)
    try:
        for port in ports:
            _wait(lambda p=port: _pings(p), f"redis-server on {port}")
        subprocess.run(  # noqa: S603
            [
                shutil.which("redis-cli") or "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{port}" for port in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        _wait(lambda: _cluster_ok(ports), "cluster_state:ok on every node", within=60)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    for proc in cluster.procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in cluster.procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    stop_cluster(cluster)


@pytest.fixture
def cluster_prefix(redis_cluster: Cluster) -> Iterator[str]:
    """A key prefix no other test uses; every key under it is deleted from every node after."""
    value = "c" + secrets.token_hex(4)
    yield value
    for port in redis_cluster.ports:
        node = redis_cluster.node(port)
        for key in list(node.scan_iter(match=f"{value}:*", count=1000)):
            node.delete(key)
        node.close()


@pytest.fixture
def cluster_names(cluster_prefix: str) -> Names:
    """Sixteen partitions: enough that they spread over all three primaries."""
    return Names(prefix=cluster_prefix, partitions=16)


@pytest.fixture
async def cluster_redis(redis_cluster: Cluster) -> AsyncIterator[AnyRedis]:
    client = connect(redis_cluster.url, cluster=True)
    await load_functions(client)
    yield client
    await client.aclose()


# ---- the integration tier's fixture names, on the cluster, so its tests can run here unchanged
# (its `ledger`, `reads` and `client`, imported above, take these `redis` and `names`)


@pytest.fixture
def prefix(cluster_prefix: str) -> str:
    return cluster_prefix


@pytest.fixture
def names(prefix: str) -> Names:
    """Four partitions, as in the integration tier; their tags land on all three primaries."""
    return Names(prefix=prefix, partitions=4)


@pytest.fixture
async def redis(cluster_redis: AnyRedis) -> AnyRedis:
    return cluster_redis


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)
