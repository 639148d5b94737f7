"""Celery and Taskiq as systems of the peers benchmark: each worker started as its own process
tree on the bench's Redis, events enqueued with the framework's own client, follow-ups read from
the queue the handler publishes to."""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from shared.store.client import AnyRedis
from tests.bench.peers import celery_app, taskiq_app
from tests.bench.peers.measure import Sent, Worker
from tests.bench.peers.shape import RECORD_TASK, Shape


@dataclass
class Celery:
    """One `celery worker --pool solo` process: the handler runs in the process that reads the
    queue, like each longrun service (prefork would add a parent process and a pipe hop per
    task, and on two cores a second child would only compete with Redis and the bench)."""

    redis_url: str
    tmp: Path
    redis: AnyRedis
    prefetch: int
    name: str = "celery"
    processes: str = "1 worker, solo pool"
    notes: list[str] = field(default_factory=list)
    shape: Shape = field(init=False)
    worker: Worker = field(init=False)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))

    def __post_init__(self) -> None:
        self.shape = Shape(self.redis_url, "celery" + secrets.token_hex(3))
        self.app = celery_app.build(self.shape, self.prefetch)
        env = {
            **os.environ,
            **self.shape.env(),
            celery_app.PREFETCH_ENV: str(self.prefetch),
        }
        argv = [sys.executable, "-m", "celery", "-A", "tests.bench.peers.celery_app", "worker"]
        argv += ["--pool", "solo", "--loglevel", "WARNING", "-Q", self.shape.events]
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        self.worker = Worker(argv, env, self.tmp / f"{self.shape.prefix}.log")

    async def setup(self, agents: list[str]) -> None:
        return None

    async def start(self) -> None:
        self.worker.start()

    async def stop_intake(self) -> None:
        self.worker.stop()

    async def start_intake(self) -> None:
        self.worker.start()

    async def stop(self) -> None:
        self.worker.stop()
        await asyncio.get_running_loop().run_in_executor(self.executor, self.app.close)
        self.executor.shutdown()

    async def send(self, events: Sent) -> None:
        """Celery's client is synchronous: it runs on one thread of its own, so the reader's
        loop keeps running while it sends."""

        def enqueue() -> None:
            for event_id, agent in events:
                self.app.send_task(RECORD_TASK, args=(event_id, agent), queue=self.shape.events)

        await asyncio.get_running_loop().run_in_executor(self.executor, enqueue)

    async def followups(self) -> list[tuple[str, str | None]]:
        first = await self.redis.brpop([self.shape.followups], timeout=0.1)
        if first is None:
            return []
        more = await self.redis.rpop(self.shape.followups, 1000) or []
        out: list[tuple[str, str | None]] = []
        for raw in [first[1], *more]:
            message = orjson.loads(raw)
            args = orjson.loads(base64.b64decode(message["body"]))[0]
            out.append((args[1], args[0]))
        return out

    def pids(self) -> dict[str, int]:
        return {"worker": self.worker.proc.pid} if self.worker.proc else {}

    async def verify(self, sent: Sent) -> None:
        await verify_peer(self.redis, self.shape, sent)


@dataclass
class Taskiq:
    """`taskiq worker --workers 1`: one worker process (under taskiq's supervising parent,
    whose CPU is counted too), default 100 concurrent async tasks."""

    redis_url: str
    tmp: Path
    redis: AnyRedis
    name: str = "taskiq"
    processes: str = "1 worker (RedisStreamBroker), + taskiq's idle supervisor"
    notes: list[str] = field(default_factory=list)
    shape: Shape = field(init=False)
    worker: Worker = field(init=False)
    last: str = "0-0"

    def __post_init__(self) -> None:
        self.shape = Shape(self.redis_url, "taskiq" + secrets.token_hex(3))
        self.broker = taskiq_app.build(self.shape)
        env = {**os.environ, **self.shape.env()}
        argv = [sys.executable, "-m", "taskiq", "worker", "tests.bench.peers.taskiq_app:broker"]
        argv += ["--workers", "1", "--log-level", "WARNING"]
        self.worker = Worker(argv, env, self.tmp / f"{self.shape.prefix}.log")

    async def setup(self, agents: list[str]) -> None:
        await self.broker.startup()

    async def start(self) -> None:
        self.worker.start()

    async def stop_intake(self) -> None:
        self.worker.stop()

    async def start_intake(self) -> None:
        self.worker.start()

    async def stop(self) -> None:
        self.worker.stop()
        await self.broker.shutdown()

    async def send(self, events: Sent) -> None:
        task = self.broker.find_task(RECORD_TASK)
        assert task is not None
        for start in range(0, len(events), 200):
            chunk = events[start : start + 200]
            await asyncio.gather(*(task.kiq(event_id, agent) for event_id, agent in chunk))

    async def followups(self) -> list[tuple[str, str | None]]:
        got = await self.redis.xread({self.shape.followups: self.last}, count=1000, block=100)
        out: list[tuple[str, str | None]] = []
        for _, entries in got or []:
            self.last = entries[-1][0].decode()
            for _, fields in entries:
                args = orjson.loads(fields[b"data"])["args"]
                out.append((args[1], args[0]))
        return out

    def pids(self) -> dict[str, int]:
        return {"worker": self.worker.proc.pid} if self.worker.proc else {}

    async def verify(self, sent: Sent) -> None:
        await verify_peer(self.redis, self.shape, sent)


async def verify_peer(redis: AnyRedis, shape: Shape, sent: Sent) -> None:
    """Each event id once in its agent's list, and the agent's count agrees."""
    expected: dict[str, list[str]] = {}
    for event_id, agent in sent:
        expected.setdefault(agent, []).append(event_id)
    agents = list(expected)
    pipe = redis.pipeline(transaction=False)
    for agent in agents:
        pipe.lrange(shape.history(agent), 0, -1)
        pipe.hget(shape.agent(agent), "events")
    found = await pipe.execute()
    for n, agent in enumerate(agents):
        recorded = [e.decode() for e in found[2 * n]]
        # A solo/async worker may run an agent's events out of enqueue order; each once.
        assert sorted(recorded) == sorted(expected[agent]), agent
        assert int(found[2 * n + 1]) == len(expected[agent]), agent
