"""Delegation over HTTP against the real ledger process: DelegateWorkItem and CancelDelegation on
the tools route with every refusal and its status, the delegations route in both directions, the
child's WorkItem with its origin, and the result reaching the delegating agent."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from shared.store.readmodel import ReadModel
from tests.integration.ingress.conftest import Api

WITHIN = 60.0
"""An upper bound on waiting for the relay's delivery, not a latency assertion."""


async def eventually(check: Callable[[], Awaitable[Any]]) -> Any:
    deadline = time.monotonic() + WITHIN
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, "not delivered in time"
        await asyncio.sleep(0.05)


async def focused_item(api: Api, agent_id: str) -> str:
    created = await api.tool(agent_id, "CreateWorkItem", {"objective": "Write the report"})
    item = str(created.json()["result"]["work_item"]["id"])
    picked = await api.tool(agent_id, "PickWorkItem", {"work_item_id": item})
    assert picked.status_code == 200, picked.text
    return item


async def delegate(api: Api, agent_id: str, to: str, objective: str = "Check the figures") -> Any:
    return await api.tool(
        agent_id,
        "DelegateWorkItem",
        {"to_agent": to, "objective": objective, "reason": "needs a second pair of eyes"},
    )


async def delegations(api: Api, agent_id: str, direction: str | None = None) -> list[Any]:
    params = {"direction": direction} if direction else {}
    answer = await api.http.get(
        f"/v1/agents/{agent_id}/delegations", params=params, headers=api.operator
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["delegations"])


async def child_item(api: Api, agent_id: str) -> dict[str, Any]:
    async def found() -> Any:
        answer = await api.http.get(f"/v1/agents/{agent_id}/work-items", headers=api.operator)
        items = [i for i in answer.json()["work_items"] if i.get("delegated_from")]
        return items[0] if items else None

    item: dict[str, Any] = await eventually(found)
    return item


async def test_delegation_round_trip_over_http(api: Api, reads: ReadModel) -> None:
    boss = (await api.create_agent())["agent_id"]
    worker = (await api.create_agent())["agent_id"]
    root = await focused_item(api, boss)
    answer = await delegate(api, boss, worker)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    dlg = result["delegation"]["id"]
    assert dlg.startswith("dlg_")
    assert (result["wait"]["wake"], result["wait"]["resource"]) == ("task_result", dlg)
    child = await child_item(api, worker)
    origin = child["delegated_from"]
    assert (origin["delegation_id"], origin["agent_id"], origin["work_item_id"]) == (
        dlg,
        boss,
        root,
    )
    (out,) = await delegations(api, boss, "out")
    assert (out["status"], out["direction"], out["child_agent_id"]) == ("running", "out", worker)
    assert await delegations(api, boss, "in") == []
    (incoming,) = await delegations(api, worker)
    assert incoming["direction"] == "in"
    done = await api.tool(
        worker,
        "CompleteWorkItem",
        {"work_item_id": child["id"]},
        assistant_text="The figures add up.",
    )
    assert done.status_code == 200, done.text

    async def succeeded() -> Any:
        (record,) = await delegations(api, boss)
        return record if record["status"] == "succeeded" else None

    record = await eventually(succeeded)
    assert record["report"] == "The figures add up."
    messages = [m for m in await reads.inbox(boss) if m.origin == "task_result"]
    assert [(m.delegation_id, m.status, m.report) for m in messages] == [
        (dlg, "succeeded", "The figures add up.")
    ]
    (wait,) = [w for w in await reads.active_waits(boss) if w.resource == dlg]
    assert wait.trigger_count == 1


async def test_refusals_have_their_kinds_and_statuses(api: Api) -> None:
    a = (await api.create_agent())["agent_id"]
    b = (await api.create_agent())["agent_id"]
    await api.tool(a, "CreateWorkItem", {"objective": "Nothing picked"})
    no_current = await delegate(api, a, b)
    assert (no_current.status_code, no_current.json()["error"]["kind"]) == (
        409,
        "no_current_work_item",
    )
    await focused_item(api, a)
    missing = await delegate(api, a, "nobody-here")
    assert (missing.status_code, missing.json()["error"]["kind"]) == (404, "agent_not_found")
    itself = await delegate(api, a, a)
    assert (itself.status_code, itself.json()["error"]["kind"]) == (409, "delegation_cycle")
    unknown = await api.tool(
        a, "CancelDelegation", {"delegation_id": "dlg_nothing", "reason": "stop"}
    )
    assert (unknown.status_code, unknown.json()["error"]["kind"]) == (404, "delegation_not_found")
    bad = await api.tool(a, "DelegateWorkItem", {"to_agent": b, "objective": "x"})
    assert (bad.status_code, bad.json()["error"]["kind"]) == (400, "invalid_tool_input")


async def test_cycle_and_depth_down_a_chain(api: Api) -> None:
    agents = [(await api.create_agent())["agent_id"] for _ in range(6)]
    await focused_item(api, agents[0])
    for parent, child in itertools.pairwise(agents[:5]):
        answer = await delegate(api, parent, child)
        assert answer.status_code == 200, answer.text
        item = await child_item(api, child)
        await api.tool(child, "PickWorkItem", {"work_item_id": item["id"]})
    assert (await child_item(api, agents[4]))["delegated_from"]["chain"] == agents[:4]
    back = await delegate(api, agents[4], agents[1])
    assert (back.status_code, back.json()["error"]["kind"]) == (409, "delegation_cycle")
    deep = await delegate(api, agents[4], agents[5])
    assert (deep.status_code, deep.json()["error"]["kind"]) == (409, "delegation_too_deep")


async def test_cancel_delegation_cancels_the_child_and_not_the_parent_wait_silently(
    api: Api, reads: ReadModel
) -> None:
    boss = (await api.create_agent())["agent_id"]
    worker = (await api.create_agent())["agent_id"]
    await focused_item(api, boss)
    dlg = (await delegate(api, boss, worker)).json()["result"]["delegation"]["id"]
    child = await child_item(api, worker)
    cancelled = await api.tool(boss, "CancelDelegation", {"delegation_id": dlg, "reason": "no"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["result"]["delegation"]["status"] == "cancelled"

    async def child_cancelled() -> Any:
        answer = await api.http.get(
            f"/v1/agents/{worker}/work-items/{child['id']}", headers=api.operator
        )
        view = answer.json()["work_item"]
        return view if view["outcome"] == "cancelled" else None

    await eventually(child_cancelled)
    assert not [m for m in await reads.inbox(boss) if m.origin == "task_result"]
    assert not [w for w in await reads.active_waits(boss) if w.resource == dlg]


async def test_reviewer_agent_check_is_decided_by_the_reviewers_verdict(api: Api) -> None:
    writer = (await api.create_agent())["agent_id"]
    reviewer = (await api.create_agent())["agent_id"]
    created = await api.tool(
        writer,
        "CreateWorkItem",
        {
            "objective": "Write the release note",
            "acceptance": [{"kind": "reviewer_agent", "agent_id": reviewer}],
        },
    )
    assert created.status_code == 200, created.text
    item = created.json()["result"]["work_item"]["id"]
    done = await api.tool(
        writer, "CompleteWorkItem", {"work_item_id": item}, assistant_text="1.2 is faster."
    )
    assert done.status_code == 200, done.text
    assert done.json()["result"]["verification"]["status"] == "verifying"
    review = await child_item(api, reviewer)
    assert review["delegated_from"]["review_of"]["work_item_id"] == item
    ordinary = await focused_item(api, reviewer)
    refused = await api.tool(
        reviewer, "SubmitVerdict", {"work_item_id": ordinary, "passed": True, "reason": "ok"}
    )
    assert (refused.status_code, refused.json()["error"]["kind"]) == (400, "invalid_tool_input")
    verdict = await api.tool(
        reviewer,
        "SubmitVerdict",
        {"work_item_id": review["id"], "passed": True, "reason": "accurate and short"},
    )
    assert verdict.status_code == 200, verdict.text

    async def finished() -> Any:
        answer = await api.http.get(f"/v1/agents/{writer}/work-items/{item}", headers=api.operator)
        view = answer.json()["work_item"]
        return view if view["outcome"] == "done" else None

    view = await eventually(finished)
    assert view["result_summary"] == "1.2 is faster."
    assert view["verification"]["checks"][0]["decided_by"] == "reviewer"


async def test_a_reviewer_agent_check_must_name_another_existing_agent(api: Api) -> None:
    writer = (await api.create_agent())["agent_id"]
    reviewer = (await api.create_agent())["agent_id"]
    item = await focused_item(api, writer)  # the writer's slice is now in the ledger's cache

    async def set_reviewer(agent_id: str) -> Any:
        checks = [{"kind": "reviewer_agent", "agent_id": agent_id}]
        args = {"work_item_id": item, "acceptance": checks}
        return await api.tool(writer, "UpdateWorkItem", args)

    missing = await set_reviewer("nobody-here")
    assert missing.status_code == 404, missing.text
    error = missing.json()["error"]
    assert (error["kind"], error["details"]) == ("agent_not_found", {"agent_id": "nobody-here"})
    itself = await set_reviewer(writer)
    assert (itself.status_code, itself.json()["error"]["kind"]) == (409, "delegation_cycle")
    created = await api.tool(
        writer,
        "CreateWorkItem",
        {"objective": "x", "acceptance": [{"kind": "reviewer_agent", "agent_id": "nobody-here"}]},
    )
    assert created.status_code == 404, created.text
    accepted = await set_reviewer(reviewer)
    assert accepted.status_code == 200, accepted.text
    answer = await api.http.get(f"/v1/agents/{writer}/work-items/{item}", headers=api.operator)
    assert answer.json()["work_item"]["acceptance"][0]["agent_id"] == reviewer


async def test_a_delegations_checks_travel_with_the_delegated_item(api: Api) -> None:
    created = await api.create_agent()
    boss, token = created["agent_id"], created["agent_token"]
    worker = (await api.create_agent())["agent_id"]
    await focused_item(api, boss)

    async def delegate_as_boss(checks: list[dict[str, str]]) -> Any:
        args = {"to_agent": worker, "objective": "Check the figures", "reason": "second opinion"}
        return await api.http.post(
            f"/v1/agents/{boss}/tools/DelegateWorkItem",
            headers={"Authorization": f"Bearer {token}"},
            json={"args": {**args, "acceptance": checks}},
        )

    refused = await delegate_as_boss([{"kind": "reviewer_agent", "agent_id": "nobody-here"}])
    assert (refused.status_code, refused.json()["error"]["kind"]) == (404, "agent_not_found")
    checks = [{"kind": "operator_approval"}, {"kind": "reviewer_agent", "agent_id": boss}]
    answer = await delegate_as_boss(checks)
    assert answer.status_code == 200, answer.text
    child = await child_item(api, worker)
    assert [(ch["kind"], ch["set_by"]) for ch in child["acceptance"]] == [
        ("operator_approval", "delegator"),
        ("reviewer_agent", "delegator"),
    ]
