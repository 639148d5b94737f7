"""Integration fixtures: a real Redis, a fresh key prefix per test, ledger services in-process
and as real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis
from redis.typing import KeyT, StreamIdT

from services.ledger.handlers import decode_command
from services.ledger.service import LedgerService
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis, connect
from shared.store.functions import load_functions
from shared.store.readmodel import ReadModel
from shared.wire.commands import Command
from shared.wire.names import Names
from tests.integration.ledger_driver import new_ledger

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix no other test uses; every key under it is deleted afterwards."""
    value = "t" + secrets.token_hex(4)
    yield value
    drop_prefix(redis_url, value)


def drop_prefix(redis_url: str, prefix: str) -> None:
    """Delete every key under the prefix (in batches: one DEL of a huge list blocks Redis)."""
    client = sync_redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


@pytest.fixture
def names(prefix: str) -> Names:
    return Names(prefix=prefix, partitions=4)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[AnyRedis]:
    client = connect(redis_url)
    await load_functions(client)
    yield client
    await client.aclose()


@pytest.fixture
def ledger(redis: AnyRedis, names: Names) -> LedgerService:
    return new_ledger(redis, names)


@pytest.fixture
def reads(redis: AnyRedis, names: Names) -> ReadModel:
    return ReadModel(redis, names)


@pytest.fixture
async def client(redis: AnyRedis, names: Names) -> AsyncIterator[LedgerClient]:
    c = LedgerClient(redis, names, clock=utc_now, new_id=new_id, timeout=10.0)
    await c.start()
    yield c
    await c.stop()


Found = list[tuple[Any, list[Any]]]
"""What an XREAD answers: (stream, [(entry id, fields), ...]) per stream with entries."""


@dataclass
class Pump:
    """The ledger in process (the `pump` fixture); `running` cleared holds commands back."""

    running: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def pumping(
    ledger: LedgerService, read: Callable[[dict[str, str]], Awaitable[Found]]
) -> AsyncIterator[Pump]:
    """Apply every command `read` finds past each stream's cursor, in stream order."""
    last: dict[str, str] = {}
    stop = asyncio.Event()
    control = Pump()
    control.running.set()

    async def apply_until_stopped() -> None:
        while not stop.is_set():
            await control.running.wait()
            found = await read(last)
            await control.running.wait()  # held while the read was out: apply nothing yet
            for stream, entries in found:
                last[stream.decode()] = entries[-1][0].decode()
                commands = [
                    decode_command({k.decode(): v for k, v in f.items()}) for _, f in entries
                ]
                await ledger.apply_batch(commands)

    task = asyncio.create_task(apply_until_stopped())
    yield control
    # Stopped by a flag, not cancelled: Python 3.11 can swallow a cancel mid-Redis-call.
    stop.set()
    control.running.set()
    await asyncio.wait({task}, timeout=10)


@pytest.fixture
async def pump(redis: AnyRedis, names: Names, ledger: LedgerService) -> AsyncIterator[Pump]:
    """The ledger in process: applies every command sent under this prefix, in stream order."""
    streams: dict[KeyT, StreamIdT] = {names.commands(p): "0-0" for p in range(names.partitions)}

    async def read(last: dict[str, str]) -> Found:
        streams.update(last)
        found: Any = await redis.xread(streams, count=100, block=50)  # RESP2: [(stream, entries)]
        return found or []

    async with pumping(ledger, read) as control:
        yield control


def watch_writes(client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """From now on, the command types of each write the client queues (one round trip each)."""
    writes: list[list[str]] = []
    enqueue = client._enqueue

    def counted(commands: Sequence[Command]) -> asyncio.Future[None]:
        writes.append([type(command).__name__ for command in commands])
        return enqueue(commands)

    monkeypatch.setattr(client, "_enqueue", counted)
    return writes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServiceProcess:
    """One service running as a real OS process (python -m services.<name>)."""

    module: str
    env: dict[str, str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = field(default=0)

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", self.module],
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=20)

    async def wait_ready(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            assert self.proc is not None
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
                status = (await reader.readline()).decode()
                writer.close()
                if " 200 " in status:
                    return
            except OSError:
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.module} not ready: {self.log_path.read_text()[-2000:]}")


def service_process(module: str, env: dict[str, str], port_env: str, log: Path) -> ServiceProcess:
    """A service process, not started yet, on a free port its `port_env` setting names."""
    port = free_port()
    return ServiceProcess(module, {**env, port_env: str(port)}, port, log)


def started(proc: ServiceProcess) -> ServiceProcess:
    """The process started, once it answers /readyz (for synchronous fixtures)."""
    proc.start()
    asyncio.run(proc.wait_ready())
    return proc


@pytest.fixture
def service_env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS="4",
        LONGRUN_AGENT_HOME=str(tmp_path / "home"),
        LONGRUN_RECLAIM_IDLE_MS="1500",
        LONGRUN_LOG_LEVEL="WARNING",
    )
    return env


@pytest.fixture
def spawn(service_env: dict[str, str], tmp_path: Path) -> Iterator[object]:
    """spawn(module, port_env) starts a service process; all are stopped at the end."""
    spawned: list[ServiceProcess] = []

    def _spawn(module: str, port_env: str, **extra: str) -> ServiceProcess:
        env = {**service_env, **extra}
        proc = service_process(module, env, port_env, tmp_path / f"{module}-{len(spawned)}.log")
        proc.start()
        spawned.append(proc)
        return proc

    yield _spawn
    for proc in spawned:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait(timeout=10)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
