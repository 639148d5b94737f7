"""longrun.client against an ingress process and a real ledger: the tools answer typed
envelopes, refusals are typed exceptions with the contract's kind (another agent's token 403, a
second completion 409 work_item_not_open, a tool's bad input 400), the operator acts as an
agent, and the async `wakes()` yields the agent's own ticks only and resumes after `after`."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from longrun.client import (
    Agent,
    AsyncAgent,
    AsyncOperator,
    Forbidden,
    Operator,
    ToolConflict,
    ToolInputError,
    WakeTick,
)
from longrun.client.models import AgentCreated
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration.ingress.conftest import OPERATOR_TOKEN, new_agent_id

pytestmark = pytest.mark.timeout(300)


async def _external(operator: AsyncOperator) -> AgentCreated:
    created = await operator.create_agent(new_agent_id(), loop="external")
    assert isinstance(created, AgentCreated)
    return created


async def _publish(redis: AnyRedis, names: Names, agent_id: str, n: int) -> str:
    fields = {"agent_id": agent_id, "kind": "input", "work_item_id": "",
              "candidates": orjson.dumps([]), "tick_id": f"tk_{n}"}  # fmt: skip
    entry_id: Any = await redis.xadd(names.wakes, fields)
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def test_tools_and_refusals_are_typed(base_url: str) -> None:
    async with AsyncOperator(base_url, OPERATOR_TOKEN) as operator:
        ada, bob = await _external(operator), await _external(operator)
    with Agent(base_url, ada.agent_token) as agent:
        created = agent.create_work_item("Ship the notes", todo_list=[{"text": "draft"}])
        assert created.result is not None
        item = created.result["work_item"]["id"]
        assert [w.id for w in agent.work_items("open").work_items] == [item]
        done = agent.complete_work_item(item, report="Shipped.")
        assert done.status == "success"
        assert [w.kind for w in done.warnings] == ["unfinished_todos"]
        with pytest.raises(ToolConflict) as again:
            agent.complete_work_item(item, report="Shipped.")
        assert again.value.kind == "work_item_not_open"
        with pytest.raises(ToolInputError) as bad:
            agent.wait_for("  ", "external")
        assert bad.value.kind == "invalid_tool_input"
        assert agent.briefs(work_item_id=item).briefs[0].text == "Shipped."
        agent.create_work_item("Second")
        agent.create_work_item("Third")
        first = agent.work_items(limit=1)
        assert first.returned == 1
        assert first.next_cursor is not None
        rest = agent.work_items(limit=5, cursor=first.next_cursor)
        assert len({first.work_items[0].id, *(w.id for w in rest.work_items)}) == 3
        assert rest.next_cursor is None
    with Agent(base_url, bob.agent_token, agent_id=ada.agent_id) as intruder:
        with pytest.raises(Forbidden) as denied:
            intruder.work_items()
        assert (denied.value.kind, denied.value.status) == ("forbidden", 403)
        with pytest.raises(Forbidden):
            intruder.poll_wakes(wait_s=0)
    with Operator(base_url, OPERATOR_TOKEN) as operator:
        view = operator.as_agent(ada.agent_id).work_item(item).work_item
        assert (view.state, view.result_summary) == ("completed", "Shipped.")
        assert operator.verify(ada.agent_id).ok
        page = operator.history(ada.agent_id, limit=2)
        assert [e["seq"] for e in page.events] == [1, 2]
        assert page.next_cursor is not None
        after = operator.history(ada.agent_id, limit=2, cursor=page.next_cursor)
        assert after.events[0]["seq"] == 3


async def test_async_wakes_yield_the_agents_own_ticks_and_resume_after(
    base_url: str, redis: AnyRedis, names: Names
) -> None:
    async with AsyncOperator(base_url, OPERATOR_TOKEN) as operator:
        ada = await _external(operator)
    async with AsyncAgent(base_url, ada.agent_token) as agent:
        start = (await agent.poll_wakes(wait_s=0)).next_cursor
        mine = [await _publish(redis, names, ada.agent_id, 1)]
        await _publish(redis, names, new_agent_id(), 2)
        mine.append(await _publish(redis, names, ada.agent_id, 3))
        got: list[WakeTick] = []
        async with asyncio.timeout(60):
            async for tick in agent.wakes(after=start):
                got.append(tick)
                if len(got) == 2:
                    break
        assert [t.id for t in got] == mine
        assert [t.tick_id for t in got] == ["tk_1", "tk_3"]
        # A new iterator resuming after the first tick gets the second again (at-least-once).
        async with asyncio.timeout(60):
            async for tick in agent.wakes(after=mine[0]):
                assert tick.id == mine[1]
                break
