"""Helpers for scheduler tests: command builders, a pipelined producer, readers of ticks and
history, and a fake turn-executor that takes ticks with a lease and fencing token, as the real
one does, without a model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.wire import commands as c
from shared.wire.codec import Envelope, decode, encode
from shared.wire.names import Group, Names
from shared.wire.replies import CommandOutcome, CommandReply
from shared.wire.ticks import Tick
from tests.integration.ledger_driver import plan_artifact, token_hash

SCHEDULER = "services.scheduler"
SCHEDULER_PORT = "LONGRUN_SCHEDULER_PORT"
LEDGER = "services.ledger"
LEDGER_PORT = "LONGRUN_LEDGER_PORT"


# ---------------------------------------------------------------- commands


def ensure(agent_id: str, loop: str = "builtin") -> c.EnsureAgent:
    return c.EnsureAgent(
        command_id=f"ensure-{agent_id}",
        agent_id=agent_id,
        loop=loop,
        agent_token_hash=token_hash(f"a-{agent_id}"),
        callback_token_hash=token_hash(f"cb-{agent_id}"),
    )


def create(agent_id: str, work_item_id: str, objective: str = "objective") -> c.CreateWorkItem:
    return c.CreateWorkItem.model_validate(
        {
            "command_id": f"create-{work_item_id}",
            "agent_id": agent_id,
            "args": {"objective": objective},
            "work_item_id": work_item_id,
            "plan_artifact": plan_artifact(work_item_id),
        }
    )


def wait_for(agent_id: str, work_item_id: str | None, **args: Any) -> c.WaitFor:
    cap = args.pop("capability_token_hash", None)
    return c.WaitFor.model_validate(
        {
            "command_id": new_id("wait-"),
            "agent_id": agent_id,
            "args": {"reason": "waiting", "work_item_id": work_item_id, **args},
            "capability_token_hash": cap,
        }
    )


def pick(agent_id: str, work_item_id: str) -> c.PickWorkItem:
    return c.PickWorkItem.model_validate(
        {
            "command_id": new_id("pick-"),
            "agent_id": agent_id,
            "args": {"work_item_id": work_item_id},
        }
    )


def message(agent_id: str, n: int, text: str = "hello") -> c.AppendOperatorMessage:
    return c.AppendOperatorMessage(
        command_id=f"msg-{agent_id}-{n}",
        agent_id=agent_id,
        message_id=f"m-{agent_id}-{n}",
        text=f"{text} {n}",
    )


def callback(agent_id: str, cap: str, n: int) -> c.RecordCallback:
    return c.RecordCallback(
        command_id=f"cb-{agent_id}-{n}",
        agent_id=agent_id,
        token_hash=token_hash(cap),
        delivery_id=f"d-{n}",
        content_type="text/plain",
        body=f"result {n}",
        source=c.CallbackSource.STREAM,
    )


async def push(redis: AnyRedis, names: Names, commands: Sequence[c.Command]) -> None:
    """XADD commands to their partitions, pipelined, as any producer would."""
    for start in range(0, len(commands), 1000):
        pipe = redis.pipeline(transaction=False)
        for cmd in commands[start : start + 1000]:
            body = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=cmd))
            pipe.xadd(names.commands(names.partition(cmd.agent_id)), {"m": body})
        await pipe.execute()


class Replies:
    """Sends commands and polls a reply stream for the ledger's answer. Polling, not a blocking
    read: a blocked read cancelled at teardown leaks its connection (ResourceWarning)."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        self.redis = redis
        self.names = names
        self.stream = names.replies(new_id("test-"))
        self.last = "0-0"
        self.answers: dict[str, CommandReply] = {}

    async def send(self, command: c.Command, within: float = 30.0) -> CommandReply:
        await push(self.redis, self.names, [command.model_copy(update={"reply_to": self.stream})])
        deadline = time.monotonic() + within
        while command.command_id not in self.answers:
            assert time.monotonic() < deadline, f"no reply to {command.command_id}"
            for entry_id, fields in await self.redis.xrange(self.stream, f"({self.last}"):
                self.last = entry_id.decode()
                reply = decode(fields[b"m"]).body
                assert isinstance(reply, CommandReply)
                self.answers[reply.command_id] = reply
            await asyncio.sleep(0.005)
        return self.answers[command.command_id]


# ---------------------------------------------------------------- reading


WATCHED: list[Callable[[], str]] = []
"""Diagnostics a timed-out wait prints: process log tails, fake executor failures."""


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], within: float, what: str, every: float = 0.1
) -> float:
    """Poll until true; returns the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        if await predicate():
            return time.monotonic() - started
        await asyncio.sleep(every)
    notes = "\n".join(note() for note in WATCHED)
    raise AssertionError(f"timed out after {within}s waiting for {what}\n{notes}")


async def ticks(redis: AnyRedis, names: Names) -> list[Tick]:
    out: list[Tick] = []
    for p in range(names.partitions):
        for _, fields in await redis.xrange(names.ticks(p)):
            body = decode(fields[b"m"]).body
            assert isinstance(body, Tick)
            out.append(body)
    return out


async def history(redis: AnyRedis, names: Names, agent_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(d) for d in await redis.lrange(names.history(agent_id), 0, -1)]


async def event_types(redis: AnyRedis, names: Names, agent_id: str) -> list[str]:
    return [e["type"] for e in await history(redis, names, agent_id)]


async def caught_up(redis: AnyRedis, names: Names) -> bool:
    """Every event and fired-timer entry was read and acknowledged by group `scheduler`."""
    for p in range(names.partitions):
        for stream in (names.events(p), names.timers_fired(p)):
            if not await redis.exists(stream):
                continue
            groups = await redis.xinfo_groups(stream)
            group = next((g for g in groups if g["name"] == Group.SCHEDULER.encode()), None)
            if group is None or group["pending"] or group.get("lag"):
                return False
    return True


# ---------------------------------------------------------------- a fake turn-executor


class FakeExecutor:
    """Takes ticks as the turn-executor does (lease, BeginTurn with the fencing token, FinishTurn,
    release the lease and the marker, ack), with `think` seconds in place of a model."""

    def __init__(self, redis: AnyRedis, names: Names, client: Replies, think: float = 0.0) -> None:
        self.redis = redis
        self.names = names
        self.client = client
        self.think = think
        self.taken: list[Tick] = []
        self.turns: list[Tick] = []
        self.running = asyncio.Event()
        self.running.set()
        self._stopping = False
        self._parked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def diagnose(self) -> str:
        task = self._task
        if task is None or not task.done() or task.cancelled() or task.exception() is None:
            return f"fake executor: {len(self.turns)} turns, running"
        return f"fake executor died: {task.exception()!r}"

    async def start(self) -> None:
        WATCHED.append(self.diagnose)
        for p in range(self.names.partitions):
            stream = self.names.ticks(p)
            try:
                await self.redis.xgroup_create(stream, Group.EXECUTOR, id="0", mkstream=True)
            except Exception as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._task = asyncio.create_task(self._run())

    async def pause(self) -> None:
        """Take no more ticks (they stay in the stream); returns once no read is in flight."""
        self._parked.clear()
        self.running.clear()
        await self._parked.wait()

    async def stop(self) -> None:
        """Ends after the read in flight: cancelling a blocked read would leak its connection."""
        self._stopping = True
        self.running.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        streams = {self.names.ticks(p): ">" for p in range(self.names.partitions)}
        while not self._stopping:
            if not self.running.is_set():
                self._parked.set()
                await self.running.wait()
            got = await self.redis.xreadgroup(Group.EXECUTOR, "fake", streams, count=10, block=200)
            for stream, entries in got or []:
                for entry_id, fields in entries:
                    tick = decode(fields[b"m"]).body
                    assert isinstance(tick, Tick)
                    self.taken.append(tick)
                    await self.take(tick)
                    await self.redis.xack(stream, Group.EXECUTOR, entry_id)

    async def take(self, tick: Tick) -> None:
        n, agent = self.names, tick.agent_id
        turn_id = new_id("turn_")
        owner = f"fake:{turn_id}"
        token = await self.redis.fcall(
            "lr_lease_acquire", 2, n.lease(agent), n.fence(agent), owner, 30_000
        )
        if token is None:
            await self.redis.fcall("lr_tick_release", 1, n.outstanding_tick(agent), tick.tick_id)
            return
        waits = [orjson.loads(d) for d in await self.redis.hvals(n.waits(agent))]
        reviewed = {w["id"]: w["trigger_count"] for w in waits if w["trigger_count"]}
        begin = c.BeginTurn(
            command_id=f"begin-{turn_id}",
            agent_id=agent,
            turn_id=turn_id,
            fencing_token=int(token),
            tick_id=tick.tick_id,
            tick_kind=tick.kind,
            reviewed_triggers=reviewed,
        )
        assert (await self.client.send(begin)).outcome is CommandOutcome.APPLIED
        self.turns.append(tick)
        inbox = await self.redis.llen(n.inbox(agent))
        await asyncio.sleep(self.think)
        finish = c.FinishTurn(
            command_id=f"finish-{turn_id}",
            agent_id=agent,
            turn_id=turn_id,
            fencing_token=int(token),
            outcome=c.TurnOutcome.YIELDED,
            inbox_consumed=inbox,
        )
        assert (await self.client.send(finish)).outcome is CommandOutcome.APPLIED
        await self.redis.fcall("lr_lease_release", 1, n.lease(agent), owner)
        await self.redis.fcall("lr_tick_release", 1, n.outstanding_tick(agent), tick.tick_id)
