"""Outcomes over HTTP against the real ledger: CancelWorkItem on the tools route ends an item
cancelled (waits cancelled, focus released, nothing promoted) and CompleteWorkItem ends it done."""

from __future__ import annotations

from typing import Any

from tests.integration.ingress.conftest import Api


async def create_item(api: Api, agent_id: str) -> str:
    answer = await api.tool(agent_id, "CreateWorkItem", {"objective": "ship it"})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"]["work_item"]["id"])


async def get_item(api: Api, agent_id: str, item: str) -> dict[str, Any]:
    answer = await api.http.get(f"/v1/agents/{agent_id}/work-items/{item}", headers=api.operator)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_cancel_tool_ends_the_item_cancelled(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    item = await create_item(api, agent_id)
    picked = await api.tool(agent_id, "PickWorkItem", {"work_item_id": item, "reason": "go"})
    assert picked.status_code == 200, picked.text
    waited = await api.tool(
        agent_id, "WaitFor", {"reason": "build", "wake": "external", "work_item_id": item}
    )
    assert waited.status_code == 200, waited.text
    assert (await get_item(api, agent_id, item))["work_item"]["outcome"] is None
    cancelled = await api.tool(
        agent_id, "CancelWorkItem", {"work_item_id": item, "reason": "Not wanted any more"}
    )
    assert cancelled.status_code == 200, cancelled.text
    read = await get_item(api, agent_id, item)
    assert read["current_work_item_id"] is None
    view = read["work_item"]
    assert (view["state"], view["outcome"], view["result_summary"]) == (
        "completed",
        "cancelled",
        None,
    )
    assert view["active_waits"] == []
    briefs = await api.http.get(
        f"/v1/agents/{agent_id}/briefs", params={"work_item_id": item}, headers=api.operator
    )
    assert briefs.json() == {"briefs": [], "delivery_summaries": [], "next_cursor": None}
    again = await api.tool(agent_id, "CancelWorkItem", {"work_item_id": item, "reason": "again"})
    assert (again.status_code, again.json()["error"]["kind"]) == (409, "work_item_not_open")


async def test_complete_tool_ends_the_item_done(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    item = await create_item(api, agent_id)
    done = await api.tool(agent_id, "CompleteWorkItem", {"work_item_id": item})
    assert done.status_code == 200, done.text
    assert (await get_item(api, agent_id, item))["work_item"]["outcome"] == "done"
