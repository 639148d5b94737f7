"""Pause, resume and retire over HTTP against the real ledger: the agent's view in the answer,
what a paused agent still takes (messages, the operator's own calls) and refuses (its own tool
calls, 409 agent_paused), what a retirement cancels (every open WorkItem, its waits) and refuses
from then on (the token 401, callbacks 403, a PUT, a message or a pause 409 agent_retired), and
bad input naming the field."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.ingress.conftest import Api
from tests.integration.ingress.test_gate_routes import agent_tool, create_item, view


async def control(api: Api, agent_id: str, verb: str, **body: Any) -> httpx.Response:
    return await api.http.post(
        f"/v1/agents/{agent_id}/{verb}",
        headers=api.operator,
        json=None if verb == "resume" else body,
    )


async def test_a_paused_agent_takes_messages_but_not_its_own_tool_calls(api: Api) -> None:
    created = await api.create_agent(loop="external")
    agent_id, token = created["agent_id"], created["agent_token"]
    await create_item(api, agent_id)
    paused = await control(api, agent_id, "pause", reason="it loops")
    assert paused.status_code == 200, paused.text
    body = paused.json()
    assert body["posture"] == "paused"
    assert body["why_not_running"]["kind"] == "paused"
    assert body["why_not_running"]["reason"] == "it loops"
    refused = await agent_tool(api, agent_id, token, "CreateWorkItem", {"objective": "more"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["kind"] == "agent_paused"
    said = await api.http.post(
        f"/v1/agents/{agent_id}/messages", headers=api.operator, json={"text": "still there?"}
    )
    assert said.status_code == 202, said.text
    await create_item(api, agent_id)  # the operator still acts
    again = await control(api, agent_id, "pause", reason="still looping")
    assert again.status_code == 200
    assert again.json()["why_not_running"]["reason"] == "it loops"  # a repeat changes nothing
    resumed = await control(api, agent_id, "resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["posture"] != "paused"
    assert resumed.json()["why_not_running"] is None or (
        resumed.json()["why_not_running"]["kind"] != "paused"
    )
    allowed = await agent_tool(api, agent_id, token, "CreateWorkItem", {"objective": "more"})
    assert allowed.status_code == 200, allowed.text
    history = await api.http.get(f"/v1/agents/{agent_id}/history", headers=api.operator)
    types = [event["type"] for event in history.json()["events"]]
    assert types.count("agent_paused") == 1
    assert types.count("agent_resumed") == 1


async def test_retire_cancels_the_open_work_and_refuses_the_agent_from_then_on(api: Api) -> None:
    created = await api.create_agent(loop="external")
    agent_id, token = created["agent_id"], created["agent_token"]
    first = await create_item(api, agent_id)
    second = await create_item(api, agent_id, plan_status="ready")
    picked = await agent_tool(api, agent_id, token, "PickWorkItem", {"work_item_id": second})
    assert picked.status_code == 200, picked.text
    waited = await agent_tool(
        api, agent_id, token, "WaitFor", {"reason": "the reviewer", "wake": "external"}
    )
    assert waited.status_code == 200, waited.text
    retired = await control(api, agent_id, "retire", reason="replaced by v2")
    assert retired.status_code == 200, retired.text
    assert retired.json()["posture"] == "stopped"
    assert retired.json()["why_not_running"]["kind"] == "retired"
    for item in (first, second):
        seen = await view(api, agent_id, item)
        assert (seen["state"], seen["outcome"]) == ("completed", "cancelled")
    # The agent's token opens nothing; its callback URL triggers nothing.
    listed = await agent_tool(api, agent_id, token, "ListWorkItems", {})
    assert listed.status_code == 401, listed.text
    called = await api.http.post(created["callback_url"], json={"late": True})
    assert called.status_code == 403, called.text
    put = await api.http.put(f"/v1/agents/{agent_id}", headers=api.operator, json={})
    assert (put.status_code, put.json()["error"]["kind"]) == (409, "agent_retired")
    said = await api.http.post(
        f"/v1/agents/{agent_id}/messages", headers=api.operator, json={"text": "hello?"}
    )
    assert (said.status_code, said.json()["error"]["kind"]) == (409, "agent_retired")
    paused = await control(api, agent_id, "pause", reason="too late")
    assert (paused.status_code, paused.json()["error"]["kind"]) == (409, "agent_retired")
    history = await api.http.get(f"/v1/agents/{agent_id}/history", headers=api.operator)
    events = history.json()["events"]
    retired_events = [e for e in events if e["type"] == "agent_retired"]
    assert len(retired_events) == 1
    assert sorted(retired_events[0]["data"]["cancelled_work_items"]) == sorted([first, second])
    assert any(e["type"] == "wait_cancelled" for e in events)


async def test_bad_input_on_the_control_routes_names_the_field(api: Api) -> None:
    created = await api.create_agent()
    agent_id, token = created["agent_id"], created["agent_token"]
    for body, field in (
        ({}, "reason"),
        ({"reason": ""}, "reason"),
        ({"reason": "x", "interrupt": "yes"}, "interrupt"),
        ({"reason": "x" * 2001}, "reason"),
        ({"reason": "x", "extra": 1}, "extra"),
    ):
        answer = await control(api, agent_id, "pause", **body)
        assert answer.status_code == 400, (body, answer.text)
        assert field in answer.text, (body, answer.text)
    answer = await control(api, agent_id, "retire")
    assert answer.status_code == 400
    assert "reason" in answer.text
    missing = await control(api, "ag-nobody", "pause", reason="x")
    assert missing.status_code == 404
    as_agent = await api.http.post(
        f"/v1/agents/{agent_id}/pause",
        headers={"Authorization": f"Bearer {token}"},
        json={"reason": "x"},
    )
    assert as_agent.status_code == 403
    # Nothing changed.
    state = await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)
    assert state.json()["posture"] != "paused"
