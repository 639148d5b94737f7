"""Every route of docs/contract.md §6 with its auth rules and statuses, against a real ledger
process: 401/403 for missing, unknown and other-agent tokens, 404 for unknown agents and work
items, 400 for malformed input, 413 before parsing, 429 per token, the tool route's statuses by
error kind, and the health, metrics and schema routes."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from shared.agent_home import resolve_in_home
from shared.file_tools import FileToolName
from shared.runtime import new_id
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from tests.integration.ingress.conftest import Api, new_agent_id


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def kind(answer: httpx.Response) -> str:
    return str(answer.json()["error"]["kind"])


async def create_item(api: Api, agent_id: str, objective: str = "ship it", **args: Any) -> str:
    answer = await api.tool(agent_id, "CreateWorkItem", {"objective": objective, **args})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"]["work_item"]["id"])


# ---- auth
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/agents"),
        ("PUT", "/v1/agents/someone"),
        ("GET", "/v1/agents/someone/work-items"),
        ("POST", "/v1/agents/someone/tools/ListWorkItems"),
        ("GET", "/v1/agents/someone/history"),
    ],
)
async def test_missing_token_is_401_unauthorized(api: Api, method: str, path: str) -> None:
    answer = await api.http.request(method, path, json={"args": {}})
    assert answer.status_code == 401
    assert kind(answer) == "unauthorized"
    assert answer.headers["www-authenticate"] == "Bearer"


async def test_unknown_and_forged_tokens_are_401(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    for token in ("nope", f"{agent_id}~forged-secret-forged-secret", "ghost~0123456789abcdefghij"):
        answer = await api.http.get(f"/v1/agents/{agent_id}/work-items", headers=bearer(token))
        assert answer.status_code == 401, token
        assert kind(answer) == "unauthorized"
    basic = await api.http.get("/v1/agents", headers={"Authorization": "Basic eDp5"})
    assert basic.status_code == 401


async def test_agent_token_is_forbidden_on_operator_routes(api: Api) -> None:
    created = await api.create_agent()
    agent_id, token = created["agent_id"], created["agent_token"]
    for method, path in [
        ("GET", "/v1/agents"),
        ("PUT", f"/v1/agents/{agent_id}"),
        ("GET", f"/v1/agents/{agent_id}"),
        ("GET", f"/v1/agents/{agent_id}/history"),
        ("GET", f"/v1/agents/{agent_id}/history/verify"),
    ]:
        answer = await api.http.request(method, path, headers=bearer(token))
        assert answer.status_code == 403, path
        assert kind(answer) == "forbidden"
    message = await api.http.post(
        f"/v1/agents/{agent_id}/messages", headers=bearer(token), json={"text": "hi"}
    )
    assert message.status_code == 403


async def test_another_agents_token_is_forbidden_on_agent_routes(api: Api) -> None:
    a = await api.create_agent()
    b = await api.create_agent()
    foreign = bearer(a["agent_token"])
    base = f"/v1/agents/{b['agent_id']}"
    answers = [
        await api.http.get(f"{base}/work-items", headers=foreign),
        await api.http.get(f"{base}/work-items/wi_x", headers=foreign),
        await api.http.get(f"{base}/briefs", headers=foreign),
        await api.http.post(f"{base}/tools/ListWorkItems", headers=foreign, json={"args": {}}),
        await api.http.post(
            f"{base}/tasks/t1/result", headers=foreign, json={"status": "succeeded", "summary": ""}
        ),
    ]
    assert [a.status_code for a in answers] == [403] * 5
    assert {kind(a) for a in answers} == {"forbidden"}


async def test_own_agent_token_is_accepted_on_agent_routes(api: Api) -> None:
    created = await api.create_agent()
    own = bearer(created["agent_token"])
    base = f"/v1/agents/{created['agent_id']}"
    tool = await api.http.post(
        f"{base}/tools/CreateWorkItem", headers=own, json={"args": {"objective": "mine"}}
    )
    assert tool.status_code == 200, tool.text
    listed = await api.http.get(f"{base}/work-items", headers=own)
    assert listed.status_code == 200
    assert listed.json()["returned"] == 1
    assert (await api.http.get(f"{base}/briefs", headers=own)).status_code == 200


async def test_unknown_agent_is_404_for_the_operator(api: Api) -> None:
    ghost = new_agent_id()
    for method, path, body in [
        ("GET", f"/v1/agents/{ghost}", None),
        ("GET", f"/v1/agents/{ghost}/work-items", None),
        ("GET", f"/v1/agents/{ghost}/history", None),
        ("POST", f"/v1/agents/{ghost}/messages", {"text": "hello"}),
        ("POST", f"/v1/agents/{ghost}/tools/ListWorkItems", {"args": {}}),
    ]:
        answer = await api.http.request(method, path, headers=api.operator, json=body)
        assert answer.status_code == 404, path
        assert kind(answer) == "agent_not_found"


# ---- agents
async def test_put_agent_creates_once_and_shows_the_token_once(api: Api) -> None:
    agent_id = new_agent_id()
    first = await api.http.put(f"/v1/agents/{agent_id}", headers=api.operator)
    assert first.status_code == 201
    body = first.json()
    assert set(body) == {
        "agent_id",
        "loop",
        "agent_token",
        "callback_url",
        "spec",
        "spec_version",
    }
    assert body["loop"] == "builtin"
    assert body["agent_token"].startswith(f"{agent_id}~")
    assert body["callback_url"].startswith("http://127.0.0.1:8080/v1/callbacks/")
    again = await api.http.put(
        f"/v1/agents/{agent_id}", headers=api.operator, json={"loop": "builtin"}
    )
    assert again.status_code == 200
    assert "agent_token" not in again.json()
    assert again.json()["loop"] == "builtin"
    assert again.json()["callback_url"] == body["callback_url"]


async def test_put_agent_with_external_loop(api: Api) -> None:
    created = await api.create_agent(loop="external")
    state = await api.http.get(f"/v1/agents/{created['agent_id']}", headers=api.operator)
    assert state.json()["loop"] == "external"


@pytest.mark.parametrize(
    ("agent_id", "body"),
    [
        ("bad id", None),
        ("-starts-with-dash", None),
        ("ok-id", b'{"loop": "sideways"}'),
        ("ok-id", b'{"loop": "builtin", "extra": 1}'),
        ("ok-id", b"{not json"),
        ("ok-id", b"[1, 2]"),
    ],
)
async def test_put_agent_with_malformed_input_is_400(
    api: Api, agent_id: str, body: bytes | None
) -> None:
    headers = {**api.operator, "content-type": "application/json"}
    answer = await api.http.put(f"/v1/agents/{agent_id}", headers=headers, content=body)
    assert answer.status_code == 400
    assert kind(answer) == "invalid_request"


async def test_list_and_get_agents(api: Api) -> None:
    created = await api.create_agent()
    listed = await api.http.get("/v1/agents", headers=api.operator)
    assert {
        "agent_id": created["agent_id"],
        "loop": "builtin",
        "posture": "dormant",
        "current_work_item_id": None,
        "labels": {},
    } in listed.json()["agents"]
    await create_item(api, created["agent_id"])
    state = (await api.http.get(f"/v1/agents/{created['agent_id']}", headers=api.operator)).json()
    assert state["counts"] == {
        "runnable": 1,
        "waiting_for_operator": 0,
        "blocked": 0,
        "completed": 0,
    }
    assert state["wake_budget"]["limit"] == 25


# ---- messages and task results
async def test_message_is_accepted_and_triggers_the_operator_wait(
    api: Api, reads: ReadModel
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    item = await create_item(api, agent_id)
    wait = await api.tool(
        agent_id,
        "WaitFor",
        {"reason": "which colour?", "wake": "operator_input", "work_item_id": item},
    )
    assert wait.status_code == 200
    answer = await api.http.post(
        f"/v1/agents/{agent_id}/messages", headers=api.operator, json={"text": "blue"}
    )
    assert answer.status_code == 202
    assert answer.json()["message_id"].startswith("msg_")
    [active] = await reads.active_waits(agent_id)
    assert active.trigger_count == 1
    assert [m.text for m in await reads.inbox(agent_id)] == ["blue"]


async def test_a_message_retried_with_its_idempotency_key_is_applied_once(
    api: Api, reads: ReadModel
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    url = f"/v1/agents/{agent_id}/messages"
    keyed = {**api.operator, "Idempotency-Key": "retry-1"}
    first = await api.http.post(url, headers=keyed, json={"text": "blue"})
    again = await api.http.post(url, headers=keyed, json={"text": "blue"})
    other = await api.http.post(url, headers=api.operator, json={"text": "blue"})
    assert [first.status_code, again.status_code, other.status_code] == [202, 202, 202]
    assert first.json()["message_id"] == again.json()["message_id"]
    assert other.json()["message_id"] != first.json()["message_id"]
    assert [m.text for m in await reads.inbox(agent_id)] == ["blue", "blue"]
    too_long = {**api.operator, "Idempotency-Key": "k" * 201}
    answer = await api.http.post(url, headers=too_long, json={"text": "blue"})
    assert answer.status_code == 400
    assert kind(answer) == "invalid_request"


@pytest.mark.parametrize(
    "body",
    [{"text": "   "}, {}, {"text": "x", "work_item_id": "not-an-id"}, {"text": "x", "extra": 1}],
)
async def test_malformed_message_is_400(api: Api, body: dict[str, Any]) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    answer = await api.http.post(f"/v1/agents/{agent_id}/messages", headers=api.operator, json=body)
    assert answer.status_code == 400
    assert kind(answer) == "invalid_request"


async def test_message_for_an_unknown_work_item_is_404(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    answer = await api.http.post(
        f"/v1/agents/{agent_id}/messages",
        headers=api.operator,
        json={"text": "x", "work_item_id": "wi_" + "0" * 26},
    )
    assert answer.status_code == 404
    assert kind(answer) == "work_item_not_found"


async def test_task_result_triggers_its_wait_or_is_404(api: Api, reads: ReadModel) -> None:
    created = await api.create_agent()
    agent_id = created["agent_id"]
    await api.tool(
        agent_id, "WaitFor", {"reason": "build", "wake": "task_result", "resource": "t-9"}
    )
    url = f"/v1/agents/{agent_id}/tasks/t-9/result"
    own = bearer(created["agent_token"])
    answer = await api.http.post(url, headers=own, json={"status": "succeeded", "summary": "green"})
    assert answer.status_code == 202
    assert answer.json()["disposition"] == "triggered"
    [wait] = await reads.active_waits(agent_id)
    assert wait.trigger_count == 1
    missing = await api.http.post(
        f"/v1/agents/{agent_id}/tasks/other/result",
        headers=own,
        json={"status": "failed", "summary": "x"},
    )
    assert missing.status_code == 404
    assert kind(missing) == "wait_not_found"
    bad = await api.http.post(url, headers=own, json={"status": "maybe", "summary": "x"})
    assert bad.status_code == 400


# ---- tools
async def test_tool_route_statuses_follow_the_error_kind(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    other = (await api.create_agent())["agent_id"]
    foreign_item = await create_item(api, other)
    item = await create_item(api, agent_id)
    done = await api.tool(agent_id, "CompleteWorkItem", {"work_item_id": item})
    assert done.status_code == 200
    cases = [
        ("CreateWorkItem", {"objective": "  "}, 400, "invalid_tool_input"),
        ("CreateWorkItem", {"objective": "x", "include_plan": True}, 400, "invalid_tool_input"),
        ("GetWorkItem", {"work_item_id": foreign_item}, 403, "work_item_access_denied"),
        ("GetWorkItem", {"work_item_id": "wi_" + "1" * 26}, 404, "work_item_not_found"),
        ("Teleport", {}, 404, "unknown_tool"),
        ("CompleteWorkItem", {"work_item_id": item}, 409, "work_item_not_open"),
    ]
    for tool, args, status, error_kind in cases:
        answer = await api.tool(agent_id, tool, args)
        assert answer.status_code == status, (tool, answer.text)
        envelope = answer.json()
        assert envelope["status"] == "error"
        assert envelope["tool_name"] == tool
        assert envelope["error"]["kind"] == error_kind


async def test_tool_command_id_makes_a_retry_return_the_first_answer(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    first = await api.tool(agent_id, "CreateWorkItem", {"objective": "once"}, command_id="c-1")
    again = await api.tool(agent_id, "CreateWorkItem", {"objective": "once"}, command_id="c-1")
    assert first.json()["result"]["work_item"]["id"] == again.json()["result"]["work_item"]["id"]
    listed = await api.http.get(f"/v1/agents/{agent_id}/work-items", headers=api.operator)
    assert listed.json()["total_matching"] == 1


async def test_assistant_text_is_the_completion_report(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    item = await create_item(api, agent_id)
    answer = await api.tool(
        agent_id, "CompleteWorkItem", {"work_item_id": item}, assistant_text="All shipped."
    )
    assert answer.json()["result"]["report_promoted"] is True
    briefs = await api.http.get(
        f"/v1/agents/{agent_id}/briefs", params={"work_item_id": item}, headers=api.operator
    )
    body = briefs.json()
    assert [b["text"] for b in body["briefs"]] == ["All shipped."]
    assert [s["text"] for s in body["delivery_summaries"]] == ["All shipped."]
    other = await api.http.get(
        f"/v1/agents/{agent_id}/briefs", params={"work_item_id": "wi_other"}, headers=api.operator
    )
    assert other.json() == {"briefs": [], "delivery_summaries": [], "next_cursor": None}


async def test_malformed_tool_body_is_400_invalid_request(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    url = f"/v1/agents/{agent_id}/tools/CreateWorkItem"
    for body in ({}, {"args": [1]}, {"args": {}, "surprise": 1}, {"args": {}, "command_id": ""}):
        answer = await api.http.post(url, headers=api.operator, json=body)
        assert answer.status_code == 400, body
        assert kind(answer) == "invalid_request"


# ---- work-item reads
async def test_work_item_reads_are_bare_results(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    todo = [{"text": "a"}, {"text": "b", "state": "in_progress"}]
    first = await create_item(api, agent_id, "first", todo_list=todo)
    await create_item(api, agent_id, "second")
    base = f"/v1/agents/{agent_id}/work-items"
    page = (await api.http.get(base, params={"limit": 1}, headers=api.operator)).json()
    assert set(page) == {"filter", "returned", "total_matching", "work_items", "next_cursor"}
    assert (page["filter"], page["returned"], page["total_matching"]) == ("all", 1, 2)
    assert "todo_list" not in page["work_items"][0]
    with_todos = await api.http.get(
        base, params={"filter": "open", "include_todo_list": "true"}, headers=api.operator
    )
    assert all("todo_list" in w for w in with_todos.json()["work_items"])
    one = (await api.http.get(f"{base}/{first}", headers=api.operator)).json()
    assert set(one) == {"current_work_item_id", "work_item"}
    assert one["work_item"]["current_todo"]["text"] == "b"
    assert "todo_list" not in one["work_item"]
    full = await api.http.get(f"{base}/{first}?include_todo_list=1", headers=api.operator)
    assert len(full.json()["work_item"]["todo_list"]) == 2


@pytest.mark.parametrize(
    "query", ["filter=sideways", "limit=abc", "include_todo_list=perhaps", "limit=1.5"]
)
async def test_invalid_work_item_query_is_400(api: Api, query: str) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    answer = await api.http.get(f"/v1/agents/{agent_id}/work-items?{query}", headers=api.operator)
    assert answer.status_code == 400
    assert kind(answer) == "invalid_request"


async def test_unknown_or_foreign_work_item_read(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    other = (await api.create_agent())["agent_id"]
    foreign = await create_item(api, other)
    base = f"/v1/agents/{agent_id}/work-items"
    missing = await api.http.get(f"{base}/wi_{'2' * 26}", headers=api.operator)
    assert (missing.status_code, kind(missing)) == (404, "work_item_not_found")
    denied = await api.http.get(f"{base}/{foreign}", headers=api.operator)
    assert (denied.status_code, kind(denied)) == (403, "work_item_access_denied")


# ---- why not running
async def why(api: Api, agent_id: str, item: str, headers: dict[str, str]) -> httpx.Response:
    return await api.http.get(f"/v1/agents/{agent_id}/work-items/{item}/why", headers=headers)


async def test_why_not_running_names_the_reason_and_its_fact(api: Api) -> None:
    created = await api.create_agent()
    agent_id, own = created["agent_id"], bearer(created["agent_token"])
    first, second = await create_item(api, agent_id, "first"), await create_item(api, agent_id)
    queued = await why(api, agent_id, second, own)
    assert queued.status_code == 200, queued.text
    assert (queued.json()["reason"], queued.json()["rank"]) == ("queued", 2)
    assert queued.json()["work_item_id"] == second
    blocker = {"work_item_id": first, "blocked_by": "the vendor has not answered"}
    assert (await api.tool(agent_id, "UpdateWorkItem", blocker)).status_code == 200
    blocked = (await why(api, agent_id, first, api.operator)).json()
    assert (blocked["reason"], blocked["text"]) == ("blocked", "the vendor has not answered")
    waited = await api.tool(
        agent_id, "WaitFor", {"reason": "CI", "wake": "external", "work_item_id": first}
    )
    wait_id = waited.json()["result"]["wait"]["id"]
    waiting = (await why(api, agent_id, first, own)).json()
    assert (waiting["reason"], waiting["wait"]["id"]) == ("waiting_external", wait_id)
    done = await api.tool(
        agent_id, "CompleteWorkItem", {"work_item_id": second}, assistant_text="Shipped."
    )
    assert done.status_code == 200, done.text
    completed = (await why(api, agent_id, second, own)).json()
    assert (completed["reason"], completed["text"]) == ("completed", "Shipped.")


async def test_why_not_running_auth_and_missing_items(api: Api) -> None:
    created, other = await api.create_agent(), await api.create_agent()
    agent_id = created["agent_id"]
    item = await create_item(api, agent_id)
    foreign = await create_item(api, other["agent_id"])
    assert (await why(api, agent_id, item, {})).status_code == 401
    stranger = await why(api, agent_id, item, bearer(other["agent_token"]))
    assert (stranger.status_code, kind(stranger)) == (403, "forbidden")
    missing = await why(api, agent_id, f"wi_{'2' * 26}", api.operator)
    assert (missing.status_code, kind(missing)) == (404, "work_item_not_found")
    denied = await why(api, agent_id, foreign, bearer(created["agent_token"]))
    assert (denied.status_code, kind(denied)) == (403, "work_item_access_denied")
    malformed = await why(api, agent_id, "not-an-id", api.operator)
    assert (malformed.status_code, kind(malformed)) == (404, "work_item_not_found")
    ghost = await why(api, new_agent_id(), item, api.operator)
    assert (ghost.status_code, kind(ghost)) == (404, "agent_not_found")


# ---- history
async def test_history_pages_ascend_by_seq(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    for n in range(3):
        await create_item(api, agent_id, f"item {n}")
    url = f"/v1/agents/{agent_id}/history"
    everything = (await api.http.get(url, headers=api.operator)).json()
    assert [e["seq"] for e in everything["events"]] == [1, 2, 3, 4]
    assert everything["next_after"] == 4
    page = (await api.http.get(url, params={"after": 1, "limit": 2}, headers=api.operator)).json()
    assert [e["seq"] for e in page["events"]] == [2, 3]
    assert page["next_after"] == 3
    end = (await api.http.get(url, params={"after": 4}, headers=api.operator)).json()
    assert end == {"events": [], "next_after": 4, "next_cursor": None, "call_outcomes": {}}
    for bad in ({"limit": 0}, {"limit": 1001}, {"after": -1}, {"after": "x"}):
        answer = await api.http.get(url, params=bad, headers=api.operator)
        assert (answer.status_code, kind(answer)) == (400, "invalid_request"), bad


async def test_history_verify_names_the_first_bad_event(api: Api, redis: Any, names: Names) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    await create_item(api, agent_id)
    url = f"/v1/agents/{agent_id}/history/verify"
    good = (await api.http.get(url, headers=api.operator)).json()
    assert good["ok"] is True
    assert good["count"] == 2
    assert good["first_bad_index"] is None
    assert len(good["head"]) == 64
    event = orjson.loads(await redis.lindex(names.history(agent_id), 1))
    event["data"]["tampered"] = True
    await redis.lset(names.history(agent_id), 1, orjson.dumps(event))
    bad = (await api.http.get(url, headers=api.operator)).json()
    assert (bad["ok"], bad["first_bad_index"]) == (False, 1)


# ---- limits
async def test_body_over_the_limit_is_413_before_parsing(make_api: Any) -> None:
    async with make_api(max_body_bytes=1024) as api:
        agent_id = (await api.create_agent())["agent_id"]
        url = f"/v1/agents/{agent_id}/messages"
        big = orjson.dumps({"text": "x" * 2000})
        sized = await api.http.post(
            url, headers={**api.operator, "content-type": "application/json"}, content=big
        )
        assert (sized.status_code, kind(sized)) == (413, "payload_too_large")

        async def chunks() -> Any:
            for _ in range(8):
                yield b"x" * 200

        chunked = await api.http.post(url, headers=api.operator, content=chunks())
        assert (chunked.status_code, kind(chunked)) == (413, "payload_too_large")
        small = await api.http.post(url, headers=api.operator, json={"text": "fits"})
        assert small.status_code == 202


async def test_agent_token_is_rate_limited_and_the_operator_is_not(make_api: Any) -> None:
    async with make_api(agent_rate=0.5, agent_burst=2) as api:
        created = await api.create_agent()
        url = f"/v1/agents/{created['agent_id']}/work-items"
        own = bearer(created["agent_token"])
        statuses = [(await api.http.get(url, headers=own)).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        limited = await api.http.get(url, headers=own)
        assert kind(limited) == "rate_limited"
        assert int(limited.headers["retry-after"]) >= 1
        for _ in range(5):
            assert (await api.http.get(url, headers=api.operator)).status_code == 200


# ---- operations
async def test_health_metrics_and_schemas(api: Api, names: Names) -> None:
    assert (await api.http.get("/healthz")).status_code == 200
    assert (await api.http.get("/readyz")).text == "ready"
    await api.http.get("/v1/agents/someone/work-items")
    await api.http.get("/no/such/route")
    metrics = (await api.http.get("/metrics")).text
    assert 'longrun_http_requests_total{route="/v1/agents/{agent_id}/work-items",status="401"}' in (
        metrics
    )
    assert 'longrun_http_requests_total{route="unmatched",status="404"}' in metrics
    pending = f'longrun_stream_pending{{group="ingress",stream="{names.callbacks}"}} 0.0'
    assert pending in metrics
    openapi = (await api.http.get("/openapi.json")).json()
    for path in (
        "/v1/agents",
        "/v1/agents/{agent_id}",
        "/v1/agents/{agent_id}/messages",
        "/v1/agents/{agent_id}/tasks/{task_id}/result",
        "/v1/agents/{agent_id}/tools/{tool_name}",
        "/v1/agents/{agent_id}/work-items",
        "/v1/agents/{agent_id}/work-items/{work_item_id}",
        "/v1/agents/{agent_id}/briefs",
        "/v1/agents/{agent_id}/history",
        "/v1/agents/{agent_id}/history/verify",
        "/v1/callbacks/{token}",
    ):
        assert path in openapi["paths"], path
    asyncapi = (await api.http.get("/asyncapi.json")).json()
    assert asyncapi["asyncapi"] == "3.0.0"
    assert "callbacks" in asyncapi["channels"]


async def test_readyz_fails_when_a_subscriber_stopped(api: Api) -> None:
    await api.built.subscribers[0].stop()
    answer = await api.http.get("/readyz")
    assert answer.status_code == 503
    assert "subscriber" in answer.text
    assert (await api.http.get("/healthz")).status_code == 503


async def test_the_tools_route_serves_the_six_file_tools_in_the_agents_home(api: Api) -> None:
    created = await api.create_agent()
    agent_id, own = created["agent_id"], bearer(created["agent_token"])

    async def tool(name: str, **args: Any) -> httpx.Response:
        url = f"/v1/agents/{agent_id}/tools/{name}"
        return await api.http.post(url, headers=own, json={"args": args})

    written = await tool("WriteFile", path="notes/a.txt", content="one\ntwo\n")
    assert written.status_code == 200, written.text
    patch = "--- a/notes/a.txt\n+++ b/notes/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
    assert (await tool("ApplyPatch", patch=patch)).status_code == 200
    assert (await tool("EditFile", path="notes/a.txt", old_text="one", new_text="1")).is_success
    read = await tool("ReadFile", path="notes/a.txt")
    assert read.json()["result"]["content"] == "1\nTWO\n"
    listed = await tool("ListFiles", recursive=True)
    assert [e["path"] for e in listed.json()["result"]["entries"]] == ["notes", "notes/a.txt"]
    found = await tool("SearchFiles", pattern="^T")
    assert found.json()["result"]["matches"] == [{"path": "notes/a.txt", "line": 2, "text": "TWO"}]
    escape = await tool("ReadFile", path="../../etc/passwd")
    assert escape.status_code == 403
    assert escape.json()["error"]["kind"] == "access_denied"
    bad = await tool("SearchFiles", pattern="(")
    assert bad.status_code == 400
    assert bad.json()["error"]["kind"] == "invalid_tool_input"


async def test_a_spec_without_file_tools_takes_them_off_the_tools_route(api: Api) -> None:
    created = await api.create_agent(spec={"tools": {"files": False}})
    agent_id, own = created["agent_id"], bearer(created["agent_token"])
    listed_tools = (await api.http.get(f"/v1/agents/{agent_id}/tools", headers=own)).json()
    names = {tool["name"] for tool in listed_tools["tools"]}
    assert "CreateWorkItem" in names
    assert not names & {name.value for name in FileToolName}
    with_files = (await api.create_agent())["agent_id"]
    listed_tools = await api.http.get(f"/v1/agents/{with_files}/tools", headers=api.operator)
    assert {name.value for name in FileToolName} <= {
        t["name"] for t in listed_tools.json()["tools"]
    }
    for name, args in (
        ("WriteFile", {"path": "a.txt", "content": "x"}),
        ("ReadFile", {"path": "a.txt"}),
        ("ListFiles", {}),
        ("SearchFiles", {"pattern": "x"}),
        ("EditFile", {"path": "a.txt", "old_text": "x", "new_text": "y"}),
        ("ApplyPatch", {"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\n"}),
    ):
        url = f"/v1/agents/{agent_id}/tools/{name}"
        answer = await api.http.post(url, headers=own, json={"args": args})
        assert answer.status_code == 404, (name, answer.text)
        error = answer.json()["error"]
        assert error["kind"] == "unknown_tool", name
        assert "file tools off" in error["message"]
    written = resolve_in_home(api.built.settings.agent_home, agent_id, "a.txt")
    assert not written.exists()
    listed = await api.http.post(
        f"/v1/agents/{agent_id}/tools/ListWorkItems", headers=own, json={"args": {}}
    )
    assert listed.status_code == 200, listed.text


async def test_history_pages_show_external_calls_outcomes_derived_past_the_page(api: Api) -> None:
    """A call recorded as finished shows its outcome; a call whose turn finished without its
    record shows unknown, though no record says so, also when the page holds only the starts."""
    agent_id = (await api.create_agent())["agent_id"]
    ingress = api.built.ingress
    n, turn_id = ingress.reads.n, new_id("turn_")
    token = int(
        await ingress.reads.redis.fcall(  # the lease a turn takes, with its token
            "lr_lease_acquire", 2, n.lease(agent_id), n.fence(agent_id), f"x:{turn_id}:t", 30_000
        )
    )
    fenced = {"agent_id": agent_id, "turn_id": turn_id, "fencing_token": token}
    digest = "0" * 64
    for command in (
        c.BeginTurn(command_id=f"{turn_id}:b", tick_id="t", tick_kind="input", **fenced),
        *(
            c.RecordToolCallStart(
                command_id=f"{turn_id}:{call}",
                call_id=call,
                server="web",
                tool="echo",
                args_sha256=digest,
                **fenced,
            )
            for call in ("call_a", "call_b")
        ),
    ):
        assert (await ingress.client.send(command)).error is None
    url = f"/v1/agents/{agent_id}/history"
    first = (await api.http.get(url, headers=api.operator)).json()
    assert first["call_outcomes"] == {"call_a": "running", "call_b": "running"}
    for command in (
        c.RecordToolCallFinish(
            command_id=f"{turn_id}:a-end", call_id="call_a", outcome="ok", **fenced
        ),
        c.FinishTurn(command_id=f"{turn_id}:f", outcome="failed", error="died", **fenced),
    ):
        assert (await ingress.client.send(command)).error is None
    starts = [e["seq"] for e in first["events"] if e["type"] == "tool_call_started"]
    page = (
        await api.http.get(url, params={"after": starts[0] - 1, "limit": 2}, headers=api.operator)
    ).json()
    assert [e["type"] for e in page["events"]] == ["tool_call_started"] * 2
    assert page["call_outcomes"] == {"call_a": "ok", "call_b": "unknown"}
