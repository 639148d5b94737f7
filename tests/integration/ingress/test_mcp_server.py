"""longrun as an MCP server, proven with the official SDK's client over streamable HTTP against
ingress running as a real process (beside a real ledger and scheduler): the tools and their
schemas are the HTTP route's, a WorkItem goes through its whole life over MCP with the same
history as over HTTP, tokens act only as their own agent, bad arguments answer the same error
kinds, and a repeated command id applies once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shlex
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from services.turn_executor.prompt import tool_specs
from shared.file_tools import FileToolName
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration.conftest import ServiceProcess, service_process, started
from tests.integration.ingress.conftest import (
    OPERATOR_TOKEN,
    new_agent_id,
    stack_env,
    until,
)
from tests.integration.ingress.mcp_kit import (
    bearer,
    call,
    http_call,
    mcp_client,
    operator_for,
)

REPORT = "assistant_text"


@pytest.fixture(scope="module")
def scheduler_process(
    redis_url: str,
    stack_prefix: str,
    agent_home: Path,
    ledger_process: ServiceProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServiceProcess]:
    """A real scheduler, so a callback's trigger becomes the review wake an external loop reads."""
    env = stack_env(redis_url, stack_prefix, agent_home)
    log = tmp_path_factory.mktemp("s") / "s.log"
    proc = started(service_process("services.scheduler", env, "LONGRUN_SCHEDULER_PORT", log))
    yield proc
    proc.stop()


pytestmark = pytest.mark.usefixtures("scheduler_process")


async def make_agent(http: httpx.AsyncClient, loop: str = "external") -> tuple[str, str]:
    """(agent id, its token)."""
    agent_id = new_agent_id()
    answer = await http.put(
        f"/v1/agents/{agent_id}", headers=bearer(OPERATOR_TOKEN), json={"loop": loop}
    )
    assert answer.status_code == 201, answer.text
    return agent_id, answer.json()["agent_token"]


async def test_mcp_lists_every_tool_with_the_http_routes_schema(
    http: httpx.AsyncClient, base_url: str
) -> None:
    agent_id, token = await make_agent(http)
    route = (await http.get(f"/v1/agents/{agent_id}/tools", headers=bearer(token))).json()
    async with mcp_client(base_url, bearer(token)) as client:
        listed = (await client.list_tools()).tools
    assert [tool.name for tool in listed] == [tool["name"] for tool in route["tools"]]
    model = {spec["function"]["name"]: spec["function"] for spec in tool_specs(reviews=True)}
    assert list(model) == [tool.name for tool in listed]
    for tool, served in zip(listed, route["tools"], strict=True):
        schema = dict(tool.input_schema)
        if tool.name == "CompleteWorkItem":
            extra = schema["properties"].pop(REPORT)
            schema = {**schema, "properties": schema["properties"]}
            assert extra["type"] == "string"
        assert schema == served["input_schema"], tool.name
        assert schema == model[tool.name]["parameters"], tool.name
        assert tool.description == served["description"] == model[tool.name]["description"]


Caller = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def wakes(redis: AnyRedis, names: Names, agent_id: str) -> list[str]:
    """The kinds of the ticks the scheduler published for this external agent's loop."""
    entries = await redis.xrange(names.wakes)
    return [
        fields[b"kind"].decode()
        for _, fields in entries
        if fields.get(b"agent_id") == agent_id.encode()
    ]


async def history_of(http: httpx.AsyncClient, agent_id: str) -> list[dict[str, Any]]:
    answer = await http.get(f"/v1/agents/{agent_id}/history", headers=bearer(OPERATOR_TOKEN))
    return list(answer.json()["events"])


async def live_a_work_item(
    agent_id: str, use: Caller, http: httpx.AsyncClient, redis: AnyRedis, names: Names
) -> str:
    """Create → pick → WaitFor external → callback → review → complete with a report; the
    WorkItem's id. Every step is asserted, whichever surface `use` calls."""
    created = await use(
        "CreateWorkItem",
        {
            "objective": "Ship the release",
            "plan": "# Plan\nDeploy, then watch it.",
            "todo_list": [{"text": "watch the deploy"}],
        },
    )
    assert created["status"] == "success", created
    item_id = created["result"]["work_item"]["id"]
    started = await use("PickWorkItem", {"work_item_id": item_id, "reason": "start"})
    assert started["status"] == "success", started
    waited = await use("WaitFor", {"reason": "waiting for the deploy", "wake": "external"})
    callback_url = waited["result"]["wait"]["callback_url"]
    hook = await http.post(callback_url, json={"deploy": "green"}, headers={"Idempotency-Key": "1"})
    assert hook.json()["disposition"] == "triggered", hook.text

    async def reviewed() -> bool:
        return "review_triggered" in await wakes(redis, names, agent_id)

    await until(reviewed)
    seen = await use("GetWorkItem", {"work_item_id": item_id})
    (wait,) = seen["result"]["work_item"]["active_waits"]
    assert wait["trigger_count"] == 1
    picked = await use(
        "PickWorkItem",
        {"work_item_id": item_id, "reason": "the deploy is green", "clear_blocker": True},
    )
    assert picked["result"]["transition"]["blocker_cleared"] is True, picked
    todos = [{"text": "watch the deploy", "state": "completed"}]
    updated = await use("UpdateWorkItem", {"work_item_id": item_id, "todo_list": todos})
    assert updated["status"] == "success", updated
    done = await use("CompleteWorkItem", {"work_item_id": item_id, REPORT: "Shipped; all green."})
    assert done["status"] == "success", done
    assert done["warnings"] == [], done
    assert done["result"]["report_promoted"] is True
    return str(item_id)


def shape(events: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    return [(event["type"], sorted(event["data"])) for event in events]


async def test_a_work_item_lives_its_whole_life_over_mcp_with_the_http_routes_history(
    http: httpx.AsyncClient, base_url: str, redis: AnyRedis, names: Names
) -> None:
    over_mcp, token = await make_agent(http)
    async with mcp_client(base_url, bearer(token)) as client:

        async def by_mcp(tool: str, args: dict[str, Any]) -> dict[str, Any]:
            return await call(client, tool, args)

        item_id = await live_a_work_item(over_mcp, by_mcp, http, redis, names)
        as_resource = await client.read_resource(f"longrun://work-items/{item_id}")
        plan = await client.read_resource(f"longrun://work-items/{item_id}/plan")
    (content,) = as_resource.contents
    view = json.loads(content.text)  # type: ignore[union-attr]
    assert content.mime_type == "application/json"
    assert view["id"] == item_id
    assert view["outcome"] == "done"
    assert view["result_summary"] == "Shipped; all green."
    assert [(t["text"], t["state"]) for t in view["todo_list"]] == [
        ("watch the deploy", "completed")
    ]
    (plan_text,) = plan.contents
    assert plan_text.mime_type == "text/markdown"
    assert "Deploy, then watch it." in plan_text.text  # type: ignore[union-attr]
    briefs = (await http.get(f"/v1/agents/{over_mcp}/briefs", headers=bearer(token))).json()
    assert [b["text"] for b in briefs["briefs"] if b["kind"] == "result"] == ["Shipped; all green."]

    over_http, _ = await make_agent(http)

    async def by_http(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        report = args.pop(REPORT, None)
        extra = {"assistant_text": report} if report else {}
        return await http_call(http, over_http, tool, args, **extra)

    await live_a_work_item(over_http, by_http, http, redis, names)
    assert shape(await history_of(http, over_mcp)) == shape(await history_of(http, over_http))


async def post_initialize(http: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    """A raw MCP initialize request, to see what /mcp answers before MCP is spoken."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    return await http.post("/mcp", json=body, headers={**headers, **accept})


async def test_no_or_an_unknown_token_is_401_and_another_agents_name_is_403(
    http: httpx.AsyncClient,
) -> None:
    agent_a, token_a = await make_agent(http)
    agent_b, _ = await make_agent(http)
    assert (await post_initialize(http, bearer(token_a))).status_code == 200
    assert (await post_initialize(http, bearer(token_a, agent_a))).status_code == 200
    refused = {
        401: [{}, bearer("nope"), bearer(f"{agent_a}.forged"), {"Authorization": "Basic x"}],
        403: [bearer(token_a, agent_b)],
        400: [bearer(OPERATOR_TOKEN)],
        404: [operator_for("ag-nobody")],
    }
    kinds = {401: "unauthorized", 403: "forbidden", 400: "invalid_request", 404: "agent_not_found"}
    for status, headers_list in refused.items():
        for headers in headers_list:
            answer = await post_initialize(http, headers)
            assert answer.status_code == status, (headers, answer.text)
            assert answer.json()["error"]["kind"] == kinds[status]


async def test_agent_a_cannot_act_on_agent_bs_work_items_and_the_operator_can(
    http: httpx.AsyncClient, base_url: str
) -> None:
    agent_a, token_a = await make_agent(http)
    agent_b, token_b = await make_agent(http, loop="builtin")
    # The operator acts as B (a builtin agent: its calls are ordered with its turns).
    async with mcp_client(base_url, operator_for(agent_b)) as as_b:
        created = await call(as_b, "CreateWorkItem", {"objective": "B's own work"})
    b_item = created["result"]["work_item"]["id"]
    listed = await http_call(http, agent_b, "ListWorkItems", {})
    assert [item["id"] for item in listed["result"]["work_items"]] == [b_item]
    async with mcp_client(base_url, bearer(token_a)) as as_a:
        for tool, args in [
            ("GetWorkItem", {"work_item_id": b_item}),
            ("CompleteWorkItem", {"work_item_id": b_item, REPORT: "not mine"}),
            ("CancelWorkItem", {"work_item_id": b_item, "reason": "not mine"}),
            ("PickWorkItem", {"work_item_id": b_item}),
        ]:
            over_mcp = await call(as_a, tool, dict(args))
            args.pop(REPORT, None)
            over_http = await http_call(http, agent_a, tool, args)
            assert over_mcp["error"]["kind"] == over_http["error"]["kind"]
            assert over_mcp["error"]["kind"] in {"work_item_access_denied", "work_item_not_found"}
        with pytest.raises(MCPError) as refused:
            await as_a.read_resource(f"longrun://work-items/{b_item}")
        assert refused.value.data["kind"] in {"work_item_access_denied", "work_item_not_found"}
        mine = await call(as_a, "ListWorkItems", {})
        assert mine["result"]["work_items"] == []
    async with mcp_client(base_url, bearer(token_b)) as own:
        still = await call(own, "GetWorkItem", {"work_item_id": b_item})
    assert still["result"]["work_item"]["state"] == "open"


BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("CreateWorkItem", {}),
    ("CreateWorkItem", {"objective": "   "}),
    ("CreateWorkItem", {"objective": "x", "todo_list": [{"text": "a", "extra": 1}]}),
    ("GetWorkItem", {"work_item_id": "wi_x", "include_plan": True}),
    ("UpdateWorkItem", {"work_item_id": "wi_x", "blocked_by": ""}),
    ("WaitFor", {"reason": "later", "wake": "timer"}),
    ("WaitFor", {"reason": "later", "wake": "someday"}),
    ("ListWorkItems", {"filter": "sideways"}),
    ("CompleteWorkItem", {"work_item_id": "wi_01J0000000000000000000000X"}),
    ("PickWorkItem", {"work_item_id": "wi_01J0000000000000000000000X"}),
    ("CompleteWorkItem", {}),
    ("ReadFile", {"path": "../../etc/passwd"}),
    ("WriteFile", {"path": "notes.md"}),
    ("EditFile", {"path": "missing.md", "old": "a", "new": "b"}),
    ("ApplyPatch", {"patch": "not a diff"}),
]


async def test_bad_arguments_answer_the_same_envelopes_as_the_http_route(
    http: httpx.AsyncClient, base_url: str
) -> None:
    agent_id, token = await make_agent(http)
    async with mcp_client(base_url, bearer(token)) as client:
        for tool, args in BAD_CALLS:
            over_mcp = await call(client, tool, args)
            over_http = await http_call(http, agent_id, tool, args)
            assert over_mcp["status"] == "error", (tool, args, over_mcp)
            assert over_mcp == over_http, (tool, args)
        # The report argument is CompleteWorkItem's own over MCP, and typed.
        typed = await call(client, "CompleteWorkItem", {"work_item_id": "wi_x", REPORT: 5})
        assert typed["error"]["kind"] == "invalid_tool_input"
        assert typed["error"]["details"]["errors"][0]["field"] == REPORT
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("LaunchRocket", {})
    assert unknown.value.data["kind"] == "unknown_tool"
    over_http = await http.post(
        f"/v1/agents/{agent_id}/tools/LaunchRocket", headers=bearer(token), json={"args": {}}
    )
    assert over_http.status_code == 404
    assert over_http.json()["error"]["kind"] == "unknown_tool"


async def test_a_repeated_command_id_applies_once(http: httpx.AsyncClient, base_url: str) -> None:
    agent_id, token = await make_agent(http)
    async with mcp_client(base_url, bearer(token)) as client:
        first = await call(client, "CreateWorkItem", {"objective": "once"}, command_id="c-1")
        again = await call(client, "CreateWorkItem", {"objective": "once"}, command_id="c-1")
        other = await call(client, "CreateWorkItem", {"objective": "twice"}, command_id="c-2")
        item_id = first["result"]["work_item"]["id"]
        done = {"work_item_id": item_id, REPORT: "Done once."}
        completed = await call(client, "CompleteWorkItem", done, command_id="c-3")
        repeated = await call(client, "CompleteWorkItem", done, command_id="c-3")
        fresh = await call(client, "CompleteWorkItem", done, command_id="c-4")
    assert again == first
    assert other["result"]["work_item"]["id"] != item_id
    assert repeated == completed
    assert completed["status"] == "success"
    assert fresh["error"]["kind"] == "work_item_not_open"
    listed = await http_call(http, agent_id, "ListWorkItems", {})
    assert listed["result"]["total_matching"] == 2
    types = [event["type"] for event in await history_of(http, agent_id)]
    assert types.count("work_item_created") == 2
    assert types.count("work_item_completed") == 1
    briefs = (await http.get(f"/v1/agents/{agent_id}/briefs", headers=bearer(token))).json()
    assert [b["text"] for b in briefs["briefs"]] == ["Done once."]


async def test_file_tools_are_not_listed_for_an_agent_whose_spec_turns_them_off(
    http: httpx.AsyncClient, base_url: str
) -> None:
    agent_id = new_agent_id()
    spec = {"loop": "external", "spec": {"tools": {"files": False}}}
    put = await http.put(f"/v1/agents/{agent_id}", headers=bearer(OPERATOR_TOKEN), json=spec)
    assert put.status_code == 201, put.text
    files = {name.value for name in FileToolName}
    async with mcp_client(base_url, bearer(put.json()["agent_token"])) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        refused = await call(client, "WriteFile", {"path": "a.txt", "content": "x"})
    assert "CreateWorkItem" in names
    assert not names & files
    assert refused["error"]["kind"] == "unknown_tool"
    _, token = await make_agent(http)
    async with mcp_client(base_url, bearer(token)) as client:
        assert files <= {tool.name for tool in (await client.list_tools()).tools}


async def test_a_file_change_repeated_with_the_same_command_id_applies_once_over_mcp(
    http: httpx.AsyncClient, base_url: str
) -> None:
    _, token = await make_agent(http)
    add = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1,2 @@\n one\n+added\n"
    async with mcp_client(base_url, bearer(token)) as client:
        await call(client, "WriteFile", {"path": "notes.txt", "content": "one\n"})
        first = await call(client, "ApplyPatch", {"patch": add}, command_id="patch-1")
        again = await call(client, "ApplyPatch", {"patch": add}, command_id="patch-1")
        read = await call(client, "ReadFile", {"path": "notes.txt"})
    assert first["status"] == "success", first
    assert again == first
    assert read["result"]["content"] == "one\nadded\n"


async def test_a_plan_edited_over_mcp_is_what_the_views_and_the_plan_resource_show(
    http: httpx.AsyncClient, base_url: str
) -> None:
    _, token = await make_agent(http)
    text = "# Plan\n\n1. Edited over MCP\n"
    async with mcp_client(base_url, bearer(token)) as client:
        created = await call(client, "CreateWorkItem", {"objective": "Plan over MCP"})
        item = created["result"]["work_item"]
        relative = item["plan_artifact"]["relative_path"]
        await call(client, "WriteFile", {"path": relative, "content": text}, command_id="w-1")
        got = await call(client, "GetWorkItem", {"work_item_id": item["id"]})
        resource = await client.read_resource(f"longrun://work-items/{item['id']}")
    plan = got["result"]["work_item"]["plan_artifact"]
    assert plan["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert plan["preview"] == text
    (contents,) = resource.contents
    assert json.loads(getattr(contents, "text", ""))["plan_artifact"]["sha256"] == plan["sha256"]


async def test_the_handshake_era_client_and_the_resource_listing(
    http: httpx.AsyncClient, base_url: str
) -> None:
    _agent_id, token = await make_agent(http)
    async with mcp_client(base_url, bearer(token), mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        created = await call(client, "CreateWorkItem", {"objective": "listed", "plan": "# P"})
        item_id = created["result"]["work_item"]["id"]
        templates = (await client.list_resource_templates()).resource_templates
        resources = (await client.list_resources()).resources
        tools = (await client.list_tools()).tools
    assert [t.uri_template for t in templates] == [
        "longrun://work-items/{id}",
        "longrun://work-items/{id}/plan",
    ]
    assert [str(r.uri) for r in resources] == [
        f"longrun://work-items/{item_id}",
        f"longrun://work-items/{item_id}/plan",
    ]
    assert len(tools) == len(tool_specs(reviews=True))


README = Path(__file__).resolve().parents[3] / "README.md"


def readme_mcp_section() -> str:
    text = README.read_text()
    return text.split("\n## Connecting an MCP client\n", 1)[1].split("\n## ", 1)[0]


def readme_inspector_commands(config: Path) -> list[list[str]]:
    """The README's Inspector commands, exactly as written, reading `config`."""
    (block,) = re.findall(r"```sh\n(npx .*?)```", readme_mcp_section(), re.DOTALL)
    lines = block.replace("\\\n", " ").strip().splitlines()
    return [
        [config.as_posix() if word == "longrun-mcp.json" else word for word in shlex.split(line)]
        for line in lines
    ]


def readme_client_entry(base_url: str, token: str) -> str:
    """The README's client configuration, with this ingress's URL and the agent's token."""
    (block,) = re.findall(r"```json\n(.*?)```", readme_mcp_section(), re.DOTALL)
    entry = block.replace("http://127.0.0.1:8080", base_url).replace("<agent_token>", token)
    assert json.loads(entry)["mcpServers"]["longrun"]["url"] == f"{base_url}/mcp"
    return entry


async def run_json(argv: list[str]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    return dict(json.loads(out))


@pytest.mark.skipif(shutil.which("npx") is None, reason="the MCP Inspector needs npx (Node.js)")
@pytest.mark.timeout(600)  # the first run fetches the Inspector from npm
async def test_the_readmes_inspector_commands_list_the_tools_and_call_one(
    http: httpx.AsyncClient, base_url: str, tmp_path: Path
) -> None:
    """A second client written apart from the Python SDK (the MCP Inspector, TypeScript), run
    exactly as the README says, with the README's client configuration."""
    agent_id, token = await make_agent(http)
    config = tmp_path / "longrun-mcp.json"
    config.write_text(readme_client_entry(base_url, token))
    list_tools, call_one = readme_inspector_commands(config)
    listed = await run_json(list_tools)
    route = (await http.get(f"/v1/agents/{agent_id}/tools", headers=bearer(token))).json()
    assert [tool["name"] for tool in listed["tools"]] == [tool["name"] for tool in route["tools"]]
    for tool, served in zip(listed["tools"], route["tools"], strict=True):
        schema = tool["inputSchema"]
        if tool["name"] == "CompleteWorkItem":
            schema["properties"].pop(REPORT)
        assert schema == served["input_schema"], tool["name"]
    called = await run_json(call_one)
    created = json.loads(called["content"][0]["text"])
    assert created["status"] == "success", created
    items = await http_call(http, agent_id, "ListWorkItems", {})
    assert [item["objective"] for item in items["result"]["work_items"]] == [
        "Ship the release notes"
    ]


async def test_the_operator_tokens_acceptance_checks_are_the_operators_over_mcp_too(
    http: httpx.AsyncClient, base_url: str
) -> None:
    agent_id, token = await make_agent(http)
    args = {"objective": "gated", "acceptance": [{"kind": "operator_approval"}]}
    set_by = {}
    for who, headers in (("operator", operator_for(agent_id)), ("agent", bearer(token))):
        async with mcp_client(base_url, headers) as client:
            created = await call(client, "CreateWorkItem", dict(args))
        assert created["status"] == "success", created
        (check,) = created["result"]["work_item"]["acceptance"]
        set_by[who] = check["set_by"]
    assert set_by == {"operator": "operator", "agent": "agent"}
