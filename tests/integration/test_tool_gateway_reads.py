"""The tool gateway answers the read tools (GetWorkItem, ListWorkItems) from the read model: no
command reaches the ledger's streams (the ledger applies writes only), and each envelope
carries the result, error or warning the tool's contract names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.ledger.service import LedgerService
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.tool_gateway import ToolGateway
from shared.wire.names import Names
from tests.integration.ledger_driver import Driver

AGENT = "agent-gateway-reads"
OTHER = "agent-gateway-other"


@pytest.fixture
async def quiet_client(redis: AnyRedis, names: Names) -> AsyncIterator[LedgerClient]:
    """A client with a short timeout and no ledger consuming its commands: a read sent through
    the ledger would time out here."""
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id, timeout=0.5, attempts=1)
    await client.start()
    yield client
    await client.stop()


@pytest.fixture
def gateway(quiet_client: LedgerClient, tmp_path: Path) -> ToolGateway:
    return ToolGateway(
        quiet_client,
        agent_home=tmp_path,
        callback_base_url="http://127.0.0.1:8080",
        clock=utc_now,
        new_id=new_id,
    )


async def command_entries(redis: AnyRedis, names: Names) -> int:
    return sum([await redis.xlen(names.commands(p)) for p in range(names.partitions)])


async def test_reads_are_answered_from_the_read_model_with_the_contract_envelopes(
    redis: AnyRedis,
    names: Names,
    ledger: LedgerService,
    reads: ReadModel,
    gateway: ToolGateway,
) -> None:
    me, other = Driver(ledger, reads, AGENT), Driver(ledger, reads, OTHER)
    await me.ensure()
    await other.ensure()
    first = await me.create("write the note", todo_list=[{"text": "outline"}])
    await me.create("second")
    await me.tool("PickWorkItem", work_item_id=first, reason="start")
    foreign = await other.create("not yours")
    before = await command_entries(redis, names)

    calls: list[tuple[str, dict[str, Any]]] = [
        ("GetWorkItem", {"work_item_id": first, "include_todo_list": True}),
        ("ListWorkItems", {"filter": "open", "limit": 500}),  # clamped, with a warning
        ("ListWorkItems", {"filter": "current"}),
        ("GetWorkItem", {"work_item_id": foreign}),  # another agent's
        ("GetWorkItem", {"work_item_id": "wi_" + "1" * 26}),  # none
    ]
    answers = [
        await gateway.call(AGENT, tool, args, command_id=new_id("cmd_")) for tool, args in calls
    ]
    assert [a.status for a in answers] == ["success"] * 3 + ["error"] * 2
    current = answers[2].result
    assert current is not None
    assert [w["id"] for w in current["work_items"]] == [first]
    missing = answers[4].error
    assert missing is not None
    assert missing.kind == "work_item_not_found"

    got = await gateway.call(AGENT, "GetWorkItem", calls[0][1], command_id="c1")
    assert got.result is not None
    assert got.result["work_item"]["id"] == first
    assert got.result["work_item"]["is_current"] is True
    listed = await gateway.call(AGENT, "ListWorkItems", calls[1][1], command_id="c2")
    assert listed.result is not None
    assert listed.result["returned"] == 2
    assert [w.kind for w in listed.warnings] == ["limit_clamped"]
    denied = await gateway.call(AGENT, "GetWorkItem", calls[3][1], command_id="c3")
    assert denied.error is not None
    assert denied.error.kind == "work_item_access_denied"
    assert await command_entries(redis, names) == before  # nothing was sent to the ledger
