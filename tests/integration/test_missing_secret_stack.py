"""A spec naming an environment variable the executor lacks, on the services as processes: the
agent parks idle with why-not-running `missing_secret {name}` and `agent_parked {reason:
missing_secret}` and no turn begins; messages still land; a spec change retries it at once; and
once an executor that has the variable takes the tick (here after the first one's backoff),
the turn runs."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.stack import Stack, history, of_type, poll

UNREACHABLE_MCP = "http://127.0.0.1:9/mcp"  # discard port: refused, so the turn goes on without


def spec_naming(variable: str) -> dict[str, Any]:
    server = {
        "name": "search",
        "transport": "http",
        "url": UNREACHABLE_MCP,
        "headers_from_env": {"Authorization": variable},
    }
    return {"tools": {"mcp_servers": [server]}}


async def parked_for(http: httpx.AsyncClient, agent_id: str, name: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        agent = (await http.get(f"/v1/agents/{agent_id}")).json()
        why = agent["why_not_running"]
        return agent if why and why["kind"] == "missing_secret" and why["name"] == name else None

    return await poll(probe, f"{agent_id} parked for {name}")


async def finished_turn(http: httpx.AsyncClient, agent_id: str) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]] | None:
        events = await history(http, agent_id)
        return events if of_type(events, "turn_finished") else None

    return await poll(probe, f"a finished turn of {agent_id}")


async def consumed(http: httpx.AsyncClient, agent_id: str) -> None:
    """The message is consumed by a turn that reached its end, and nothing holds the agent."""

    async def probe() -> bool:
        agent = (await http.get(f"/v1/agents/{agent_id}")).json()
        return agent["inbox_pending"] == 0 and agent["why_not_running"] is None

    await poll(probe, f"{agent_id}'s message consumed")


async def create(http: httpx.AsyncClient, agent_id: str, variable: str) -> None:
    put = await http.put(f"/v1/agents/{agent_id}", json={"spec": spec_naming(variable)})
    assert put.status_code == 201, put.text
    said = await http.post(f"/v1/agents/{agent_id}/messages", json={"text": "Please note this."})
    assert said.status_code == 202, said.text


async def test_a_spec_change_retries_an_agent_parked_for_a_missing_secret_at_once(
    spawn, tmp_path
) -> None:
    stack = Stack(spawn)
    # The executor has PRESENT_TOKEN only; its backoff is an hour, so only the spec change can
    # bring the agent back within the test.
    await stack.start(
        PRESENT_TOKEN="present",
        LONGRUN_MISSING_SECRET_BACKOFF_MS="3600000",
    )
    async with stack.http() as http:
        await create(http, "clerk", "SEARCH_TOKEN")
        agent = await parked_for(http, "clerk", "SEARCH_TOKEN")
        assert agent["posture"] == "idle"
        assert agent["inbox_pending"] == 1  # the message landed and waits
        events = await history(http, "clerk")
        (parked,) = [
            e for e in of_type(events, "agent_parked") if e["data"]["reason"] != "nothing_runnable"
        ]
        assert parked["data"] == {
            "posture": "idle",
            "reason": "missing_secret",
            "name": "SEARCH_TOKEN",
        }
        assert of_type(events, "turn_started") == []

        changed = await http.put("/v1/agents/clerk", json={"spec": spec_naming("PRESENT_TOKEN")})
        assert changed.status_code == 200, changed.text
        events = await finished_turn(http, "clerk")
        started = of_type(events, "turn_started")[0]
        assert started["seq"] > of_type(events, "agent_spec_changed")[0]["seq"]
        await consumed(http, "clerk")


async def test_an_executor_that_has_the_secret_takes_the_retried_tick(spawn, tmp_path) -> None:
    stack = Stack(spawn)
    await stack.start(
        LONGRUN_MISSING_SECRET_BACKOFF_MS="2000", LONGRUN_MISSING_SECRET_BACKOFF_MAX_MS="2000"
    )
    lacking = stack.executors[0]
    async with stack.http() as http:
        await create(http, "clerk", "SEARCH_TOKEN")
        await parked_for(http, "clerk", "SEARCH_TOKEN")
        lacking.stop()
        await stack.add_executor(SEARCH_TOKEN="secret-value")
        events = await finished_turn(http, "clerk")
        finished = of_type(events, "turn_finished")[0]  # more may follow: the agent goes on
        assert finished["data"]["outcome"] != "failed"
        assert of_type(events, "agent_parked")[0]["data"]["reason"] == "missing_secret"
        await consumed(http, "clerk")
