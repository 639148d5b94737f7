"""`ToolGateway.call_all`: one model round's calls answered exactly as one call at a time would
answer them, with each run of writes sent in one round trip and every read answered after the
writes before it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.domain.tools import ToolEnvelope
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.tool_gateway import Call, ToolGateway
from shared.wire import commands as c
from tests.integration.conftest import Pump, watch_writes


def shape(envelope: ToolEnvelope) -> tuple[Any, ...]:
    """What must match between the two ways of calling (ids and tokens differ by agent)."""
    result = envelope.result or {}
    item = result.get("work_item") or {}
    wait = result.get("wait") or {}
    return (
        envelope.tool_name,
        envelope.status,
        envelope.error.kind if envelope.error else None,
        sorted(w.kind for w in envelope.warnings),
        sorted(result),
        item.get("objective"),
        item.get("is_current"),
        [t["state"] for t in item.get("todo_list") or []],
        "callback_url" in wait,
        result.get("returned"),
    )


def round_of(item: str) -> list[tuple[str, object]]:
    return [
        ("PickWorkItem", {"work_item_id": item}),
        (
            "UpdateWorkItem",
            {"work_item_id": item, "todo_list": [{"text": "a", "state": "completed"}]},
        ),
        ("UpdateWorkItem", {"work_item_id": "wi_" + "1" * 26, "objective": "none such"}),
        ("UpdateWorkItem", {"todo_list": "not a list"}),
        ("GetWorkItem", {"work_item_id": item, "include_todo_list": True}),
        ("WaitFor", {"reason": "the reviewer's answer", "wake": "external"}),
        ("UpdateWorkItem", {"work_item_id": item, "objective": "Renamed while waiting"}),
        ("ListWorkItems", {"filter": "open"}),
    ]


async def test_a_batch_answers_as_one_call_at_a_time(
    pump: Pump, client: LedgerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = ToolGateway(
        client, agent_home=tmp_path, callback_base_url="http://x", clock=utc_now, new_id=new_id
    )
    answers: dict[str, list[ToolEnvelope]] = {}
    writes: list[list[str]] = []
    for agent in ("one-by-one", "batched"):
        ensure = c.EnsureAgent(
            command_id=f"ensure-{agent}",
            agent_id=agent,
            agent_token_hash="a" * 64,
            callback_token_hash="b" * 64,
        )
        assert (await client.send(ensure)).error is None
        args = {"objective": "Ship it", "todo_list": [{"text": "a"}]}
        created = await gateway.call(agent, "CreateWorkItem", args, command_id=new_id("c_"))
        assert created.result is not None, created
        item = created.result["work_item"]["id"]
        calls = [Call(n, a, f"{agent}:{i}") for i, (n, a) in enumerate(round_of(item))]
        if agent == "one-by-one":
            answers[agent] = [
                await gateway.call(agent, x.tool_name, x.raw_args, command_id=x.command_id)
                for x in calls
            ]
            continue
        writes = watch_writes(client, monkeypatch)
        answers[agent] = await gateway.call_all(agent, calls)

    expected = [shape(e) for e in answers["one-by-one"]]
    assert [shape(e) for e in answers["batched"]] == expected
    assert [status for _, status, *_ in expected] == [
        "success",
        "success",
        "error",
        "error",
        "success",
        "success",
        "success",
        "success",
    ]
    # The read after the first writes sees them; the bad arguments never left the process.
    assert expected[4][7] == ["completed"]
    assert writes == [
        ["PickWorkItem", "UpdateWorkItem", "UpdateWorkItem"],
        ["WaitFor", "UpdateWorkItem"],
    ]
