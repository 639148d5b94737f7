"""A slot whose primary does not serve it (as while a primary is down or a slot moves): the
ledger leaves the command pending instead of dead-lettering it, and applies it once the slot is
served again. On one Redis the same outage is a ConnectionError; a cluster answers CLUSTERDOWN."""

from __future__ import annotations

import hashlib

import pytest
from redis.cluster import key_slot

from services.ledger.handlers import CommandConsumer
from services.ledger.service import LedgerService
from shared.runtime import new_id, utc_now
from shared.store.client import CLUSTER_UNAVAILABLE, AnyRedis
from shared.store.readmodel import ReadModel
from shared.streams import ensure_groups
from shared.wire import commands as c
from shared.wire.codec import Envelope, encode
from shared.wire.names import Group, Names
from tests.cluster.conftest import Cluster


def token_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def test_a_command_for_an_unserved_slot_stays_pending_then_applies_once(
    redis_cluster: Cluster, redis: AnyRedis, names: Names, ledger: LedgerService, reads: ReadModel
) -> None:
    agent = "outage-agent"
    stream = names.commands(names.partition(agent))
    await ensure_groups(redis, [stream], Group.LEDGER)
    command = c.EnsureAgent(
        command_id="ensure-outage",
        agent_id=agent,
        loop="builtin",
        agent_token_hash=token_hash("agent"),
        callback_token_hash=token_hash("callback"),
    )
    await redis.xadd(stream, {"m": encode(Envelope(id=new_id("msg_"), at=utc_now(), body=command))})
    ((_, batch),) = await redis.xreadgroup(Group.LEDGER, "t", {stream: ">"}, count=10)
    ids = [i.decode() for i, _ in batch]
    fields = [{k.decode(): v for k, v in f.items()} for _, f in batch]
    consumer = CommandConsumer(ledger, redis, names)

    owner = redis_cluster.node(redis_cluster.node_port_of(stream))
    slot = key_slot(stream.encode())
    owner.execute_command("CLUSTER", "DELSLOTS", slot)
    try:
        with pytest.raises(CLUSTER_UNAVAILABLE):
            await consumer.stream.consume(stream, ids, fields)
    finally:
        owner.execute_command("CLUSTER", "ADDSLOTS", slot)
        owner.close()
        redis_cluster.wait_ok()
    assert await redis.xlen(names.dead_letter) == 0
    assert (await redis.xpending(stream, Group.LEDGER))["pending"] == 1
    assert await reads.agent_record(agent) is None

    await consumer.stream.consume(stream, ids, fields)
    assert (await redis.xpending(stream, Group.LEDGER))["pending"] == 0
    assert await redis.xlen(names.dead_letter) == 0
    record = await reads.agent_record(agent)
    assert record is not None
    assert record.history_seq > 0
