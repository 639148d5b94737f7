"""The MCP rounds' invariants on hand-made histories and server logs: each breach is named."""

from __future__ import annotations

from typing import Any

from tests.chaos.invariants import Findings
from tests.chaos.mcp_rounds import calls_in, check_server_log


def started(call_id: str) -> dict[str, Any]:
    return {"type": "tool_call_started", "data": {"call_id": call_id}}


def finished(call_id: str, outcome: str = "ok") -> dict[str, Any]:
    return {"type": "tool_call_finished", "data": {"call_id": call_id, "outcome": outcome}}


def test_finished_and_unknown_calls_hold_and_are_counted() -> None:
    found = Findings()
    docs = [started("a"), finished("a"), started("b"), finished("b", "unknown"), started("c")]
    assert calls_in("ag", docs, found) == {"a", "b", "c"}
    check_server_log([{"call_id": "a"}, {"call_id": "c"}], {"a", "b", "c"}, found)
    assert found.violations == []
    assert found.figures["mcp calls ok"] == 1
    assert found.figures["mcp calls unknown"] == 1
    assert found.figures["mcp calls unknown, derived"] == 1


def test_a_call_started_or_finished_twice_or_finished_unstarted_is_a_violation() -> None:
    found = Findings()
    docs = [started("a"), started("a"), started("b"), finished("b"), finished("b"), finished("c")]
    calls_in("ag", docs, found)
    assert sorted(found.violations) == [
        "ag: call a started 2x, finished 0x",
        "ag: call b started 1x, finished 2x",
        "ag: call c started 0x, finished 1x",
    ]


def test_a_call_received_twice_or_never_recorded_is_a_violation() -> None:
    found = Findings()
    check_server_log([{"call_id": "a"}, {"call_id": "a"}, {"call_id": "z"}], {"a"}, found)
    assert found.violations == [
        "mcp server: call a received 2 times",
        "mcp server: call z received but never recorded as started",
    ]
