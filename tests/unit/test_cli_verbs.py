"""The operator verbs against a fake HTTP API (httpx.MockTransport): requests, output, exits."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from services.cli.board import AgentBoard
from services.cli.checks import check_lines
from services.cli.main import app
from services.cli.org.render import render_org
from services.cli.verbs import Connection
from services.cli.work_views import work_detail
from shared.domain.acceptance import OperatorApprovalCheck, SetBy, WebhookCheck
from shared.domain.readouts import work_item_view
from tests.builders import make_agent, make_todo, make_wait, make_work_item, work_item_id

TOKEN = "operator-secret"
URL = "http://longrun.test:8080"
WI = work_item_id(1)
CALLBACK = f"{URL}/v1/callbacks/agent-1.capability"


NOTE = {
    "id": "note_" + "0" * 26,
    "work_item_id": WI,
    "text": "The vault code is 7319.",
    "covers": {"from_turn": "turn_01", "to_turn": "turn_02"},
    "created_at": "2026-11-27T00:00:00Z",
}
TRANSCRIPT = [
    {
        "seq": 1,
        "turn_id": "turn_02",
        "round": 1,
        "role": "tool",
        "tool_name": "ReadFile",
        "content": "covered by the note",
    },
    {"seq": 2, "turn_id": "turn_03", "round": 0, "role": "user", "content": "# WorkItems"},
    {
        "seq": 3,
        "turn_id": "turn_03",
        "round": 1,
        "role": "assistant",
        "tool_name": "ReadFile",
        "content": '{"path": "log.txt"}',
    },
    {
        "seq": 4,
        "turn_id": "turn_03",
        "round": 1,
        "role": "tool",
        "tool_name": "ReadFile",
        "content": "log line seven",
    },
]


def item_view(**fields: Any) -> dict[str, Any]:
    todos = [make_todo("Outline", "completed"), make_todo("Draft", "in_progress")]
    item = make_work_item(todo_list=todos, **fields)
    wait = make_wait(reason="Waiting for the reviewer")
    return work_item_view(item, (wait,), None, include_todo_list=True).to_json()


@dataclass
class FakeApi:
    """Answers the routes the verbs use and records every request."""

    requests: list[httpx.Request] = field(default_factory=list)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    briefs: list[dict[str, Any]] = field(default_factory=list)
    verify: dict[str, Any] = field(
        default_factory=lambda: {
            "ok": True,
            "count": 12,
            "head": "ab" * 32,
            "first_bad_index": None,
        }
    )

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path.startswith("/v1/callbacks/"):
            return httpx.Response(202, json={"delivery_id": "d1", "disposition": "triggered"})
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return httpx.Response(401, json={"error": {"kind": "unauthorized", "message": "no"}})
        return self.route(request)

    def route(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")[1:]
        if parts == ["agents"]:
            return httpx.Response(200, json={"agents": [{"agent_id": a} for a in self.agents]})
        agent_id, rest = parts[1], parts[2:]
        if request.method == "PUT":
            return self.put_agent(agent_id)
        if agent_id not in self.agents:
            return httpx.Response(404, json={"error": {"kind": "not_found", "message": "no"}})
        answers: dict[str, Any] = {
            "": make_agent(agent_id=agent_id).model_dump(mode="json"),
            "messages": {"message_id": "msg_1"},
            "work-items": {
                "filter": "all",
                "returned": 1,
                "total_matching": 1,
                "work_items": [item_view()],
            },
            "history/verify": self.verify,
            "history": HISTORY,
            "delegations": {"agent_id": agent_id, "delegations": []},
            "briefs": {"briefs": self.briefs, "delivery_summaries": []},
            **dict.fromkeys(("pause", "resume", "retire"), self.controlled(agent_id, rest)),
        }
        key = "/".join(rest)
        if key.startswith("work-items/"):
            view = item_view()
            if request.url.params.get("include_process_notes") == "true":
                view["process_notes"] = [NOTE]
            return httpx.Response(200, json={"current_work_item_id": None, "work_item": view})
        if key == "transcript":
            after = int(request.url.params.get("after", "0"))
            entries = TRANSCRIPT[after:]
            return httpx.Response(200, json={"entries": entries, "next_after": len(TRANSCRIPT)})
        status = 202 if key == "messages" else 200
        return httpx.Response(status, json=answers[key])

    def controlled(self, agent_id: str, rest: list[str]) -> dict[str, Any]:
        """The agent's view after pause, resume or retire."""
        kind = {"pause": "paused", "retire": "retired"}.get(rest[0] if rest else "")
        why = {"kind": kind, "reason": "looping", "since": "2026-01-01T00:00:00Z"}
        posture = {"paused": "paused", "retired": "stopped"}.get(kind or "", "idle")
        view = make_agent(agent_id=agent_id).model_dump(mode="json")
        return {**view, "posture": posture, "why_not_running": why if kind else None}

    def put_agent(self, agent_id: str) -> httpx.Response:
        body = {"agent_id": agent_id, "loop": "builtin", "callback_url": CALLBACK}
        if agent_id in self.agents:
            return httpx.Response(200, json=body)
        self.agents[agent_id] = body
        return httpx.Response(201, json={**body, "agent_token": "agent-secret"})


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.agents["agent-1"] = {}
    return fake


def run(api: FakeApi, *args: str, token: str | None = TOKEN) -> Any:
    env = {"LONGRUN_URL": URL, "LONGRUN_OPERATOR_TOKEN": token or "", "COLUMNS": "200"}
    obj = Connection(transport=httpx.MockTransport(api))
    return CliRunner().invoke(app, list(args), obj=obj, env=env)


def test_agent_create_shows_the_token_once(api: FakeApi) -> None:
    first = run(api, "agent", "create", "bob")
    assert first.exit_code == 0, first.output
    assert "agent bob created (loop builtin)" in first.stdout
    assert "agent-token agent-secret" in first.stdout
    assert f"callback-url {CALLBACK}" in first.stdout
    again = run(api, "agent", "create", "bob")
    assert "agent bob exists" in again.stdout
    assert "agent-token" not in again.stdout
    put = api.requests[0]
    assert (put.method, put.url.path) == ("PUT", "/v1/agents/bob")
    assert json.loads(put.content) == {"loop": "builtin"}


def test_agent_create_with_its_own_loop(api: FakeApi) -> None:
    assert run(api, "agent", "create", "ext", "--loop", "external").exit_code == 0
    assert json.loads(api.requests[-1].content) == {"loop": "external"}
    assert run(api, "agent", "create", "ext", "--loop", "weird").exit_code == 2


def test_send_posts_the_text(api: FakeApi) -> None:
    result = run(api, "send", "agent-1", "Write the notes", "--work-item", WI)
    assert result.exit_code == 0, result.output
    assert "message msg_1 sent to agent-1" in result.stdout
    sent = api.requests[-1]
    assert sent.url.path == "/v1/agents/agent-1/messages"
    assert json.loads(sent.content) == {"text": "Write the notes", "work_item_id": WI}


def brief(kind: str, text: str, *answers: str) -> dict[str, Any]:
    return {"kind": kind, "text": text, "in_reply_to": list(answers), "id": f"brief_{text}"}


def test_send_wait_prints_the_reply_that_names_the_message(api: FakeApi) -> None:
    api.briefs += [brief("reply", "Not this one.", "msg_0"), brief("result", "Done.", "msg_1")]
    api.briefs.append(brief("reply", "The window is Tuesday.", "msg_0", "msg_1"))
    result = run(api, "send", "agent-1", "When is the window?", "--wait")
    assert result.exit_code == 0, result.output
    assert result.stdout == "The window is Tuesday.\n"
    assert "message msg_1 sent to agent-1" in result.stderr


def test_send_wait_exits_1_when_the_message_was_set_aside(api: FakeApi) -> None:
    api.briefs.append(brief("failure", "1 inbox message(s) set aside", "msg_1"))
    result = run(api, "send", "agent-1", "Hello?", "--wait", "--timeout", "5")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "not delivered: 1 inbox message(s) set aside" in result.stderr


def test_send_wait_exits_1_after_the_timeout(api: FakeApi) -> None:
    result = run(api, "send", "agent-1", "Hello?", "--wait", "--timeout", "0")
    assert result.exit_code == 1
    assert "no reply from agent-1 within 0s" in result.stderr


def test_work_list_passes_the_filter(api: FakeApi) -> None:
    result = run(api, "work", "list", "agent-1", "--filter", "queued", "--limit", "5")
    assert result.exit_code == 0, result.output
    assert WI in result.stdout
    params = api.requests[-1].url.params
    assert (params["filter"], params["limit"], params["include_todo_list"]) == (
        "queued",
        "5",
        "true",
    )


def test_work_list_rejects_an_unknown_filter(api: FakeApi) -> None:
    result = run(api, "work", "list", "agent-1", "--filter", "sleepy")
    assert result.exit_code == 2
    assert not api.requests


def test_work_show_renders_todos_and_waits(api: FakeApi) -> None:
    result = run(api, "work", "show", "agent-1", WI)
    assert result.exit_code == 0, result.output
    assert "[x] Outline" in result.stdout
    assert "[>] Draft" in result.stdout
    assert "Waiting for the reviewer" in result.stdout
    as_json = run(api, "work", "show", "agent-1", WI, "--json")
    assert json.loads(as_json.stdout)["work_item"]["id"] == WI


def test_work_show_prints_process_notes_and_the_uncovered_trace(api: FakeApi) -> None:
    result = run(api, "work", "show", "agent-1", WI)
    assert result.exit_code == 0, result.output
    assert "The vault code is 7319." in result.stdout
    assert "log line seven" in result.stdout
    assert "covered by the note" not in result.stdout
    assert "# WorkItems" not in result.stdout
    shown = json.loads(run(api, "work", "show", "agent-1", WI, "--json").stdout)
    assert shown["work_item"]["process_notes"][0]["text"] == "The vault code is 7319."
    assert [e["seq"] for e in shown["process_trace"]] == [3, 4]


def test_callback_carries_no_operator_token(api: FakeApi, tmp_path: Path) -> None:
    result = run(api, "callback", CALLBACK, "--data", '{"ok": true}', "--idempotency-key", "k1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["disposition"] == "triggered"
    posted = api.requests[-1]
    assert "authorization" not in posted.headers
    assert posted.headers["content-type"] == "application/json"
    assert posted.headers["idempotency-key"] == "k1"
    body = tmp_path / "body.txt"
    body.write_text("build 42 passed")
    run(api, "callback", CALLBACK, "--data", f"@{body}")
    assert api.requests[-1].content == b"build 42 passed"
    assert api.requests[-1].headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("fmt", ["table", "org", "json"])
def test_board_of_one_agent_in_each_format(api: FakeApi, fmt: str) -> None:
    result = run(api, "board", "agent-1", "--format", fmt)
    assert result.exit_code == 0, result.output
    if fmt == "org":
        assert "** WAITING Ship the release notes [1/2]" in result.stdout
        assert "- [X] Outline" in result.stdout
    elif fmt == "json":
        assert json.loads(result.stdout)["agents"][0]["work_items"][0]["id"] == WI
    else:
        assert "WAITING" in result.stdout


def test_board_without_an_id_covers_every_agent(api: FakeApi) -> None:
    api.agents["agent-2"] = {}
    result = run(api, "board", "--format", "org")
    assert result.exit_code == 0, result.output
    assert "* agent agent-1" in result.stdout
    assert "* agent agent-2" in result.stdout


HISTORY: dict[str, Any] = {
    "events": [
        {"seq": 7, "at": "2026-11-27T04:00:00Z", "type": "turn_started", "data": {"turn_id": "t"}},
        {
            "seq": 8,
            "at": "2026-11-27T04:00:01Z",
            "type": "tool_call_started",
            "work_item_id": WI,
            "data": {"call_id": "call_1", "server": "web", "tool": "slow", "turn_id": "t"},
        },
        {"seq": 9, "at": "2026-11-27T04:00:09Z", "type": "turn_started", "data": {"turn_id": "u"}},
    ],
    "next_after": 9,
    "call_outcomes": {"call_1": "unknown"},
}


def test_history_show_names_each_calls_derived_outcome(api: FakeApi) -> None:
    result = run(api, "history", "show", "agent-1", "--after", "6")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1] == (
        f"8  2026-11-27T04:00:01Z  tool_call_started  {WI}  web__slow call_1  outcome: unknown"
    )
    assert len(lines) == 3
    assert api.requests[-1].url.params["after"] == "6"
    raw = run(api, "history", "show", "agent-1", "--json")
    assert json.loads(raw.stdout)["call_outcomes"] == {"call_1": "unknown"}


def test_history_verify_exit_code_follows_ok(api: FakeApi) -> None:
    good = run(api, "history", "verify", "agent-1")
    assert good.exit_code == 0
    assert "ok (12 events" in good.stdout
    api.verify = {"ok": False, "count": 12, "head": "ff", "first_bad_index": 3}
    bad = run(api, "history", "verify", "agent-1")
    assert bad.exit_code == 1
    assert "first bad event at index 3 (seq 4, in Redis)" in bad.stderr
    api.verify = {**api.verify, "first_bad_seq": 4, "archived": 8}
    archived = run(api, "history", "verify", "agent-1")
    assert "first bad event at index 3 (seq 4, in an archived segment)" in archived.stderr


def test_missing_token_explains_where_to_get_one(api: FakeApi) -> None:
    result = run(api, "board", "agent-1", token=None)
    assert result.exit_code == 1
    assert "unauthorized" in result.stderr
    assert "longrun operator-token" in result.stderr


def test_api_error_names_the_kind(api: FakeApi) -> None:
    result = run(api, "work", "list", "nobody")
    assert result.exit_code == 1
    assert "not_found" in result.stderr


def test_unreachable_service_is_one_clear_line() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    obj = Connection(transport=httpx.MockTransport(refuse))
    result = CliRunner().invoke(app, ["board"], obj=obj, env={"LONGRUN_URL": URL})
    assert result.exit_code == 1
    assert "cannot reach longrun" in result.stderr
    assert "longrun up" in result.stderr


def verifying_view() -> dict[str, Any]:
    item = make_work_item(
        acceptance=(
            WebhookCheck(url="https://ci.example/check"),
            OperatorApprovalCheck(set_by=SetBy.OPERATOR),
        ),
        verification={
            "status": "verifying",
            "attempt": 2,
            "checks": [
                {"kind": "webhook", "passed": True, "reason": "green"},
                {"kind": "operator_approval"},
            ],
            "started_at": "2026-01-01T00:00:00Z",
        },
    )
    return work_item_view(item, (), None, include_todo_list=True).to_json()


@pytest.mark.parametrize(
    ("args", "path", "body"),
    [
        (["cancel", "agent-1", WI, "--reason", "moot"], "cancel", {"reason": "moot"}),
        (["approve", "agent-1", WI], "verdict", {"passed": True, "note": ""}),
        (
            ["reject", "agent-1", WI, "--note", "no tests"],
            "verdict",
            {"passed": False, "note": "no tests"},
        ),
        (["put-down", "agent-1", WI, "--reason", "later"], "put-down", {"reason": "later"}),
    ],
    ids=["cancel", "approve", "reject", "put-down"],
)
def test_cancel_approve_reject_put_down_post_to_their_routes(
    api: FakeApi, args: list[str], path: str, body: dict[str, Any]
) -> None:
    result = run(api, *args)
    assert result.exit_code == 0, result.output
    sent = api.requests[-1]
    assert (sent.method, sent.url.path) == ("POST", f"/v1/agents/agent-1/work-items/{WI}/{path}")
    assert json.loads(sent.content) == body


def test_a_verifying_item_shows_its_checks_and_gate() -> None:
    view = verifying_view()
    assert check_lines(view) == [
        "webhook https://ci.example/check (set by agent): passed — green",
        "operator_approval (set by operator): awaited",
    ]
    org = render_org([AgentBoard({"agent_id": "agent-1", "posture": "idle"}, [view])])
    assert "** WAITING " in org
    assert ":GATE: verifying" in org
    assert ":CHECK_2: operator_approval (set by operator): awaited" in org
    detail = work_detail(view)
    console = Console(width=200, record=True)
    console.print(detail)
    text = console.export_text()
    assert "verification    verifying (attempt 2)" in text
    assert "check           operator_approval (set by operator): awaited" in text


@pytest.mark.parametrize(
    ("args", "path", "body", "said"),
    [
        (
            ["pause", "agent-1", "--reason", "looping"],
            "pause",
            {"reason": "looping", "interrupt": False},
            "agent-1: paused · paused: looping",
        ),
        (
            ["pause", "agent-1", "--reason", "looping", "--interrupt"],
            "pause",
            {"reason": "looping", "interrupt": True},
            "agent-1: paused · paused: looping",
        ),
        (["resume", "agent-1"], "resume", None, "agent-1: idle"),
        (
            ["retire", "agent-1", "--reason", "looping"],
            "retire",
            {"reason": "looping"},
            "agent-1: stopped · retired: looping",
        ),
    ],
    ids=["pause", "pause-interrupt", "resume", "retire"],
)
def test_pause_resume_retire_post_to_their_routes(
    api: FakeApi, args: list[str], path: str, body: dict[str, Any] | None, said: str
) -> None:
    api.agents["agent-1"] = {}
    result = run(api, *args)
    assert result.exit_code == 0, result.output
    sent = api.requests[-1]
    assert (sent.method, sent.url.path) == ("POST", f"/v1/agents/agent-1/{path}")
    assert (json.loads(sent.content) if sent.content else None) == body
    assert result.output.strip() == said
