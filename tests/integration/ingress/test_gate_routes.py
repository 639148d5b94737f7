"""The acceptance gate over HTTP against the real ledger: the operator's cancel and verdict
routes, who set a check (the token decides), the tools refused while an item is verifying, the
why-not (the item's and the agent's) naming the awaited checks, and the report promoted only
after the pass, exactly once."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.ingress.conftest import Api


async def agent_tool(
    api: Api, agent_id: str, token: str, tool: str, args: dict[str, Any], **extra: Any
) -> httpx.Response:
    return await api.http.post(
        f"/v1/agents/{agent_id}/tools/{tool}",
        headers={"Authorization": f"Bearer {token}"},
        json={"args": args, **extra},
    )


async def create_item(api: Api, agent_id: str, **args: Any) -> str:
    answer = await api.tool(agent_id, "CreateWorkItem", {"objective": "ship it", **args})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"]["work_item"]["id"])


async def view(api: Api, agent_id: str, item: str) -> dict[str, Any]:
    answer = await api.http.get(f"/v1/agents/{agent_id}/work-items/{item}", headers=api.operator)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()["work_item"]
    return body


async def briefs(api: Api, agent_id: str, item: str) -> dict[str, Any]:
    answer = await api.http.get(
        f"/v1/agents/{agent_id}/briefs", params={"work_item_id": item}, headers=api.operator
    )
    body: dict[str, Any] = answer.json()
    return body


async def verdict(api: Api, agent_id: str, item: str, **body: Any) -> httpx.Response:
    return await api.http.post(
        f"/v1/agents/{agent_id}/work-items/{item}/verdict", headers=api.operator, json=body
    )


async def test_operator_cancel_route_answers_the_view(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    item = await create_item(api, agent_id)
    url = f"/v1/agents/{agent_id}/work-items/{item}/cancel"
    answer = await api.http.post(url, headers=api.operator, json={"reason": "Not wanted"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["id"], body["state"], body["outcome"]) == (item, "completed", "cancelled")
    again = await api.http.post(url, headers=api.operator, json={"reason": "again"})
    assert (again.status_code, again.json()["error"]["kind"]) == (409, "work_item_not_open")
    blank = await api.http.post(url, headers=api.operator, json={"reason": " "})
    assert blank.status_code == 400


async def test_an_agent_cannot_remove_the_operators_check(api: Api) -> None:
    created = await api.create_agent()
    agent_id, token = created["agent_id"], created["agent_token"]
    item = await create_item(api, agent_id, acceptance=[{"kind": "operator_approval"}])
    assert (await view(api, agent_id, item))["acceptance"] == [
        {"kind": "operator_approval", "set_by": "operator", "deadline_s": None}
    ]
    removed = await agent_tool(
        api, agent_id, token, "UpdateWorkItem", {"work_item_id": item, "acceptance": []}
    )
    assert removed.status_code == 403, removed.text
    assert removed.json()["error"]["kind"] == "work_item_access_denied"
    added = await agent_tool(
        api,
        agent_id,
        token,
        "UpdateWorkItem",
        {
            "work_item_id": item,
            "acceptance": [{"kind": "operator_approval"}, {"kind": "todos_done"}],
        },
    )
    assert added.status_code == 200, added.text
    checks = (await view(api, agent_id, item))["acceptance"]
    assert [c["set_by"] for c in checks] == ["operator", "agent"]


async def test_verification_refuses_tools_and_promotes_only_after_the_pass(api: Api) -> None:
    created = await api.create_agent()
    agent_id, token = created["agent_id"], created["agent_token"]
    item = await create_item(api, agent_id, acceptance=[{"kind": "operator_approval"}])
    done = await agent_tool(
        api, agent_id, token, "CompleteWorkItem", {"work_item_id": item}, assistant_text="Shipped."
    )
    assert done.status_code == 200, done.text
    seen = await view(api, agent_id, item)
    assert (seen["state"], seen["scheduling_state"], seen["readiness"]) == (
        "open",
        "waiting_system",
        "blocked",
    )
    assert seen["verification"]["status"] == "verifying"
    assert seen["verification"]["report_candidate"] == "Shipped."
    for tool, args in (
        ("UpdateWorkItem", {"work_item_id": item, "objective": "x"}),
        ("PickWorkItem", {"work_item_id": item}),
    ):
        refused = await agent_tool(api, agent_id, token, tool, args)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["kind"] == "work_item_verifying"
    why = await api.http.get(f"/v1/agents/{agent_id}/work-items/{item}/why", headers=api.operator)
    assert why.json()["reason"] == "verifying"
    assert why.json()["awaiting"] == ["operator_approval"]
    agent = (await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)).json()
    assert agent["why_not_running"] == {
        "kind": "verifying",
        "work_items": [{"work_item_id": item, "attempt": 1, "awaiting": ["operator_approval"]}],
    }
    assert await briefs(api, agent_id, item) == {
        "briefs": [],
        "delivery_summaries": [],
        "next_cursor": None,
    }
    approved = await verdict(api, agent_id, item, passed=True, note="looks right")
    assert approved.status_code == 200, approved.text
    assert (approved.json()["state"], approved.json()["outcome"]) == ("completed", "done")
    assert approved.json()["result_summary"] == "Shipped."
    again = await verdict(api, agent_id, item, passed=True)
    assert (again.status_code, again.json()["error"]["kind"]) == (409, "work_item_not_verifying")
    agent = (await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)).json()
    assert agent["why_not_running"] is None
    promoted = await briefs(api, agent_id, item)
    assert [b["text"] for b in promoted["briefs"]] == ["Shipped."]
    assert len(promoted["delivery_summaries"]) == 1


async def test_a_rejection_leaves_no_result_and_an_old_attempt_counts_for_nothing(
    api: Api,
) -> None:
    created = await api.create_agent()
    agent_id, token = created["agent_id"], created["agent_token"]
    item = await create_item(api, agent_id, acceptance=[{"kind": "operator_approval"}])
    args = {"work_item_id": item}
    await agent_tool(api, agent_id, token, "CompleteWorkItem", args, assistant_text="v1")
    for loose in ("yes", "no", 1):
        unclear = await verdict(api, agent_id, item, passed=loose)
        assert unclear.status_code == 400, unclear.text
        assert unclear.json()["error"]["details"]["errors"][0]["loc"] == ["body", "passed"]
    # A number past what the wire codec holds is a 400 naming it (it was a 500).
    huge = await verdict(api, agent_id, item, passed=False, attempt=112222523863450118524489433088)
    assert huge.status_code == 400, huge.text
    assert huge.json()["error"]["details"]["errors"][0]["loc"] == ["body", "attempt"]
    rejected = await verdict(api, agent_id, item, passed=False, note="missing the changelog")
    assert rejected.status_code == 200, rejected.text
    body = rejected.json()
    assert (body["state"], body["scheduling_state"]) == ("open", "runnable")
    assert body["verification"]["status"] == "failed"
    assert body["verification"]["checks"][0]["reason"] == "missing the changelog"
    assert await briefs(api, agent_id, item) == {
        "briefs": [],
        "delivery_summaries": [],
        "next_cursor": None,
    }
    await agent_tool(api, agent_id, token, "CompleteWorkItem", args, assistant_text="v2")
    stale = await verdict(api, agent_id, item, passed=True, attempt=1)
    assert stale.status_code == 200, stale.text
    assert stale.json()["verification"]["status"] == "verifying"
    assert stale.json()["verification"]["attempt"] == 2
    passed = await verdict(api, agent_id, item, passed=True, attempt=2)
    assert passed.json()["outcome"] == "done"
    assert [b["text"] for b in (await briefs(api, agent_id, item))["briefs"]] == ["v2"]


async def test_operator_put_down_route_releases_focus_once(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    item = await create_item(api, agent_id)
    picked = await api.tool(agent_id, "PickWorkItem", {"work_item_id": item})
    assert picked.status_code == 200, picked.text
    url = f"/v1/agents/{agent_id}/work-items/{item}/put-down"
    answer = await api.http.post(url, headers=api.operator, json={"reason": "operator: org edit"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["id"], body["is_current"], body["state"], body["revision"]) == (
        item,
        False,
        "open",
        1,
    )
    agent = (await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)).json()
    assert agent["current_work_item_id"] is None
    again = await api.http.post(url, headers=api.operator, json={"reason": "again"})
    assert (again.status_code, again.json()["error"]["kind"]) == (409, "no_current_work_item")
    events = (await api.http.get(f"/v1/agents/{agent_id}/history", headers=api.operator)).json()
    released = [e for e in events["events"] if e["type"] == "work_item_focus_released"]
    assert [e["data"] for e in released] == [{"cause": "put_down", "reason": "operator: org edit"}]


async def test_put_down_route_is_the_operators_only(api: Api) -> None:
    created = await api.create_agent()
    agent_id, token = created["agent_id"], created["agent_token"]
    item = await create_item(api, agent_id)
    url = f"/v1/agents/{agent_id}/work-items/{item}/put-down"
    answer = await api.http.post(
        url, headers={"Authorization": f"Bearer {token}"}, json={"reason": "mine"}
    )
    assert answer.status_code == 403


async def test_an_agents_webhook_off_the_allow_list_is_400_and_stores_nothing(api: Api) -> None:
    """The module's ledger runs without LONGRUN_WEBHOOK_ALLOW: agents may set no webhook."""
    created = await api.create_agent(loop="external")
    agent_id, token = created["agent_id"], created["agent_token"]
    for url in ("http://127.0.0.1:9/x", "http://169.254.169.254/", "http://10.0.0.1/"):
        check = {"kind": "webhook", "url": url}
        refused = await agent_tool(
            api, agent_id, token, "CreateWorkItem", {"objective": "x", "acceptance": [check]}
        )
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["kind"] == "webhook_not_allowed"
        assert error["details"] == {"url": url}
        assert "LONGRUN_WEBHOOK_ALLOW" in error["message"]
    listed = await api.http.get(f"/v1/agents/{agent_id}/work-items", headers=api.operator)
    assert listed.status_code == 200, listed.text
    assert listed.json()["work_items"] == []
    # The operator's check is not limited.
    await create_item(api, agent_id, acceptance=[{"kind": "webhook", "url": "http://10.0.0.1/"}])
