"""A turn's end on a real Redis: the write that parks an agent whose budget is spent carries
the `wake_budget_exhausted` event, so no reader ever sees the parked posture without it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from services.ledger.service import LedgerService
from shared.domain.records import Posture
from shared.domain.wake import TickKind
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome
from tests.integration.ledger_driver import Driver

AGENT = "agent-budget"


def small_budget_ledger(redis: AnyRedis, names: Names, limit: int) -> LedgerService:
    return LedgerService(
        redis,
        names,
        build_metrics(CollectorRegistry()),
        clock=utc_now,
        new_id=new_id,
        wake_limit=limit,
    )


async def applied(d: Driver, command: c.Command) -> None:
    reply = await d.send(command)
    assert reply.outcome is CommandOutcome.APPLIED, reply


async def turn(d: Driver, turn_id: str, fence: int) -> None:
    common = {"command_id": d.cid(), "agent_id": d.agent_id, "turn_id": turn_id}
    await applied(
        d,
        c.BeginTurn(
            **common,
            fencing_token=fence,
            tick_id=f"tick-{turn_id}",
            tick_kind=TickKind.CONTINUE_CURRENT,
        ),
    )
    common["command_id"] = d.cid()
    await applied(d, c.FinishTurn(**common, fencing_token=fence, outcome=c.TurnOutcome.YIELDED))


async def test_the_turn_that_spends_the_budget_parks_the_agent_with_the_event(
    redis: AnyRedis, names: Names
) -> None:
    # No scheduler runs here: whatever the reader sees after FinishTurn, FinishTurn wrote.
    reads = ReadModel(redis, names)
    d = Driver(small_budget_ledger(redis, names, limit=2), reads, AGENT)
    await d.ensure()
    wid = await d.create("keep going")
    await applied(
        d,
        c.PickWorkItem.model_validate(
            {"command_id": d.cid(), "agent_id": AGENT, "args": {"work_item_id": wid}}
        ),
    )
    fence = int(await redis.incr(names.fence(AGENT)))

    await turn(d, "turn-1", fence)
    state = await reads.agent_state(AGENT)
    assert state is not None
    assert (state.posture, state.wake_budget.used) == (Posture.IDLE, 1)
    assert "wake_budget_exhausted" not in await d.history_types()

    await turn(d, "turn-2", fence)
    state = await reads.agent_state(AGENT)
    assert state is not None
    assert (state.posture, state.wake_budget.used) == (Posture.IDLE, 2)
    events = await reads.history(AGENT, limit=1000)
    finished = max(e["seq"] for e in events if e["type"] == "turn_finished")
    tail = [e["type"] for e in events if e["seq"] > finished]
    assert tail == ["agent_parked", "wake_budget_exhausted"]
