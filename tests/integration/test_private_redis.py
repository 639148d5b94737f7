"""The private redis-server `longrun up` and `longrun demo` start: they use it only once that
server itself answers, never another process's server found on its port, and never on the port
already chosen for the ingress."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis as sync_redis

from services.cli import redis_server
from services.cli.processes import Child, free_port
from services.cli.redis_server import server_pid, wait_for_redis
from services.cli.up import Stack, UpOptions

pytestmark = pytest.mark.integration


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port bound and listening in this process: a redis-server started on it cannot bind."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def test_a_redis_of_another_process_on_the_port_is_not_the_private_one(redis_url: str) -> None:
    """The port lost to another Redis between the probe and the bind: that one answers PING,
    and a run on it would share its data and die with it ("Connection closed by server")."""
    port = urlparse(redis_url).port or 6379
    assert server_pid(port) is not None, "the tests' Redis reports its process id"
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    child = Child("redis", sleeper, {}, port)
    child.start()
    try:
        assert not wait_for_redis(child, within=1.0)
    finally:
        child.kill()


def test_the_private_redis_skips_the_ingress_port_and_a_port_lost_to_a_bind_race(
    held_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    http_port, fresh = free_port(), free_port()
    # The probes answer, in turn: a port someone else binds first, the ingress's, a free one.
    ports = iter([held_port, http_port, fresh])
    monkeypatch.setattr(redis_server, "free_port", lambda: next(ports))
    stack = Stack(UpOptions(http_port=http_port, use_env_redis=False), environ={})
    try:
        url = stack._start_redis()
        assert url == f"redis://127.0.0.1:{fresh}/0"
        assert stack.redis is not None
        assert stack.redis.proc is not None
        assert server_pid(fresh) == stack.redis.proc.pid
        with sync_redis.Redis.from_url(url) as client:
            assert client.ping()
    finally:
        stack.stop()
