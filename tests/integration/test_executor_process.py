"""Turn executors as real processes beside a ledger process, on a real Redis: fifty scripted
agents worked to the end across two executors while one is killed with SIGKILL mid-run; no two
turns of an agent ever overlap, every tick is served, and no WorkItem is left stuck.

Ticks come from `TickDriver`, a stand-in scheduler that follows docs/streams.md (one outstanding
tick per agent behind its marker, none while a turn runs), so these tests depend on no other
service than the ledger.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from redis.exceptions import RedisError

from shared.consumer import DELIVERY_CAP
from shared.domain import views
from shared.domain.records import WakeKind
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.streams import ensure_groups
from shared.wire import commands as c
from shared.wire.codec import Envelope, decode, encode
from shared.wire.names import Group, Names
from shared.wire.ticks import Tick
from tests.integration.test_executor_turns import owned_redis  # noqa: F401 (fixture `redis`)

LEDGER = ("services.ledger", "LONGRUN_LEDGER_PORT")
EXECUTOR = ("services.turn_executor", "LONGRUN_EXECUTOR_PORT")
MARKER_TTL_MS = 60_000
WAKING = {"operator_message_received", "turn_finished", "wait_triggered"}


def token_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def ensure(agent_id: str) -> c.EnsureAgent:
    return c.EnsureAgent(
        command_id=f"ensure-{agent_id}",
        agent_id=agent_id,
        agent_token_hash=token_hash(f"agent-{agent_id}"),
        callback_token_hash=token_hash(f"callback-{agent_id}"),
    )


def request(agent_id: str, text: str) -> c.AppendOperatorMessage:
    return c.AppendOperatorMessage(
        command_id=f"ask-{agent_id}", agent_id=agent_id, message_id=f"ask-{agent_id}", text=text
    )


def approve(agent_id: str) -> c.RecordCallback:
    """A delivery to the agent-scope callback URL: triggers the agent's single external wait."""
    return c.RecordCallback(
        command_id=f"approve-{agent_id}",
        agent_id=agent_id,
        token_hash=token_hash(f"callback-{agent_id}"),
        delivery_id=f"approve-{agent_id}",
        content_type="text/plain",
        body="approved",
        source=c.CallbackSource.STREAM,
    )


async def push(redis: AnyRedis, names: Names, commands: list[c.Command]) -> None:
    """XADD commands to their partitions, pipelined, as any producer would."""
    pipe = redis.pipeline(transaction=False)
    for cmd in commands:
        body = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=cmd))
        pipe.xadd(names.commands(names.partition(cmd.agent_id)), {"m": body})
    await pipe.execute()


@dataclass
class TickDriver:
    """A stand-in scheduler: whenever an agent's turn finishes (or a wait of it is triggered),
    it publishes the tick the agent's state calls for, once no turn runs, no lease is held and
    no tick is outstanding; it answers each external wait with one callback."""

    redis: AnyRedis
    names: Names
    reads: ReadModel
    agents: list[str]
    published: list[str] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def held(self, agent: str) -> tuple[bool, bool]:
        """(lease or marker held, a begun turn left unfinished)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(self.names.lease(agent), self.names.outstanding_tick(agent))
        pipe.hget(self.names.agent(agent), "doc")
        held, doc = await pipe.execute()
        return bool(held), bool(doc) and orjson.loads(doc)["current_turn_id"] is not None

    async def kind_for(self, agent: str) -> str | None:
        """The first tick kind of docs/contract.md §4 the agent's state calls for."""
        reads = self.reads
        record, items, waits, inbox = await asyncio.gather(
            reads.agent_record(agent),
            reads.all_items(agent),
            reads.active_waits(agent),
            reads.inbox(agent),
        )
        current = record.state.current_work_item_id if record else None
        ranked = views.rank(items, waits, current)
        if inbox:
            return "input"
        if any(e.item.id == current and e.readiness.value == "runnable" for e in ranked):
            return "continue_current"
        if any(w.has_unreviewed_triggers for w in waits):
            return "review_triggered"
        if current is None and any(e.candidate_class.value == "queued_runnable" for e in ranked):
            return "pick_queued"
        if any(w.wake is WakeKind.EXTERNAL and w.trigger_count == 0 for w in waits):
            await self._answer(agent)
        return None

    async def _answer(self, agent: str) -> None:
        if agent not in self.answered:
            self.answered.add(agent)
            await push(self.redis, self.names, [approve(agent)])

    async def publish(self, agent: str, kind: str) -> None:
        tick = Tick(tick_id=new_id("tick_"), agent_id=agent, kind=kind, issued_at=utc_now())
        marker = self.names.outstanding_tick(agent)
        if not await self.redis.set(marker, tick.tick_id, nx=True, px=MARKER_TTL_MS):
            return
        body = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=tick))
        stream = self.names.ticks(self.names.partition(agent))
        await self.redis.xadd(stream, {"m": body, "k": agent})
        self.published.append(tick.tick_id)

    async def decide(self, agent: str) -> None:
        """Once the agent is free, publish its next tick. A begun turn left without a lease is a
        dead executor's: its pending tick, reclaimed, brings the agent back."""
        for _ in range(600):
            held, unfinished = await self.held(agent)
            if unfinished and not held:
                return
            if not held and not unfinished:
                kind = await self.kind_for(agent)
                if kind is not None:
                    await self.publish(agent, kind)
                return
            await asyncio.sleep(0.05)

    async def decide_surely(self, agent: str) -> None:
        for _ in range(20):
            try:
                await self.decide(agent)
                return
            except RedisError:
                await asyncio.sleep(0.1)

    def spawn(self, agent: str) -> None:
        task = asyncio.create_task(self.decide_surely(agent))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def follow(self) -> None:
        """React to every message, every turn that ends and every wait that is triggered."""
        last = {self.names.events(p): "0" for p in range(self.names.partitions)}
        while True:
            try:
                found = await self.redis.xread(last, count=500, block=500)  # type: ignore[arg-type]
            except RedisError:
                await asyncio.sleep(0.1)
                continue
            for stream, entries in found or []:
                last[stream.decode()] = entries[-1][0].decode()
                for _, fields in entries:
                    batch = decode(fields[b"m"]).body
                    types = {e.type for e in batch.events}  # type: ignore[attr-defined]
                    # A begin also closes the interrupted turn before it: that is no turn's end.
                    if "turn_started" not in types and types & WAKING:
                        self.spawn(batch.agent_id)  # type: ignore[attr-defined]


async def eventually(
    check: Callable[[], Awaitable[bool]],
    within: float,
    what: str,
    describe: Callable[[], Awaitable[str]] | None = None,
) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    state = await describe() if describe is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{state}")


async def ticks_pending(redis: AnyRedis, names: Names) -> int:
    total = 0
    for p in range(names.partitions):
        total += (await redis.xpending(names.ticks(p), Group.EXECUTOR))["pending"]
    return total


async def command_ids_by_seq(redis: AnyRedis, names: Names) -> dict[tuple[str, int], str]:
    """(agent, history seq) -> id of the ledger command that appended the event."""
    out = {}
    for p in range(names.partitions):
        for _, fields in await redis.xrange(names.events(p)):
            batch = decode(fields[b"m"]).body
            for event in batch.events:  # type: ignore[attr-defined]
                out[(batch.agent_id, event.seq)] = batch.command_id  # type: ignore[attr-defined]
    return out


def check_turns(
    agent: str, events: list[dict[str, Any]], commands: dict[tuple[str, int], str]
) -> list[str]:
    """Turns of one agent never overlap, and each turn's writes fall inside its own window.
    Returns the tick ids its turns served."""
    started: dict[str, int] = {}
    finished: dict[str, int] = {}
    open_turn = None
    tokens = []
    ticks = []
    for e in events:
        data = e["data"]
        if e["type"] == "turn_finished":
            assert open_turn == data["turn_id"], f"{agent}: {data['turn_id']} ended out of turn"
            finished[data["turn_id"]] = e["seq"]
            open_turn = None
        elif e["type"] == "turn_started":
            assert open_turn is None, f"{agent}: {data['turn_id']} began inside {open_turn}"
            open_turn = data["turn_id"]
            started[open_turn] = e["seq"]
            tokens.append(data["fencing_token"])
            ticks.append(data["tick_id"])
    assert open_turn is None, f"{agent}: turn {open_turn} never finished"
    assert tokens == sorted(set(tokens)), f"{agent}: fencing tokens not increasing: {tokens}"
    for e in events:
        command = commands.get((agent, e["seq"]), "")
        turn, _, step = command.partition(":")
        # A begin also closes the interrupted turn before it: those events precede its start.
        if turn not in started or step == "begin":
            continue
        if step == "finish":
            # The finish opens with turn_finished; what the end records (a reply or failure
            # brief, the agent parked) follows it in the same write.
            assert e["seq"] >= finished[turn], f"{agent}: {command} before its turn_finished"
        else:
            assert started[turn] < e["seq"] <= finished[turn], f"{agent}: {command} outside"
    return ticks


SCENARIOS = (
    "Draft the report for team {n}. Check the numbers, then wait for the approval callback. "
    "Then publish it.",
    "Summarize incident {n}. Then file the follow-ups.",
    "Review pull request {n}, then merge it, then announce it.",
)


async def describe(driver: TickDriver) -> str:
    """Every agent not yet at rest, for the failure message."""
    redis, names, reads = driver.redis, driver.names, driver.reads
    lines = [f"ticks pending: {await ticks_pending(redis, names)}"]
    for agent in driver.agents:
        record = await reads.agent_record(agent)
        items = await reads.all_items(agent)
        lease = await redis.get(names.lease(agent))
        marker = await redis.get(names.outstanding_tick(agent))
        kind = await driver.kind_for(agent)
        states = [
            (i.state.value, i.blocked_by, [t.state.value for t in i.todo_list]) for i in items
        ]
        turn = record.current_turn_id if record else None
        if kind or lease or marker or turn or any(s[0] != "completed" for s in states):
            events = [e["type"] for e in await reads.history(agent, limit=1000)][-6:]
            lines.append(f"{agent}: next={kind} lease={lease} marker={marker} turn={turn}")
            lines.append(f"    {states} {events}")
    return "\n".join(lines)


async def at_rest(driver: TickDriver) -> bool:
    """No tick pending or about to be published, no turn running, nothing left to tick for."""
    if driver.tasks or await ticks_pending(driver.redis, driver.names):
        return False
    states = await asyncio.gather(*(driver.held(a) for a in driver.agents))
    if any(held or unfinished for held, unfinished in states):
        return False
    return all([await driver.kind_for(a) is None for a in driver.agents])


async def check_history(driver: TickDriver, logs: list[Path]) -> None:
    """No overlapping turns, every published tick served by a turn (or skipped while another
    turn held the agent), no WorkItem stuck."""
    reads = driver.reads
    commands = await command_ids_by_seq(driver.redis, driver.names)
    served: set[str] = set()
    interrupted = 0
    for agent in driver.agents:
        events = await reads.history(agent, limit=1000)
        served.update(check_turns(agent, events, commands))
        interrupted += sum(e["data"].get("outcome") == "interrupted" for e in events)
        (item,) = await reads.all_items(agent)
        done = item.state.value == "completed"
        assert done or (item.blocked_by or "").startswith("turn failed 3 times"), f"stuck: {item}"
        record = await reads.agent_record(agent)
        assert record is not None
        assert record.current_turn_id is None
    # A tick finding another turn holding the agent is settled without a turn (docs/streams.md:
    # that turn's end makes the scheduler decide again); every other tick ran a turn.
    unserved = set(driver.published) - served
    lines = [line for p in logs for line in p.read_text().splitlines() if '"lease_held"' in line]
    skipped = {t for t in unserved if any(t in line for line in lines)}
    assert unserved == skipped, f"ticks neither served nor skipped: {unserved - skipped}"
    assert interrupted >= 1


async def test_fifty_agents_across_two_executors_survive_a_kill_9(
    spawn, redis, names, reads
) -> None:
    ledger = spawn(*LEDGER)
    # A lease outlives event-loop stalls of a busy shared machine; a dead executor's ticks are
    # reclaimed a second after its leases expire.
    extra = {
        "LONGRUN_LEASE_TTL_MS": "3000",
        "LONGRUN_RECLAIM_IDLE_MS": "4000",
        "LONGRUN_SCRIPTED_LATENCY_MS": "50",
        "LONGRUN_LOG_LEVEL": "INFO",  # one line per turn and per skipped tick, for diagnosis
    }
    executors = [spawn(*EXECUTOR, **extra), spawn(*EXECUTOR, **extra)]
    for proc in (ledger, *executors):
        await proc.wait_ready()
    agents = [f"agent-{n:02d}" for n in range(50)]
    asks = [request(a, SCENARIOS[n % 3].format(n=n)) for n, a in enumerate(agents)]
    driver = TickDriver(redis, names, reads, agents)
    follower = asyncio.create_task(driver.follow())  # from the start of the event streams
    victim = executors[0]

    async def victim_mid_turn() -> bool:
        owners = await redis.mget([names.lease(a) for a in agents])
        mine = [o for o in owners if o and f"-{victim.proc.pid}-".encode() in o]
        return len(driver.published) >= 60 and len(mine) >= 3

    try:
        await push(redis, names, [*map(ensure, agents), *asks])
        await eventually(victim_mid_turn, 40, "the victim executor to be mid-turn")
        victim.kill9()
        victim.start()  # a new process, with a new consumer name
        await eventually(
            lambda: at_rest(driver), 60, "every agent to come to rest", lambda: describe(driver)
        )
    finally:
        follower.cancel()
    await check_history(driver, [p.log_path for p in executors])
    assert await redis.xlen(names.dead_letter) == 0
    await victim.wait_ready()


async def http_get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    raw = (await reader.read()).decode()
    writer.close()
    head, _, body = raw.partition("\r\n\r\n")
    return int(head.split()[1]), body


async def test_poison_ticks_are_dead_lettered_turns_show_in_metrics_and_sigterm_is_clean(
    spawn, redis, names, reads
) -> None:
    ledger, executor = spawn(*LEDGER), spawn(*EXECUTOR)
    for proc in (ledger, executor):
        await proc.wait_ready()
    agent = "agent-poison"
    stream = names.ticks(names.partition(agent))
    bad = [await redis.xadd(stream, fields) for fields in ({"m": b"{not json"}, {"k": agent})]
    driver = TickDriver(redis, names, reads, [agent])
    follower = asyncio.create_task(driver.follow())
    try:
        await push(redis, names, [ensure(agent), request(agent, "Write the notes. Then send.")])

        async def dead_lettered_and_served() -> bool:
            letters = await redis.xlen(names.dead_letter)
            events = [e["type"] for e in await reads.history(agent, limit=1000)]
            return letters == len(bad) and "turn_finished" in events

        await eventually(dead_lettered_and_served, 30, "poison dead-lettered, the request served")
    finally:
        follower.cancel()
    letters = {f[b"source_id"]: f for _, f in await redis.xrange(names.dead_letter)}
    assert set(letters) == set(bad)
    assert all(f[b"source_stream"] == stream.encode() for f in letters.values())
    assert all(f[b"reason"].startswith(b"undecodable") for f in letters.values())
    status, metrics = await http_get(executor.port, "/metrics")
    assert status == 200
    assert 'longrun_turns_total{outcome="yielded"}' in metrics
    assert 'longrun_tool_calls_total{status="success",tool="CreateWorkItem"} 1.0' in metrics
    assert "# TYPE longrun_gc_pause_seconds histogram" in metrics  # its collector is timed
    assert (await http_get(executor.port, "/healthz"))[0] == 200
    # SIGTERM: a graceful shutdown, after which uvicorn re-raises the signal it caught.
    assert executor.stop() == -signal.SIGTERM
    assert "Traceback" not in executor.log_path.read_text()


async def test_a_tick_past_the_delivery_cap_is_dead_lettered_not_served(
    spawn, redis, names, reads
) -> None:
    """A tick whose every delivery died with its executor is dead-lettered by the reclaimer
    once it passes DELIVERY_CAP deliveries, instead of being served (and crashing) forever."""
    ledger = spawn(*LEDGER)
    await ledger.wait_ready()
    agent = "agent-cursed"
    await push(redis, names, [ensure(agent), request(agent, "Write the notes. Then send.")])
    stream = names.ticks(names.partition(agent))
    await ensure_groups(redis, [stream], Group.EXECUTOR)
    tick = Tick(tick_id="tick-cursed", agent_id=agent, kind="input", issued_at=utc_now())
    body = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=tick))
    entry = await redis.xadd(stream, {"m": body, "k": agent})
    await redis.xreadgroup(Group.EXECUTOR, "dead-0", {stream: ">"})
    for n in range(1, DELIVERY_CAP + 1):  # each claim is one more delivery to a dying executor
        await redis.xclaim(stream, Group.EXECUTOR, f"dead-{n}", 0, [entry])
    executor = spawn(*EXECUTOR, LONGRUN_RECLAIM_IDLE_MS="300")
    await executor.wait_ready()

    async def dead_lettered() -> bool:
        return await redis.xlen(names.dead_letter) == 1

    await eventually(dead_lettered, 30, "the tick past its delivery cap to be dead-lettered")
    ((_, letter),) = await redis.xrange(names.dead_letter)
    assert (letter[b"source_id"], letter[b"source_stream"]) == (entry, stream.encode())
    assert letter[b"reason"].startswith(b"delivery_cap")
    assert (await redis.xpending(stream, Group.EXECUTOR))["pending"] == 0
    assert [e["type"] for e in await reads.history(agent, limit=100)].count("turn_started") == 0
