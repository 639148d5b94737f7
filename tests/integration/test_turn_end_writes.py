"""Holds on a real Redis, with no scheduler running: the write that causes a hold (a turn that
spends the wake or the daily token budget, a spec that lowers the limit, a model outage, a
missing secret) also parks the agent idle and announces it, so no reader ever sees a hold with a
posture that contradicts it, nor the posture without its announcement."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from services.ingress.schemas import AgentDetail
from services.ledger.service import LedgerService
from shared.domain.missing_secrets import MissingSecret
from shared.domain.model_failures import ModelOutage
from shared.domain.records import Posture
from shared.domain.specs import AgentSpec
from shared.domain.usage import TurnUsage, Usage
from shared.domain.wake import TickKind
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome
from tests.integration.ledger_driver import Driver, token_hash

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


# ---- every hold is decided with its posture, in one write (no scheduler runs here either)

SPENDER = "agent-tokens"
HOLDS_IDLE = {"missing_secret", "model_unavailable", "token_budget_exhausted"}


def spending(agent_id: str, input_tokens: int, output_tokens: int) -> TurnUsage:
    one = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    return TurnUsage().plus_call("openai/stub-model", one)


async def detail(reads: ReadModel, agent_id: str) -> AgentDetail:
    """The agent's view as `GET /v1/agents/{id}` builds it."""
    record = await reads.agent_record(agent_id)
    assert record is not None
    state = await reads.agent_state(agent_id)
    stored = await reads.agent_spec(agent_id)
    return AgentDetail.of(state or record.state, record, stored, utc_now())


def assert_consistent(view: AgentDetail) -> None:
    """No reader may see a hold with a posture that contradicts it."""
    why = view.why_not_running
    if why is None:
        return
    if why["kind"] in HOLDS_IDLE | {"wake_budget_exhausted"}:
        assert view.posture is Posture.IDLE, (why, view.posture)
    if why["kind"] == "verifying":
        assert view.posture in (Posture.IDLE, Posture.DORMANT), (why, view.posture)
    assert view.posture is not Posture.RUNNING, (why, view.posture)


async def budget_agent(d: Driver, limit: int) -> None:
    spec = AgentSpec.model_validate({"limits": {"daily_token_budget": limit}})
    await applied(
        d,
        c.EnsureAgent(
            command_id=d.cid(),
            agent_id=d.agent_id,
            spec=spec,
            agent_token_hash=token_hash(f"agent-token-{d.agent_id}"),
            callback_token_hash=token_hash(f"callback-{d.agent_id}"),
        ),
    )


async def spend(d: Driver, turn_id: str, fence: int, usage: TurnUsage, **finish: Any) -> None:
    common = {"agent_id": d.agent_id, "turn_id": turn_id}
    begin = c.BeginTurn(
        **common,
        command_id=d.cid(),
        fencing_token=fence,
        tick_id=f"tick-{turn_id}",
        tick_kind=TickKind.INPUT,
    )
    await applied(d, begin)
    outcome = finish.pop("outcome", c.TurnOutcome.YIELDED)
    end = c.FinishTurn(
        **common, command_id=d.cid(), fencing_token=fence, outcome=outcome, usage=usage, **finish
    )
    await applied(d, end)


async def tail_after(reads: ReadModel, agent_id: str, event_type: str) -> list[str]:
    events = await reads.history(agent_id, limit=1000)
    last = max(e["seq"] for e in events if e["type"] == event_type)
    return [e["type"] for e in events if e["seq"] > last]


async def test_the_turn_that_spends_the_daily_token_budget_parks_the_agent_idle_with_the_event(
    redis: AnyRedis, names: Names
) -> None:
    reads = ReadModel(redis, names)
    d = Driver(small_budget_ledger(redis, names, limit=25), reads, SPENDER)
    await budget_agent(d, 1000)
    fence = int(await redis.incr(names.fence(SPENDER)))

    await spend(d, "turn-1", fence, spending(SPENDER, 600, 20))
    view = await detail(reads, SPENDER)
    assert (view.posture, view.why_not_running) == (Posture.DORMANT, None)

    await spend(d, "turn-2", fence, spending(SPENDER, 600, 20))
    view = await detail(reads, SPENDER)
    assert view.why_not_running is not None
    assert view.why_not_running["kind"] == "token_budget_exhausted"
    assert (view.why_not_running["used"], view.why_not_running["limit"]) == (1240, 1000)
    assert view.posture is Posture.IDLE
    assert_consistent(view)
    assert await tail_after(reads, SPENDER, "turn_finished") == [
        "agent_parked",
        "token_budget_exhausted",
    ]

    # The scheduler's park, decided on a snapshot from before (nothing runnable), arrives late:
    # the held agent stays idle and nothing is announced twice.
    late = c.ParkAgent(command_id=d.cid(), agent_id=SPENDER, reason=c.ParkReason.NOTHING_RUNNABLE)
    reply = await d.send(late)
    assert reply.result == {"parked": False, "posture": "idle"}
    assert (await detail(reads, SPENDER)).posture is Posture.IDLE
    types = [e["type"] for e in await reads.history(SPENDER, limit=1000)]
    assert types.count("token_budget_exhausted") == 1


async def test_a_lower_daily_budget_holds_the_agent_in_the_spec_change_itself(
    redis: AnyRedis, names: Names
) -> None:
    reads = ReadModel(redis, names)
    d = Driver(small_budget_ledger(redis, names, limit=25), reads, SPENDER)
    await budget_agent(d, 1000)
    fence = int(await redis.incr(names.fence(SPENDER)))
    await spend(d, "turn-1", fence, spending(SPENDER, 600, 20))
    assert (await detail(reads, SPENDER)).posture is Posture.DORMANT

    await budget_agent(d, 500)
    view = await detail(reads, SPENDER)
    assert view.why_not_running is not None
    assert view.why_not_running["kind"] == "token_budget_exhausted"
    assert view.posture is Posture.IDLE
    assert await tail_after(reads, SPENDER, "agent_spec_changed") == [
        "agent_parked",
        "token_budget_exhausted",
    ]

    await budget_agent(d, 5000)  # raised: nothing holds it any more
    view = await detail(reads, SPENDER)
    assert view.why_not_running is None
    assert_consistent(view)


async def test_a_model_outage_and_a_missing_secret_show_with_the_idle_posture(
    redis: AnyRedis, names: Names
) -> None:
    reads = ReadModel(redis, names)
    d = Driver(small_budget_ledger(redis, names, limit=25), reads, SPENDER)
    await budget_agent(d, 100_000)
    fence = int(await redis.incr(names.fence(SPENDER)))
    later = utc_now() + timedelta(minutes=5)
    outage = ModelOutage(provider="openai", status=503, retry_at=later)
    await spend(
        d,
        "turn-1",
        fence,
        TurnUsage(),
        outcome=c.TurnOutcome.MODEL_UNAVAILABLE,
        model_outage=outage,
    )
    view = await detail(reads, SPENDER)
    assert view.why_not_running is not None
    assert view.why_not_running["kind"] == "model_unavailable"
    assert_consistent(view)

    hold = MissingSecret(name="OPENAI_API_KEY", spec_version=1, retry_at=later)
    missing = c.RecordMissingSecret(
        command_id=d.cid(), agent_id=SPENDER, fencing_token=fence, hold=hold
    )
    await applied(d, missing)
    view = await detail(reads, SPENDER)
    assert view.why_not_running is not None
    assert view.why_not_running["kind"] == "missing_secret"
    assert_consistent(view)

    # A late park for nothing runnable leaves the held agent idle.
    late = c.ParkAgent(command_id=d.cid(), agent_id=SPENDER, reason=c.ParkReason.NOTHING_RUNNABLE)
    await d.send(late)
    assert_consistent(await detail(reads, SPENDER))


async def test_nothing_holds_a_running_agent(redis: AnyRedis, names: Names) -> None:
    reads = ReadModel(redis, names)
    d = Driver(small_budget_ledger(redis, names, limit=25), reads, SPENDER)
    await budget_agent(d, 1000)
    fence = int(await redis.incr(names.fence(SPENDER)))
    await spend(d, "turn-1", fence, spending(SPENDER, 600, 20))
    begin = c.BeginTurn(
        command_id=d.cid(),
        agent_id=SPENDER,
        turn_id="turn-2",
        fencing_token=fence,
        tick_id="tick-turn-2",
        tick_kind=TickKind.INPUT,
    )
    await applied(d, begin)
    await budget_agent(d, 500)  # lowered while the turn runs: the turn goes on
    view = await detail(reads, SPENDER)
    assert (view.posture, view.why_not_running) == (Posture.RUNNING, None)
    finish = c.FinishTurn(
        command_id=d.cid(),
        agent_id=SPENDER,
        turn_id="turn-2",
        fencing_token=fence,
        outcome=c.TurnOutcome.YIELDED,
    )
    await applied(d, finish)
    view = await detail(reads, SPENDER)
    assert view.why_not_running is not None
    assert view.why_not_running["kind"] == "token_budget_exhausted"
    assert_consistent(view)
