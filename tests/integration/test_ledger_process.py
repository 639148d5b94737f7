"""The ledger as real processes: exactly-once effects under duplicates and kill -9, poison
entries dead-lettered, and health that notices a dead subscriber."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import orjson

from shared.consumer import DELIVERY_CAP
from shared.runtime import new_id, utc_now
from shared.wire import commands as c
from shared.wire.codec import Envelope, decode, encode
from shared.wire.events import AgentCreated
from shared.wire.names import Group
from shared.wire.replies import CommandOutcome
from tests.integration.ledger_driver import token_hash

LEDGER = "services.ledger"
FUTURE_VERSION = (
    b'{"id":"1","type":"ensure_agent","version":9,"at":"2026-01-01T00:00:00Z","body":{}}'
)
PORT_ENV = "LONGRUN_LEDGER_PORT"


def ensure(agent_id: str) -> c.EnsureAgent:
    return c.EnsureAgent(
        command_id=f"ensure-{agent_id}",
        agent_id=agent_id,
        agent_token_hash=token_hash(f"a-{agent_id}"),
        callback_token_hash=token_hash(f"cb-{agent_id}"),
    )


def message(agent_id: str, n: int) -> c.AppendOperatorMessage:
    return c.AppendOperatorMessage(
        command_id=f"msg-{agent_id}-{n}",
        agent_id=agent_id,
        message_id=f"m-{agent_id}-{n}",
        text=f"hello {n}",
    )


async def push(redis, names, commands: list[c.Command]) -> None:
    """XADD commands to their partitions, pipelined, as any producer would."""
    for start in range(0, len(commands), 1000):
        pipe = redis.pipeline(transaction=False)
        for cmd in commands[start : start + 1000]:
            body = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=cmd))
            pipe.xadd(names.commands(names.partition(cmd.agent_id)), {"m": body})
        await pipe.execute()


async def history(redis, names, agent_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(d) for d in await redis.lrange(names.history(agent_id), 0, -1)]


async def pending(redis, names) -> int:
    total = 0
    for p in range(names.partitions):
        info = await redis.xpending(names.commands(p), Group.LEDGER)
        total += info["pending"]
    return total


async def wait_for(predicate, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def test_fifty_concurrent_duplicates_apply_once_and_emit_one_event(
    spawn, redis, names, client
) -> None:
    ledgers = [spawn(LEDGER, PORT_ENV), spawn(LEDGER, PORT_ENV)]
    for ledger in ledgers:
        await ledger.wait_ready()
    assert (await client.send(ensure("dup"))).outcome is CommandOutcome.APPLIED

    # Fifty copies of one command from fifty producers at once, each asking for its own reply.
    reply_stream = f"{names.prefix}:replies:test"
    copy = message("dup", 1).model_copy(update={"reply_to": reply_stream})
    await asyncio.gather(*(push(redis, names, [copy]) for _ in range(50)))

    async def all_answered() -> bool:
        return await redis.xlen(reply_stream) == 50

    await wait_for(all_answered, 30, "fifty replies")
    replies = [decode(f[b"m"]).body for _, f in await redis.xrange(reply_stream)]
    outcomes = Counter(r.outcome for r in replies)
    assert outcomes[CommandOutcome.APPLIED] == 1
    assert outcomes[CommandOutcome.DUPLICATE] == 49
    assert {orjson.dumps(r.result) for r in replies} == {orjson.dumps(replies[0].result)}
    events = [e["type"] for e in await history(redis, names, "dup")]
    assert events.count("operator_message_received") == 1
    stream = names.events(names.partition("dup"))
    entries = await redis.xrange(stream)
    mine = [decode(f[b"m"]).body for _, f in entries if f[b"k"] == b"dup"]
    assert [b.command_id for b in mine].count("msg-dup-1") == 1


async def test_kill_9_mid_load_applies_every_command_exactly_once(spawn, redis, names) -> None:
    agents = [f"agent-{i}" for i in range(20)]
    per_agent = 500  # 10,000 commands
    ledger = spawn(LEDGER, PORT_ENV)
    await ledger.wait_ready()
    await push(redis, names, [ensure(a) for a in agents])
    commands: list[c.Command] = [message(a, n) for n in range(per_agent) for a in agents]
    await push(redis, names, commands)

    async def some_applied() -> bool:
        return sum([await redis.llen(names.history(a)) for a in agents]) > 2000

    await wait_for(some_applied, 30, "the first commands to apply")
    ledger.kill9()
    ledger.start()  # a new process: new consumer name; the reclaimer takes the dead one's entries
    await ledger.wait_ready()

    async def all_applied() -> bool:
        done = sum([await redis.llen(names.inbox(a)) for a in agents])
        return done == len(commands) and await pending(redis, names) == 0

    await wait_for(all_applied, 120, "every command to apply and nothing to stay pending")
    for agent in agents:
        events = await history(redis, names, agent)
        received = Counter(
            e["data"]["message_id"] for e in events if e["type"] == "operator_message_received"
        )
        assert received == Counter({f"m-{agent}-{n}": 1 for n in range(per_agent)})
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    emitted = 0
    for p in range(names.partitions):
        for _, fields in await redis.xrange(names.events(p)):
            body = decode(fields[b"m"]).body
            emitted += sum(1 for e in body.events if e.type == "operator_message_received")
    assert emitted == len(commands)


async def test_malformed_entries_go_to_dead_letter_and_consumer_keeps_going(
    spawn, redis, names, client
) -> None:
    ledger = spawn(LEDGER, PORT_ENV)
    await ledger.wait_ready()
    stream = names.commands(names.partition("poison"))
    not_a_command = encode(
        Envelope(id="x", at=utc_now(), body=AgentCreated(agent_id="poison", loop="builtin"))
    )
    bad = [
        {"m": b"{not json"},
        {"other": b"field"},
        {"m": not_a_command},
        {"m": FUTURE_VERSION},
        {"m": b"\xff\xfe not UTF-8", b"\xc3": b"\x28"},  # bytes the raw batch must not choke on
    ]
    ids = [await redis.xadd(stream, fields) for fields in bad]

    reply = await client.send(ensure("poison"))
    assert reply.outcome is CommandOutcome.APPLIED

    async def dead_lettered() -> bool:
        return await redis.xlen(names.dead_letter) >= len(bad)

    await wait_for(dead_lettered, 20, "poison entries in the dead-letter stream")
    letters = await redis.xrange(names.dead_letter)
    by_source = {f[b"source_id"]: f for _, f in letters}
    for entry_id in ids:
        fields = by_source[entry_id]
        assert fields[b"source_stream"] == stream.encode()
        assert fields[b"reason"]
    assert b"unknown version 9" in by_source[ids[3]][b"reason"]

    async def drained() -> bool:  # dead-lettering happens inside the handler, the ack after it
        return await pending(redis, names) == 0

    await wait_for(drained, 20, "the poison entries to be acknowledged")
    await ledger.wait_ready()


async def test_health_fails_when_a_subscriber_stops(spawn, redis, names) -> None:
    ledger = spawn(LEDGER, PORT_ENV)
    await ledger.wait_ready()
    await redis.delete(names.commands(0))  # the stream and its group vanish: NOGROUP

    async def unhealthy() -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", ledger.port)
        writer.write(b"GET /healthz HTTP/1.0\r\n\r\n")
        status = (await reader.readline()).decode()
        writer.close()
        return " 503 " in status

    await wait_for(unhealthy, 20, "/healthz to report the dead subscriber")


async def test_an_undecodable_entry_a_dead_consumer_left_is_reclaimed_and_dead_lettered(
    spawn, redis, names, client
) -> None:
    """The reclaimer reads raw entries too: bytes that are not UTF-8 reach the handler (which
    dead-letters them) instead of failing in faststream's parser on every reclaim forever."""
    stream = names.commands(names.partition("orphan"))
    await redis.xgroup_create(stream, Group.LEDGER, id="0", mkstream=True)
    entry_id = await redis.xadd(stream, {"m": b"\xff\xfe not UTF-8"})
    taken = await redis.xreadgroup(Group.LEDGER, "a-dead-ledger", {stream: ">"}, count=10)
    assert taken[0][1][0][0] == entry_id  # pending for a consumer that will never ack it

    letter = await _reclaimed_into_dead_letters(spawn, redis, names, stream, entry_id)
    assert letter[b"reason"].startswith(b"undecodable")
    assert (await client.send(ensure("orphan"))).outcome is CommandOutcome.APPLIED


async def _no_pending(redis, stream: str) -> bool:
    return (await redis.xpending(stream, Group.LEDGER))["pending"] == 0


async def _reclaimed_into_dead_letters(spawn, redis, names, stream: str, entry_id: bytes) -> Any:
    """Start a ledger that reclaims fast; wait until the entry is dead-lettered and acked, and
    return the dead letter (the only one)."""
    ledger = spawn(LEDGER, PORT_ENV, LONGRUN_RECLAIM_IDLE_MS="200")
    await ledger.wait_ready()

    async def dead_lettered() -> bool:
        letters = await redis.xrange(names.dead_letter)
        return any(f[b"source_id"] == entry_id for _, f in letters)

    await wait_for(dead_lettered, 20, "the reclaimed entry in the dead-letter stream")
    (letter,) = [f for _, f in await redis.xrange(names.dead_letter)]
    await wait_for(lambda: _no_pending(redis, stream), 20, "the reclaimed entry to be acked")
    return letter


async def test_an_entry_delivered_past_the_cap_is_dead_lettered_unapplied(
    spawn, redis, names, client
) -> None:
    """A valid command that keeps killing its consumers: after DELIVERY_CAP deliveries the
    reclaimer dead-letters it with the count, acks it, and never applies it."""
    agent = "cursed"
    stream = names.commands(names.partition(agent))
    await redis.xgroup_create(stream, Group.LEDGER, id="0", mkstream=True)
    body = encode(Envelope(id=new_id("msg_"), at=utc_now(), body=ensure(agent)))
    entry_id = await redis.xadd(stream, {"m": body})
    await redis.xreadgroup(Group.LEDGER, "a-dead-ledger", {stream: ">"}, count=10)
    for n in range(DELIVERY_CAP):  # each earlier reclaim died with the entry in hand
        await redis.xclaim(stream, Group.LEDGER, f"dead-reclaimer-{n}", 0, [entry_id])
    (pending,) = await redis.xpending_range(stream, Group.LEDGER, "-", "+", 1)
    assert pending["times_delivered"] == DELIVERY_CAP + 1

    letter = await _reclaimed_into_dead_letters(spawn, redis, names, stream, entry_id)
    assert letter[b"reason"] == f"delivery_cap: {DELIVERY_CAP + 2} deliveries".encode()
    assert letter[b"m"] == body
    assert await redis.hget(names.agent(agent), "doc") is None  # never applied
