"""Run telemetry over HTTP against a real ledger process: a scripted life (turns recorded as an
executor records them, with an MCP call that errors, builtin tool errors, a crashed turn whose
MCP call has no outcome, a RunCommand call, an operator's rejection) gives exactly its counts and
failed steps, with their seqs; the same once the history is archived into segments; `longrun
runs` prints them; an unknown agent or WorkItem is a 404, a malformed WorkItem id a 400."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from typer.testing import CliRunner

from services.cli.main import app as cli_app
from services.cli.verbs import Connection
from services.scheduler.archiver import ArchiveLimits, Archiver
from services.turn_executor.lease import Leases
from shared.domain.usage import TurnUsage, Usage
from shared.domain.wake import TickKind
from shared.metrics import build_metrics
from shared.runtime import utc_now
from shared.store.client import AnyRedis
from shared.wire import commands as c
from shared.wire.names import Names
from tests.integration.ingress.conftest import OPERATOR_TOKEN, Api
from tests.integration.ingress.test_console_sign_in import browser, new_address, sign_in
from tests.integration.ingress.test_gate_routes import agent_tool, create_item, verdict

SHA = "a" * 64
UNKNOWN_ID = "wi_" + "0" * 26


def _usage(calls: int, tokens: int) -> TurnUsage:
    usage = TurnUsage()
    for _ in range(calls):
        usage = usage.plus_call("openai/m", Usage(input_tokens=tokens, output_tokens=1))
    return usage


async def _turn(
    api: Api,
    leases: Leases,
    agent_id: str,
    n: int,
    middle: list[tuple[str, dict[str, Any]]],
    **finish: Any,
) -> None:
    """One turn through the ledger as an executor records it: BeginTurn, the external calls'
    records (`middle`: ("start"|"finish", fields)), FinishTurn."""
    token = await leases.acquire(agent_id, f"test:{n}")
    assert token is not None
    turn_id = f"turn_{n}"
    common = {"agent_id": agent_id, "turn_id": turn_id, "fencing_token": token}
    commands: list[c.Command] = [
        c.BeginTurn(
            command_id=f"{turn_id}:begin", tick_id=f"tick-{n}", tick_kind=TickKind.INPUT, **common
        )
    ]
    for i, (what, fields) in enumerate(middle):
        if what == "start":
            commands.append(
                c.RecordToolCallStart(
                    command_id=f"{turn_id}:{i}", args_sha256=SHA, **common, **fields
                )
            )
        else:
            commands.append(c.RecordToolCallFinish(command_id=f"{turn_id}:{i}", **common, **fields))
    commands.append(c.FinishTurn(command_id=f"{turn_id}:finish", **common, **finish))
    replies = await api.built.ingress.client.send_all(commands)
    assert [r.error for r in replies] == [None] * len(commands)
    await leases.release(agent_id, f"test:{n}")


async def _life(api: Api, redis: AnyRedis, names: Names) -> tuple[str, str, str]:
    """The scripted life; returns (agent, the WorkItem that broke, the clean one)."""
    created = await api.create_agent()
    agent_id, token = created["agent_id"], created["agent_token"]
    item = await create_item(api, agent_id, acceptance=[{"kind": "operator_approval"}])
    clean = await create_item(api, agent_id)
    leases = Leases(redis, names, ttl_ms=10_000)
    mcp = {"server": "github", "tool": "create_issue"}
    # Turn 1: 3 rounds; an MCP call that errors; 2 builtin calls, one an error.
    await _turn(
        api,
        leases,
        agent_id,
        1,
        [
            ("start", {"call_id": "call_1", **mcp}),
            ("finish", {"call_id": "call_1", "outcome": "error"}),
        ],
        outcome=c.TurnOutcome.YIELDED,
        work_item_id=item,
        rounds=3,
        tool_calls=2,
        tool_errors=("UpdateWorkItem: invalid_argument: no todo 7",),
        usage=_usage(3, 100),
    )
    # Turn 2 crashes after starting an MCP call it never finishes.
    await _turn(
        api,
        leases,
        agent_id,
        2,
        [("start", {"call_id": "call_2", "server": "github", "tool": "merge"})],
        outcome=c.TurnOutcome.FAILED,
        error="provider answered garbage",
        work_item_id=item,
        rounds=1,
        usage=_usage(1, 50),
    )
    # Turn 3 records call_2 unknown (as the executor does), runs a command that passes.
    await _turn(
        api,
        leases,
        agent_id,
        3,
        [
            ("finish", {"call_id": "call_2", "outcome": "unknown"}),
            ("start", {"call_id": "call_3", "server": "sandbox", "tool": "RunCommand"}),
            ("finish", {"call_id": "call_3", "outcome": "ok"}),
        ],
        outcome=c.TurnOutcome.COMPLETED,
        work_item_id=item,
        rounds=2,
        tool_calls=1,
        usage=_usage(2, 10),
    )
    # A clean turn on the other WorkItem.
    await _turn(
        api,
        leases,
        agent_id,
        4,
        [],
        outcome=c.TurnOutcome.YIELDED,
        work_item_id=clean,
        rounds=1,
        tool_calls=1,
        usage=_usage(1, 7),
    )
    # The operator rejects the first attempt, approves the second.
    args = {"work_item_id": item}
    await agent_tool(api, agent_id, token, "CompleteWorkItem", args, assistant_text="v1")
    rejected = await verdict(api, agent_id, item, passed=False, note="no changelog")
    assert rejected.status_code == 200, rejected.text
    await agent_tool(api, agent_id, token, "CompleteWorkItem", args, assistant_text="v2")
    passed = await verdict(api, agent_id, item, passed=True, attempt=2)
    assert passed.json()["outcome"] == "done", passed.text
    return agent_id, item, clean


async def _history(api: Api, agent_id: str) -> list[dict[str, Any]]:
    page = await api.http.get(
        f"/v1/agents/{agent_id}/history", params={"limit": 1000}, headers=api.operator
    )
    assert page.status_code == 200, page.text
    events: list[dict[str, Any]] = page.json()["events"]
    return events


def _seq(events: list[dict[str, Any]], kind: str, **data: Any) -> int:
    (seq,) = [
        e["seq"]
        for e in events
        if e["type"] == kind and all(e["data"].get(k) == v for k, v in data.items())
    ]
    return int(seq)


async def _expect(api: Api, agent_id: str, item: str, clean: str, events: list[Any]) -> None:
    one = await api.http.get(
        f"/v1/agents/{agent_id}/work-items/{item}/telemetry", headers=api.operator
    )
    assert one.status_code == 200, one.text
    run = one.json()
    counts = {k: run[k] for k in ("state", "turns", "rounds", "tool_calls", "tool_errors")}
    counts |= {k: run[k] for k in ("checks_failed", "crashes", "tokens")}
    assert counts == {
        "state": "done",
        "turns": 3,
        "rounds": 6,
        "tool_calls": 6,  # 3 builtin + 3 external
        "tool_errors": 2,  # the MCP error and the builtin one; the unknown outcome is a step
        "checks_failed": 1,
        "crashes": 1,
        "tokens": {"input": 370, "output": 6, "cached_input": 0},
    }
    assert run["wall_ms"] >= 0
    assert run["first_at"] <= run["last_at"]
    assert [(s["seq"], s["kind"]) for s in run["failed_steps"]] == sorted(
        [
            (_seq(events, "tool_call_finished", call_id="call_1"), "tool_error"),
            (_seq(events, "turn_finished", turn_id="turn_1"), "tool_error"),
            (_seq(events, "tool_call_started", call_id="call_2"), "unknown_outcome"),
            (_seq(events, "turn_finished", turn_id="turn_2"), "turn_crashed"),
            (_seq(events, "check_verdict_recorded", passed=False), "check_failed"),
        ]
    )
    details = " | ".join(s["detail"] for s in run["failed_steps"])
    for said in ("github/create_issue: error", "no todo 7", "github/merge: outcome unknown"):
        assert said in details
    assert "provider answered garbage" in details
    assert "no changelog" in details

    listed = await api.http.get(f"/v1/agents/{agent_id}/telemetry", headers=api.operator)
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert [r["work_item_id"] for r in body["runs"]] == [item, clean]  # newest first
    assert body["total"] == 2
    assert "failed_steps" not in body["runs"][0]
    other = body["runs"][1]
    assert (other["state"], other["turns"], other["tool_calls"], other["tool_errors"]) == (
        "open",
        1,
        1,
        0,
    )


async def _console(api: Api, agent_id: str, item: str, clean: str, run: dict[str, Any]) -> None:
    """The console's runs page shows the same runs, and one run's failed steps by seq."""
    async with browser(api.built, new_address()) as http:
        assert (await sign_in(http, OPERATOR_TOKEN)).status_code == 303
        page = await http.get(f"/ui/agents/{agent_id}/runs")
        assert page.status_code == 200, page.text
        assert re.findall(r'<tr data-run="([^"]+)"', page.text) == [item, clean]
        row = page.text.split(f'<tr data-run="{item}"')[1].split("</tr>")[0]
        cells = re.findall(r"<td>([^<]*)</td>", row)
        assert cells[:9] == ["done", "3", "6", "6", "2", "1", "1", "376", str(run["wall_ms"])]
        one = await http.get(f"/ui/agents/{agent_id}/runs", params={"work_item": item})
        assert one.status_code == 200, one.text
        steps = re.findall(r'data-seq="(\d+)" data-kind="([a-z_]+)"', one.text)
        assert steps == [(str(s["seq"]), s["kind"]) for s in run["failed_steps"]]
        assert "github/merge: outcome unknown" in one.text
        missing = await http.get(f"/ui/agents/{agent_id}/runs", params={"work_item": UNKNOWN_ID})
        assert missing.status_code == 404
        agent_page = await http.get(f"/ui/agents/{agent_id}")
        assert f'href="/ui/agents/{agent_id}/runs"' in agent_page.text


async def test_a_scripted_life_gives_exactly_its_counts_hot_and_archived(
    make_api: Any, redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    async with make_api(archive_dir=archive) as api:
        agent_id, item, clean = await _life(api, redis, names)
        events = await _history(api, agent_id)
        await _expect(api, agent_id, item, clean, events)

        # Archive all but the newest events, and the finished WorkItem.
        archiver = Archiver(
            redis,
            names,
            api.built.ingress.client,
            archive,
            build_metrics(CollectorRegistry()),
            limits=ArchiveLimits(hot_events=5, hot_finished=0, hot_days=0),
            clock=utc_now,
        )
        await archiver.archive(agent_id)
        # Every event of the life but the newest few is in a segment now, read from there.
        assert await redis.llen(names.history(agent_id)) <= 10  # and the archive's own events
        assert await redis.llen(names.segments(agent_id)) >= len(events) // 4 - 1
        assert (await _history(api, agent_id))[: len(events)] == events
        await _expect(api, agent_id, item, clean, events)

        # `longrun runs` prints what the routes answer (replayed to its sync client).
        answers = {}
        for path in (
            f"/v1/agents/{agent_id}/telemetry",
            f"/v1/agents/{agent_id}/work-items/{item}/telemetry",
        ):
            answers[path] = (await api.http.get(path, headers=api.operator)).json()
        run = answers[f"/v1/agents/{agent_id}/work-items/{item}/telemetry"]
        await _console(api, agent_id, item, clean, run)

    def replay(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {OPERATOR_TOKEN}"
        return httpx.Response(200, json=answers[request.url.path])

    connection = Connection(transport=httpx.MockTransport(replay))
    runner = CliRunner(env={"LONGRUN_OPERATOR_TOKEN": OPERATOR_TOKEN})
    table = runner.invoke(cli_app, ["runs", agent_id], obj=connection)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split() == [
        "WORK_ITEM", "STATE", "TURNS", "ROUNDS", "CALLS", "ERRORS", "CHECKS_FAILED",
        "CRASHES", "TOKENS", "MS",
    ]  # fmt: skip
    assert lines[1].split() == [
        item,
        "done",
        "3",
        "6",
        "6",
        "2",
        "1",
        "1",
        "376",
        str(run["wall_ms"]),
    ]
    assert lines[2].split()[:2] == [clean, "open"]
    assert len(lines) == 3
    broke = runner.invoke(cli_app, ["runs", agent_id, item], obj=connection)
    assert broke.exit_code == 0, broke.output
    out = broke.output.splitlines()
    assert out[0].startswith(f"{item} state=done turns=3 rounds=6 calls=6 errors=2 ")
    assert "checks_failed=1 crashes=1 tokens=376 " in out[0]
    assert [line.split(":")[0] for line in out[1:]] == [
        f"! seq {s['seq']} {s['kind']}" for s in run["failed_steps"]
    ]


async def test_bad_input_is_a_clear_error(api: Api) -> None:
    created = await api.create_agent()
    agent_id = created["agent_id"]
    for path, status in [
        ("/v1/agents/nobody-here/telemetry", 404),
        (f"/v1/agents/nobody-here/work-items/{UNKNOWN_ID}/telemetry", 404),
        (f"/v1/agents/{agent_id}/work-items/{UNKNOWN_ID}/telemetry", 404),
        (f"/v1/agents/{agent_id}/work-items/not-an-id/telemetry", 400),
        (f"/v1/agents/{agent_id}/telemetry?limit=0", 400),
    ]:
        answer = await api.http.get(path, headers=api.operator)
        assert answer.status_code == status, (path, answer.text)
    missing = await api.http.get(
        f"/v1/agents/{agent_id}/work-items/{UNKNOWN_ID}/telemetry", headers=api.operator
    )
    assert missing.json()["error"]["kind"] == "work_item_not_found"
    unauthorised = await api.http.get(f"/v1/agents/{agent_id}/telemetry")
    assert unauthorised.status_code == 401
