"""Deadlines with every service a real process: an external agent's wait and its delegation,
each with a deadline of a few seconds, and the scheduler killed with SIGKILL after they were
scheduled and started again. Each expires exactly once and never before its instant: the wait
as `wait_expired` with its item blocked `deadline passed: <reason>` and one message, the
delegation as `failed` with one result for the parent and the child's WorkItem cancelled."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.integration.stack import SCHEDULER, SETTINGS, Stack, history, of_type, poll

DEADLINE_S = 4


async def agent_tool(
    http: httpx.AsyncClient, agent_id: str, token: str, tool: str, args: dict[str, Any]
) -> dict[str, Any]:
    answer = await http.post(
        f"/v1/agents/{agent_id}/tools/{tool}",
        headers={"Authorization": f"Bearer {token}"},
        json={"args": args},
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


async def picked_item(http: httpx.AsyncClient, agent_id: str, token: str, objective: str) -> str:
    created = await agent_tool(
        http, agent_id, token, "CreateWorkItem", {"objective": objective, "plan_status": "ready"}
    )
    item_id = str(created["work_item"]["id"])
    await agent_tool(http, agent_id, token, "PickWorkItem", {"work_item_id": item_id})
    return item_id


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.timeout(300)  # four service processes on a loaded machine
async def test_a_wait_and_a_delegation_expire_once_at_their_time_across_a_scheduler_kill(
    spawn: Any,
) -> None:
    stack = Stack(spawn)
    await stack.start()
    async with stack.http() as http:
        boss = await http.put("/v1/agents/dl-boss", json={"loop": "external"})
        worker = await http.put("/v1/agents/dl-worker", json={"loop": "external"})
        assert (boss.status_code, worker.status_code) == (201, 201)
        token = boss.json()["agent_token"]
        waited_item = await picked_item(http, "dl-boss", token, "Hear from the reviewer")
        waited = await agent_tool(
            http,
            "dl-boss",
            token,
            "WaitFor",
            {"reason": "the reviewer", "wake": "external", "deadline_s": DEADLINE_S},
        )
        wait_deadline = instant(waited["wait"]["deadline_at"])
        parent_item = await picked_item(http, "dl-boss", token, "Get the logs summarised")
        delegated = await agent_tool(
            http,
            "dl-boss",
            token,
            "DelegateWorkItem",
            {
                "to_agent": "dl-worker",
                "objective": "Summarise the logs",
                "reason": "a specialist",
                "deadline_s": DEADLINE_S,
            },
        )
        delegation = delegated["delegation"]
        delegation_deadline = instant(delegation["deadline_at"])

        async def scheduled() -> bool:
            return len(of_type(await history(http, "dl-boss"), "deadline_scheduled")) == 2

        await poll(scheduled, "both deadlines scheduled")
        stack.services[1].kill9()
        restarted = stack.spawn(*SCHEDULER, **SETTINGS, **stack.env)
        await restarted.wait_ready()

        async def expired() -> list[dict[str, Any]]:
            events = await history(http, "dl-boss")
            done = of_type(events, "wait_expired") and of_type(events, "delegation_finished")
            return events if done else []

        events = await poll(expired, "the wait and the delegation expired")
        # Later events (the result message's nudge) come and go; the expiries do not repeat.
        await poll(lambda: _child_cancelled(http, delegation["child_work_item_id"]), "the child")
        events = await history(http, "dl-boss")
        boss_state = (await http.get("/v1/agents/dl-boss")).json()
        item = (await http.get(f"/v1/agents/dl-boss/work-items/{waited_item}")).json()
        delegations = (await http.get("/v1/agents/dl-boss/delegations")).json()
    (expiry,) = of_type(events, "wait_expired")
    assert instant(expiry["at"]) >= wait_deadline  # never early
    assert expiry["data"]["reason"] == "the reviewer"
    assert item["work_item"]["blocked_by"] == "deadline passed: the reviewer"
    (finished,) = of_type(events, "delegation_finished")
    assert instant(finished["at"]) >= delegation_deadline
    (record,) = delegations["delegations"]
    assert record["status"] == "failed"
    assert "deadline passed" in record["report"]
    assert record["parent_work_item_id"] == parent_item
    # One message each: the deadline's and the failed delegation's result.
    assert boss_state["inbox_pending"] == 2


async def _child_cancelled(http: httpx.AsyncClient, child_item: str) -> bool:
    answer = await http.get(f"/v1/agents/dl-worker/work-items/{child_item}")
    return bool(answer.json()["work_item"]["outcome"] == "cancelled")


@pytest.mark.timeout(300)
async def test_an_approval_nobody_gives_fails_its_attempt_at_the_deadline(spawn: Any) -> None:
    stack = Stack(spawn)
    await stack.start()
    async with stack.http() as http:
        agent = await http.put("/v1/agents/dl-gated", json={"loop": "external"})
        assert agent.status_code == 201, agent.text
        token = agent.json()["agent_token"]
        created = await agent_tool(
            http,
            "dl-gated",
            token,
            "CreateWorkItem",
            {
                "objective": "Ship it",
                "plan_status": "ready",
                "acceptance": [{"kind": "operator_approval", "deadline_s": DEADLINE_S}],
            },
        )
        item_id = created["work_item"]["id"]
        await agent_tool(http, "dl-gated", token, "PickWorkItem", {"work_item_id": item_id})
        completed = await agent_tool(
            http, "dl-gated", token, "CompleteWorkItem", {"work_item_id": item_id}
        )
        assert completed["verification"]["status"] == "verifying"

        async def failed() -> list[dict[str, Any]]:
            events = await history(http, "dl-gated")
            return events if of_type(events, "acceptance_failed") else []

        events = await poll(failed, "the attempt failed at the check's deadline")
        late = await http.post(
            f"/v1/agents/dl-gated/work-items/{item_id}/verdict", json={"passed": True, "attempt": 1}
        )
        item = (await http.get(f"/v1/agents/dl-gated/work-items/{item_id}")).json()["work_item"]
    (verifying,) = of_type(events, "work_item_verifying")
    (verdict,) = of_type(events, "check_verdict_recorded")
    assert verdict["data"]["passed"] is False
    assert verdict["data"]["reason"].startswith("deadline")
    started = instant(verifying["at"])
    assert (instant(verdict["at"]) - started).total_seconds() >= DEADLINE_S  # never early
    assert late.status_code == 200  # an older attempt's verdict changes nothing
    assert (item["state"], item["verification"]["status"]) == ("open", "failed")
