"""The daily token budget end to end, on the services as processes with the executor talking to
a chat-completions server on loopback: a budget of 1,000 tokens parks the agent after the turn
that crosses it (`token_budget_exhausted`, why-not-running), a message sent meanwhile lands and
waits, and a spec that raises the limit lets the agent run again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_model_calls import used
from tests.integration.test_replies_stack import openai_env
from tests.unit.test_provider_openai import ChatServer, serving

AGENT = "spender"


async def say(http: httpx.AsyncClient, text: str) -> None:
    said = await http.post(f"/v1/agents/{AGENT}/messages", json={"text": text})
    assert said.status_code == 202, said.text


async def agent_view(http: httpx.AsyncClient) -> dict[str, Any]:
    view: dict[str, Any] = (await http.get(f"/v1/agents/{AGENT}")).json()
    return view


async def turns_finished(http: httpx.AsyncClient, count: int) -> list[dict[str, Any]]:
    """Once `count` turns have finished and their inbox is consumed."""

    async def probe() -> list[dict[str, Any]] | None:
        finished = of_type(await history(http, AGENT), "turn_finished")
        agent = await agent_view(http)
        return finished if len(finished) >= count and agent["inbox_pending"] == 0 else None

    return await poll(probe, f"{count} finished turns of {AGENT}")


async def test_a_daily_budget_parks_the_agent_after_the_crossing_turn_until_raised(
    spawn,
) -> None:
    # Each answer reports 600 input and 20 output tokens: the second turn crosses 1,000.
    replies = [(200, used(600, 0, 20, text=f"Answer {n}."), {}) for n in (1, 2, 3)]
    async with serving(ChatServer(replies=replies)) as app:
        stack = Stack(spawn)
        await stack.start(**openai_env(app))
        async with stack.http() as http:
            spec = {"limits": {"daily_token_budget": 1000}}
            created = await http.put(f"/v1/agents/{AGENT}", json={"spec": spec})
            assert created.status_code == 201, created.text
            await say(http, "First question.")
            await turns_finished(http, 1)
            assert (await agent_view(http))["why_not_running"] is None  # 620 of 1000 spent
            await say(http, "Second question.")
            await turns_finished(http, 2)

            async def parked() -> dict[str, Any] | None:
                agent = await agent_view(http)
                why = agent["why_not_running"]
                held = why is not None and why["kind"] == "token_budget_exhausted"
                return agent if held else None

            agent = await poll(parked, "the agent parked on its token budget")
            assert agent["posture"] == "idle"
            why = agent["why_not_running"]
            assert (why["used"], why["limit"]) == (1240, 1000)
            tomorrow = datetime.now(UTC).date() + timedelta(days=1)
            assert why["resets_at"] == f"{tomorrow.isoformat()}T00:00:00Z"
            events = await history(http, AGENT)
            (exhausted,) = of_type(events, "token_budget_exhausted")
            assert exhausted["seq"] > of_type(events, "turn_finished")[1]["seq"]
            assert (exhausted["data"]["used"], exhausted["data"]["limit"]) == (1240, 1000)

            # A message still lands, and no turn starts for it.
            await say(http, "Third question.")
            await asyncio.sleep(1.5)  # the scheduler decides in milliseconds; no turn may start
            requests_before = len(app.requests)
            agent = await agent_view(http)
            assert agent["inbox_pending"] == 1
            assert len(of_type(await history(http, AGENT), "turn_started")) == 2
            assert len(app.requests) == requests_before == 2

            raised = {"limits": {"daily_token_budget": 5000}}
            changed = await http.put(f"/v1/agents/{AGENT}", json={"spec": raised})
            assert changed.status_code == 200, changed.text
            finished = await turns_finished(http, 3)
            assert finished[2]["data"]["usage"]["input_tokens"] == 600
            assert (await agent_view(http))["why_not_running"] is None
            usage = (await http.get(f"/v1/agents/{AGENT}/usage")).json()
            assert (usage["turns"], usage["input_tokens"], usage["output_tokens"]) == (3, 1800, 60)
    assert "Third question." in str(app.requests[2]["messages"])


async def test_agents_crossing_their_budgets_at_once_never_show_the_hold_while_dormant(
    spawn,
) -> None:
    """Many turns cross their budgets at once while every agent's view is read in a tight loop:
    no read may show `token_budget_exhausted` with a posture other than idle (before the hold
    and its posture were decided in one write, a loaded machine showed `dormant` here)."""
    agents = [f"crosser-{n}" for n in range(6)]
    replies = [(200, used(600, 0, 20, text="Done."), {}) for _ in range(2 * len(agents))]
    async with serving(ChatServer(replies=replies)) as app:
        stack = Stack(spawn)
        await stack.start(**openai_env(app))
        async with stack.http() as http:
            spec = {"limits": {"daily_token_budget": 1000}}
            for agent in agents:
                created = await http.put(f"/v1/agents/{agent}", json={"spec": spec})
                assert created.status_code == 201, created.text

            async def ask_all(text: str) -> None:
                sent = await asyncio.gather(
                    *(http.post(f"/v1/agents/{a}/messages", json={"text": text}) for a in agents)
                )
                assert all(s.status_code == 202 for s in sent), [s.text for s in sent]

            async def finished_all(count: int) -> bool | None:
                for agent in agents:
                    events = (await http.get(f"/v1/agents/{agent}/history")).json()["events"]
                    if len(of_type(events, "turn_finished")) < count:
                        return None
                return True

            await ask_all("First question.")
            await poll(lambda: finished_all(1), "every agent's first turn")
            await ask_all("Second question.")
            seen: list[tuple[str, str | None, str]] = []
            held: set[str] = set()
            deadline = asyncio.get_running_loop().time() + 90
            while held != set(agents):
                now = asyncio.get_running_loop().time()
                assert now < deadline, f"only {sorted(held)} held after 90 s"
                views = await asyncio.gather(*(http.get(f"/v1/agents/{a}") for a in agents))
                for agent, answer in zip(agents, views, strict=True):
                    view = answer.json()
                    why = view["why_not_running"]
                    kind = why["kind"] if why else None
                    seen.append((agent, kind, view["posture"]))
                    if kind == "token_budget_exhausted":
                        held.add(agent)
            wrong = [s for s in seen if s[1] == "token_budget_exhausted" and s[2] != "idle"]
            assert not wrong, wrong[:5]
            assert len(app.requests) == 2 * len(agents)
