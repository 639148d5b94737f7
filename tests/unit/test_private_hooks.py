"""The few redis-py internals longrun's Redis clients rely on, pinned: an upgrade of redis-py
that renames or removes one fails here, naming it, before a service meets it at run time.

`BoundedPool` (every service's client) replaces how redis-py's pool checks connections out and
in, which saves about a quarter of the client's CPU per call (docs/benchmarks.md); it reads and
writes the pool's own bookkeeping. `HiredisPackingConnection` overrides the connection's packing
and its write of a packed command. faststream itself is used only through its public surface
(the broker's parameters and `connect()`, `StreamSub`, the subscriber's parser and decoder), and
no product module imports a library's private module (a `_name` in the import path).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
from collections.abc import MutableSet
from pathlib import Path

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection

from shared.store.client import BoundedPool, HiredisPackingConnection, connect

ROOT = Path(__file__).resolve().parents[2]


def private_imports(source: str) -> list[str]:
    """Modules imported from outside longrun whose path has a private (`_name`) part."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        own = ("services", "shared", "__future__")
        found += [n for n in names if n.split(".")[0] not in own and "._" in f".{n}"]
    return found


def test_the_pool_bookkeeping_bounded_pool_takes_over_is_still_redis_pys() -> None:
    pool = BoundedPool(max_connections=2, timeout=1, connection_class=HiredisPackingConnection)
    assert isinstance(pool._available_connections, list)
    assert isinstance(pool._in_use_connections, MutableSet)
    assert isinstance(pool._lock, asyncio.Lock)
    assert isinstance(pool._in_maintenance, bool)
    made = pool.make_connection()  # type: ignore[no-untyped-call]
    assert isinstance(made, HiredisPackingConnection)
    pool._in_use_connections.add(made)
    pool.reset()  # the base class's reset empties what the pool checks in and out
    assert pool._available_connections == []
    assert isinstance(pool._in_use_connections, MutableSet)
    assert len(pool._in_use_connections) == 0


def test_bounded_pool_overrides_the_methods_the_client_calls() -> None:
    base = BlockingConnectionPool
    for name in ("get_connection", "release", "reset"):
        assert getattr(BoundedPool, name) is not getattr(base, name), name
        mine = list(inspect.signature(getattr(BoundedPool, name)).parameters)
        theirs = list(inspect.signature(getattr(base, name)).parameters)
        assert mine == theirs, (name, theirs)
    # The client checks a connection out and back in through exactly these two.
    source = inspect.getsource(Redis.execute_command)
    assert "get_connection(" in source
    assert "release(" in source


def test_a_checked_out_connection_offers_what_bounded_pool_asks_of_it() -> None:
    for name in ("connect", "disconnect", "can_read", "should_reconnect"):
        assert callable(getattr(AbstractConnection, name, None)), name


def test_every_client_longrun_builds_uses_bounded_pool_and_packing_connections() -> None:
    client = connect("redis://127.0.0.1:1/0", max_connections=3)
    assert isinstance(client, Redis)
    pool = client.connection_pool
    assert isinstance(pool, BoundedPool)
    assert (pool.max_connections, pool.connection_class) == (3, HiredisPackingConnection)


def test_the_packed_command_is_written_through_the_method_the_connection_overrides() -> None:
    source = inspect.getsource(AbstractConnection.send_packed_command)
    assert "self._send_packed_command(" in source
    assert "_send_packed_command" in vars(HiredisPackingConnection)
    assert Connection()._writer is None  # not connected: the override raises a ConnectionError


def test_a_cluster_clients_nodes_connect_with_packing_connections() -> None:
    client = connect("redis://127.0.0.1:1/0", cluster=True)
    assert isinstance(client, RedisCluster)
    kwargs = client.nodes_manager.connection_kwargs
    assert kwargs["connection_class"] is HiredisPackingConnection  # nodes discovered later
    nodes = [*client.startup_nodes, *client.nodes_manager.startup_nodes.values()]
    assert nodes
    assert all(node.connection_class is HiredisPackingConnection for node in nodes)


def test_product_code_imports_no_private_module_of_a_library() -> None:
    assert private_imports("from mcp.client._transport import T\nimport a._b\n") == [
        "mcp.client._transport",
        "a._b",
    ]
    offenders = {
        str(path.relative_to(ROOT)): found
        for folder in ("services", "shared")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (found := private_imports(path.read_text()))
    }
    assert offenders == {}
