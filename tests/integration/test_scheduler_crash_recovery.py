"""Fired timers a crash can leave behind are all taken up by the scheduler: on a Redis with an
append-only file killed with SIGKILL and restarted under a running scheduler process, an entry
whose acknowledgement was lost (pending to a consumer that is gone, restored from the file), one
pending after its stream entry was deleted, one fired twice, one written but never delivered.
Nothing stays neither acknowledged nor dead-lettered, and each wait's timer fires once."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import RedisError

from services.scheduler.policy import TimerRef, fire_command_id
from shared.runtime import new_id
from shared.store.client import AnyRedis, connect
from shared.store.functions import load_functions
from shared.wire.codec import decode
from shared.wire.names import Group, Names
from tests.chaos.invariants import backlog
from tests.integration.conftest import free_port
from tests.integration.scheduler_driver import SCHEDULER, SCHEDULER_PORT, wait_until
from tests.integration.test_scheduler_process import FAST


@dataclass
class AofRedis:
    """A redis-server whose every write is in its append-only file before it answers."""

    port: int
    home: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [shutil.which("redis-server") or "redis-server", "--port", str(self.port)]
        argv += ["--bind", "127.0.0.1", "--dir", str(self.home), "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", "always"]
        argv += ["--logfile", str(self.home / "redis.log")]
        self.proc = subprocess.Popen(argv)  # noqa: S603 - redis-server with fixed arguments

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[AofRedis]:
    server = AofRedis(free_port(), tmp_path / "redis")
    server.home.mkdir()
    server.start()
    yield server
    server.kill9()


@pytest.fixture
async def client(aof_redis: AofRedis) -> AsyncIterator[AnyRedis]:
    redis = connect(aof_redis.url)
    await wait_until(lambda: _pings(redis), 20, "the AOF redis-server to answer")
    await load_functions(redis)
    yield redis
    await redis.aclose()


async def _pings(redis: AnyRedis) -> bool:
    try:
        return bool(await redis.ping())
    except (RedisError, OSError):  # not up yet: refused, or loading its file
        return False


WAITS = {name: new_id("wait_") for name in ("lost-ack", "deleted", "twice", "undelivered")}


def fired(name: str) -> dict[str, bytes]:
    return {"m": TimerRef(f"agent-{name}", wait_id=WAITS[name]).member()}


async def deliver_to_gone(
    redis: AnyRedis, stream: str, names: list[str], *, delete_first: bool = False
) -> None:
    """XADD and XREADGROUP by a consumer that is gone, in one transaction: the running
    scheduler's blocked read is served only after it, so the entries are the gone one's."""
    pipe = redis.pipeline(transaction=True)
    for name in names:
        pipe.xadd(stream, fired(name))
    pipe.xreadgroup(Group.SCHEDULER, new_id("scheduler-gone-"), {stream: ">"}, count=len(names))
    ids = (await pipe.execute())[: len(names)]
    if delete_first:
        await redis.xdel(stream, ids[0])


async def fire_commands(redis: AnyRedis, names: Names) -> list[str]:
    found = []
    for p in range(names.partitions):
        for _, fields in await redis.xrange(names.commands(p)):
            body: Any = decode(fields[b"m"]).body
            found.append(body.command_id)
    return found


async def test_fired_timers_a_redis_crash_leaves_pending_are_all_taken_up(
    spawn: Any, aof_redis: AofRedis, client: AnyRedis, names: Names
) -> None:
    stream = names.timers_fired(0)
    scheduler = spawn(SCHEDULER, SCHEDULER_PORT, **FAST, REDIS_URL=aof_redis.url)
    await scheduler.wait_ready()
    # Delivered to a consumer whose XACK never reached the file: pending after the restart.
    await deliver_to_gone(client, stream, ["lost-ack"])
    aof_redis.kill9()
    aof_redis.start()
    await wait_until(lambda: _pings(client), 20, "the restarted redis-server to answer")
    pending = await client.xpending(stream, Group.SCHEDULER)
    assert pending["pending"] >= 1, "the lost acknowledgement's entry came back pending"
    # Pending after its entry was deleted (as trimming would), fired twice, never delivered.
    await deliver_to_gone(client, stream, ["deleted", "twice", "twice"], delete_first=True)
    await client.xadd(stream, fired("undelivered"))

    async def taken_up() -> bool:
        return await backlog(client, names) == {}

    await wait_until(taken_up, 60, "every fired timer acknowledged after the restart")
    commands = await fire_commands(client, names)
    expected = [fire_command_id(WAITS[w]) for w in ("lost-ack", "twice", "twice", "undelivered")]
    assert sorted(commands) == sorted(expected)
