"""Run telemetry folded from history events (pure): which WorkItem a turn and its calls count
for, a running turn's call is not unknown, and how a run's state is read."""

from __future__ import annotations

from typing import Any

from shared.domain.telemetry import telemetry

A, B = "wi_" + "A" * 26, "wi_" + "B" * 26


def history(*events: tuple[str, str | None, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "seq": n,
            "type": kind,
            "at": f"2026-11-29T09:00:{n:02d}Z",
            "work_item_id": item,
            "data": data,
        }
        for n, (kind, item, data) in enumerate(events, start=1)
    ]


def call(call_id: str, turn: str) -> dict[str, Any]:
    return {"call_id": call_id, "turn_id": turn, "server": "s", "tool": "t"}


def test_a_turn_counts_for_the_item_its_finish_names_with_its_calls() -> None:
    events = history(
        ("work_item_created", A, {}),
        ("work_item_created", B, {}),
        ("turn_started", A, {"turn_id": "t1"}),
        ("tool_call_started", A, call("c1", "t1")),
        ("tool_call_finished", A, {"call_id": "c1", "outcome": "timeout"}),
        ("turn_finished", B, {"turn_id": "t1", "outcome": "yielded", "tool_calls": 2}),
    )
    runs = {r.work_item_id: r for r in telemetry(events)}
    assert (runs[B].turns, runs[B].tool_calls, runs[B].tool_errors) == (1, 3, 1)
    assert runs[B].wall_ms == 3000
    assert [(s.seq, s.kind) for s in runs[B].failed_steps] == [(5, "tool_error")]
    assert (runs[A].turns, runs[A].tool_calls) == (0, 0)
    assert [r.work_item_id for r in telemetry(events)] == [B, A]  # newest first


def test_a_call_of_the_running_turn_is_not_unknown_and_one_of_a_dead_turn_is() -> None:
    events = history(
        ("turn_started", A, {"turn_id": "t1"}),
        ("tool_call_started", A, call("c1", "t1")),
    )
    (running,) = telemetry(events, running_turn_id="t1")
    assert (running.tool_calls, running.failed_steps) == (1, [])
    (dead,) = telemetry(events, running_turn_id=None)
    assert [(s.seq, s.kind) for s in dead.failed_steps] == [(2, "unknown_outcome")]
    assert dead.tool_errors == 0


def test_state_is_read_from_the_items_end() -> None:
    events = history(
        ("work_item_created", A, {}),
        ("work_item_completed", A, {"work_item": {"outcome": "done"}}),
        ("work_item_created", B, {}),
        ("work_item_cancelled", B, {"work_item": {"outcome": "cancelled"}}),
    )
    assert {r.work_item_id: r.state for r in telemetry(events)} == {A: "done", B: "cancelled"}
    assert telemetry(history(("work_item_created", A, {})))[0].state == "open"
