"""Coalesced rounds: command batches of several partitions that arrive while a round runs are
applied by the next round together (one commit pipeline for all), each entry still applied once,
answered, and acknowledged on its own partition's stream; a batch that breaks a shared round
fails alone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from services.ledger.handlers import CommandConsumer
from services.ledger.service import Applied, Entry, LedgerService
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.streams import ensure_groups
from shared.wire import commands as c
from shared.wire.codec import Envelope, decode, encode
from shared.wire.names import Group, Names
from shared.wire.replies import CommandOutcome, CommandReply
from tests.cycles import cyclic_garbage
from tests.integration.ledger_driver import Driver

REPLY_TO = "rounds-test"


class CountingLedger(LedgerService):
    """The real service, counting its commit pipelines; a command with id `boom` raises."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        metrics = build_metrics(CollectorRegistry())
        super().__init__(redis, names, metrics, clock=utc_now, new_id=new_id, wake_limit=25)
        self.commit_pipelines = 0

    async def apply_batch(
        self, commands: Sequence[c.Command], *, ack: Sequence[Entry] | None = None
    ) -> list[Applied]:
        if any(cmd.command_id == "boom" for cmd in commands):
            raise ValueError("this command breaks every batch it is in")
        return await super().apply_batch(commands, ack=ack)

    async def _commit(self, runs: Any, done: Any) -> Any:
        self.commit_pipelines += 1
        return await super()._commit(runs, done)


def agents_in_distinct_partitions(names: Names, count: int) -> list[str]:
    found: dict[int, str] = {}
    n = 0
    while len(found) < count:
        agent = f"agent-rounds-{n}"
        found.setdefault(names.partition(agent), agent)
        n += 1
    return list(found.values())


def message(agent: str, n: int, names: Names, command_id: str | None = None) -> c.Command:
    return c.AppendOperatorMessage(
        command_id=command_id or f"{agent}-msg-{n}",
        agent_id=agent,
        message_id=f"{agent}-m-{n}",
        text=f"note {n}",
        reply_to=names.replies(REPLY_TO),
    )


async def batch_of(
    redis: AnyRedis, names: Names, commands: Sequence[c.Command]
) -> tuple[str, list[str], list[dict[str, Any]]]:
    """Push the commands onto their partition's stream and read them back as the ledger group
    would: (stream, entry ids, fields)."""
    stream = names.commands(names.partition(commands[0].agent_id))
    await ensure_groups(redis, [stream], Group.LEDGER)
    for cmd in commands:
        await redis.xadd(stream, {"m": encode(Envelope(id=new_id("m_"), at=utc_now(), body=cmd))})
    read = (await redis.xreadgroup(Group.LEDGER, "t", {stream: ">"}, count=100))[0][1]
    return stream, [i.decode() for i, _ in read], [{"m": f[b"m"]} for _, f in read]


async def inbox(redis: AnyRedis, names: Names, agent: str) -> list[str]:
    return [orjson.loads(doc)["text"] for doc in await redis.lrange(names.inbox(agent), 0, -1)]


async def replies(redis: AnyRedis, names: Names) -> dict[str, CommandReply]:
    found: dict[str, CommandReply] = {}
    for _, fields in await redis.xrange(names.replies(REPLY_TO)):
        reply = decode(fields[b"m"]).body
        assert isinstance(reply, CommandReply)
        found[reply.command_id] = reply
    return found


@pytest.fixture
def ledger(redis: AnyRedis, names: Names) -> CountingLedger:
    return CountingLedger(redis, names)


async def ensure(ledger: LedgerService, reads: ReadModel, agents: Sequence[str]) -> None:
    for agent in agents:
        assert (await Driver(ledger, reads, agent).ensure()).outcome is CommandOutcome.APPLIED


async def test_batches_of_three_partitions_arriving_together_share_a_round(
    redis: AnyRedis, names: Names, reads: ReadModel, ledger: CountingLedger
) -> None:
    agents = agents_in_distinct_partitions(names, 3)
    await ensure(ledger, reads, agents)
    ledger.commit_pipelines = 0
    consumer = CommandConsumer(ledger, redis, names, rounds=1)
    batches = [
        await batch_of(redis, names, [message(a, 1, names), message(a, 2, names)]) for a in agents
    ]

    await asyncio.gather(*(consumer.stream.consume(*batch) for batch in batches))

    # The first batch found the slot free and ran alone; the two that arrived while it ran
    # were applied by one round, with one commit pipeline.
    assert consumer.rounds.rounds == 2
    assert ledger.commit_pipelines == 2
    for (stream, _, _), agent in zip(batches, agents, strict=True):
        assert (await redis.xpending(stream, Group.LEDGER))["pending"] == 0
        assert await inbox(redis, names, agent) == ["note 1", "note 2"]
    answered = await replies(redis, names)
    assert {r.outcome for r in answered.values()} == {CommandOutcome.APPLIED}
    assert len(answered) == 6

    # Redelivered (a reclaimer after a crash): nothing applies twice.
    await asyncio.gather(*(consumer.stream.consume(*batch) for batch in batches))
    for agent in agents:
        assert await inbox(redis, names, agent) == ["note 1", "note 2"]


async def test_a_batch_that_breaks_a_shared_round_fails_alone(
    redis: AnyRedis, names: Names, reads: ReadModel, ledger: CountingLedger
) -> None:
    first, good, bad = agents_in_distinct_partitions(names, 3)
    await ensure(ledger, reads, [first, good, bad])
    consumer = CommandConsumer(ledger, redis, names, rounds=1)
    batches = [
        await batch_of(redis, names, [message(first, 1, names)]),
        await batch_of(redis, names, [message(good, 1, names), message(good, 2, names)]),
        await batch_of(
            redis, names, [message(bad, 1, names, command_id="boom"), message(bad, 2, names)]
        ),
    ]

    await asyncio.gather(*(consumer.stream.consume(*batch) for batch in batches))

    assert await inbox(redis, names, first) == ["note 1"]
    assert await inbox(redis, names, good) == ["note 1", "note 2"]
    assert await inbox(redis, names, bad) == ["note 2"]  # its neighbour still applied
    for stream, _, _ in batches:
        assert (await redis.xpending(stream, Group.LEDGER))["pending"] == 0
    (dead,) = await redis.xrange(names.dead_letter)
    assert dead[1][b"reason"].decode().startswith("failed: ValueError")
    assert dead[1][b"source_stream"].decode() == batches[2][0]


async def test_applied_rounds_leave_nothing_of_ours_for_the_cycle_collector(
    redis: AnyRedis, names: Names, reads: ReadModel, ledger: CountingLedger
) -> None:
    """Commands, replies and slices are freed when a round ends, not by a collection: the
    services collect their young generation only every 50,000 objects, so anything a round left
    in a reference cycle piled up and its collection stalled the ledger for 50-100 ms."""
    agents = agents_in_distinct_partitions(names, 3)
    await ensure(ledger, reads, agents)
    consumer = CommandConsumer(ledger, redis, names, rounds=1)
    batches = [
        await batch_of(redis, names, [message(a, 1, names), message(a, 2, names)]) for a in agents
    ]
    with cyclic_garbage() as ours:
        await asyncio.gather(*(consumer.stream.consume(*batch) for batch in batches))
    assert consumer.rounds.rounds == 2
    assert ours == []
