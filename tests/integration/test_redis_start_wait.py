"""A service started while Redis is still loading its data set waits for it instead of exiting.

After a restart, Redis answers LOADING until it has replayed its AOF or RDB (seconds per GB).
A service restarted in that window (a crash loop, a node reboot) used to fail its start-up and
exit, and `longrun up` stops the whole stack when a child exits (docs/reliability.md).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis as sync_redis
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.integration.conftest import ServiceProcess, free_port

KEYS = 20_000
LOAD_DELAY_US = 500
"""Redis's `key-load-delay` (a testing setting): several seconds of LOADING."""


def _start(port: int, workdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    server = shutil.which("redis-server")
    assert server, "redis-server is not on PATH"
    args = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)]
    args += ["--save", "", "--appendonly", "no", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    return proc


def _answers(client: sync_redis.Redis) -> str:
    try:
        client.ping()
        return "ok"
    except BusyLoadingError:
        return "loading"
    except RedisConnectionError:
        return "down"


def _wait(predicate: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.fixture
def loading_redis(tmp_path: Path) -> Iterator[int]:
    """A private redis-server restarted onto a saved data set that takes seconds to load."""
    port = free_port()
    workdir = tmp_path / "redis"
    workdir.mkdir()
    proc = _start(port, workdir)
    client = sync_redis.Redis(port=port)
    try:
        _wait(lambda: _answers(client) == "ok")
        pipe = client.pipeline(transaction=False)
        for n in range(KEYS):
            pipe.set(f"filler:{n}", "x")
        pipe.execute()
        client.save()
        proc.terminate()
        proc.wait(timeout=10)
        proc = _start(
            port,
            workdir,
            "--key-load-delay",
            str(LOAD_DELAY_US),
            "--loading-process-events-interval-bytes",
            "1024",
        )
        _wait(lambda: _answers(client) == "loading")
        yield port
    finally:
        client.close()
        proc.kill()
        proc.wait(timeout=10)


async def test_a_ledger_started_while_redis_loads_waits_and_becomes_ready(
    loading_redis: int, spawn: Callable[..., ServiceProcess]
) -> None:
    url = f"redis://127.0.0.1:{loading_redis}"
    ledger = spawn(
        "services.ledger", "LONGRUN_LEDGER_PORT", REDIS_URL=url, LONGRUN_LOG_LEVEL="INFO"
    )
    client = sync_redis.Redis(port=loading_redis)
    try:
        await ledger.wait_ready(within=90)
        assert _answers(client) == "ok"
        # It met Redis loading, waited, and did not exit (one process start, still running).
        log = ledger.log_path.read_text()
        assert "waiting_for_redis" in log, log[-2000:]
        assert "loading" in log.lower()
        assert ledger.starts == 1
        assert ledger.proc is not None
        assert ledger.proc.poll() is None
    finally:
        client.close()
