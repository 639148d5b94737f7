"""The usage route and why-not-running on the agent, over HTTP against a real ledger process:
a finished turn's usage is summed since a moment, and a model outage shows on the agent."""

from __future__ import annotations

from datetime import timedelta

from services.turn_executor.lease import Leases
from shared.domain.model_failures import ModelOutage
from shared.domain.usage import TurnUsage, Usage
from shared.domain.wake import TickKind
from shared.runtime import utc_now
from shared.wire import commands as c
from tests.integration.ingress.conftest import Api


async def _turn(api: Api, leases: Leases, agent_id: str, n: int, **finish: object) -> None:
    """One turn through the ledger, as an executor records it."""
    token = await leases.acquire(agent_id, f"test:{n}")
    assert token is not None
    client = api.built.ingress.client
    turn_id = f"turn_{n}"
    begin = c.BeginTurn(
        command_id=f"{turn_id}:begin",
        agent_id=agent_id,
        turn_id=turn_id,
        fencing_token=token,
        tick_id=f"tick-{n}",
        tick_kind=TickKind.INPUT,
    )
    end = c.FinishTurn(
        command_id=f"{turn_id}:finish",
        agent_id=agent_id,
        turn_id=turn_id,
        fencing_token=token,
        **finish,  # type: ignore[arg-type]
    )
    replies = await client.send_all([begin, end])
    assert [r.error for r in replies] == [None, None]
    await leases.release(agent_id, f"test:{n}")


def _usage(calls: int, input_tokens: int, cached: int, output: int) -> TurnUsage:
    usage = TurnUsage()
    for _ in range(calls):
        one = Usage(input_tokens=input_tokens, cached_input_tokens=cached, output_tokens=output)
        usage = usage.plus_call("openai/m", one)
    return usage


async def test_usage_is_summed_since_a_moment_for_the_operator_and_the_agent(
    api: Api, redis, names
) -> None:
    created = await api.create_agent()
    agent_id = created["agent_id"]
    leases = Leases(redis, names, ttl_ms=10_000)
    await _turn(
        api, leases, agent_id, 1, outcome=c.TurnOutcome.YIELDED, usage=_usage(2, 100, 10, 5)
    )
    middle = utc_now()
    await _turn(api, leases, agent_id, 2, outcome=c.TurnOutcome.YIELDED, usage=_usage(1, 70, 0, 3))

    everything = await api.http.get(
        f"/v1/agents/{agent_id}/usage",
        params={"since": (middle - timedelta(hours=1)).isoformat()},
        headers=api.operator,
    )
    assert everything.status_code == 200, everything.text
    body = everything.json()
    assert {k: body[k] for k in ("agent_id", "turns", "model_calls")} == {
        "agent_id": agent_id,
        "turns": 2,
        "model_calls": 3,
    }
    assert (body["input_tokens"], body["cached_input_tokens"], body["output_tokens"]) == (
        270,
        20,
        13,
    )
    assert body["by_model"]["openai/m"]["model_calls"] == 3

    own = {"Authorization": f"Bearer {created['agent_token']}"}
    later = await api.http.get(
        f"/v1/agents/{agent_id}/usage", params={"since": middle.isoformat()}, headers=own
    )
    assert later.status_code == 200
    assert (later.json()["turns"], later.json()["input_tokens"]) == (1, 70)
    before = await api.http.get(
        f"/v1/agents/{agent_id}/usage",
        params={"since": (middle - timedelta(hours=1)).isoformat(), "until": middle.isoformat()},
        headers=own,
    )
    assert before.status_code == 200
    assert (before.json()["turns"], before.json()["input_tokens"]) == (1, 200)
    assert before.json()["until"] == middle.isoformat().replace("+00:00", "Z")
    backwards = await api.http.get(
        f"/v1/agents/{agent_id}/usage",
        params={"since": middle.isoformat(), "until": (middle - timedelta(hours=1)).isoformat()},
        headers=own,
    )
    assert backwards.status_code == 400
    assert backwards.json()["error"]["details"] == {"field": "until"}

    other = await api.create_agent()
    foreign = {"Authorization": f"Bearer {other['agent_token']}"}
    assert (await api.http.get(f"/v1/agents/{agent_id}/usage", headers=foreign)).status_code == 403
    naive = await api.http.get(
        f"/v1/agents/{agent_id}/usage", params={"since": "2026-01-01T00:00:00"}, headers=own
    )
    assert naive.status_code == 400


async def test_a_model_outage_shows_as_why_not_running_on_the_agent(api: Api, redis, names) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    before = await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)
    assert before.json()["why_not_running"] is None
    retry_at = utc_now() + timedelta(minutes=5)
    outage = ModelOutage(provider="anthropic", status=529, retry_at=retry_at)
    leases = Leases(redis, names, ttl_ms=10_000)
    await _turn(
        api,
        leases,
        agent_id,
        1,
        outcome=c.TurnOutcome.MODEL_UNAVAILABLE,
        error="model unavailable: overloaded",
        model_outage=outage,
    )
    answer = await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)
    assert answer.status_code == 200
    assert answer.json()["posture"] == "idle"
    assert answer.json()["why_not_running"] == {
        "kind": "model_unavailable",
        "provider": "anthropic",
        "status": 529,
        "retry_at": retry_at.isoformat().replace("+00:00", "Z"),
    }
