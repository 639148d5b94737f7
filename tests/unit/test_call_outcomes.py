"""External calls' outcomes derived from the history: recorded ones as recorded, unknown once the
turn that started a call is over without recording it, running while that turn runs."""

from __future__ import annotations

from typing import Any

from shared.domain.call_outcomes import CallOutcomes


def event(kind: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "data": data}


def started(call_id: str, turn_id: str) -> dict[str, Any]:
    return event("tool_call_started", call_id=call_id, turn_id=turn_id, server="s", tool="t")


def test_a_recorded_outcome_is_shown_as_recorded() -> None:
    calls = CallOutcomes()
    calls.see([started("c1", "t1"), event("tool_call_finished", call_id="c1", outcome="timeout")])
    assert calls.settled
    assert calls.outcomes == {"c1": "timeout"}


def test_a_call_of_a_finished_turn_without_its_record_is_unknown() -> None:
    calls = CallOutcomes()
    calls.see([started("c1", "t1"), started("c2", "t1")])
    calls.see([event("tool_call_finished", call_id="c1", outcome="ok")], track=False)
    calls.see([event("turn_finished", turn_id="t1", outcome="failed")], track=False)
    assert calls.outcomes == {"c1": "ok", "c2": "unknown"}


def test_a_later_turn_starting_ends_the_calls_of_the_interrupted_one() -> None:
    calls = CallOutcomes()
    calls.see([started("c1", "t1"), event("turn_started", turn_id="t2")])
    assert calls.outcomes == {"c1": "unknown"}


def test_a_call_of_the_running_turn_is_running_and_of_a_dead_turn_unknown() -> None:
    running = CallOutcomes()
    running.see([event("turn_started", turn_id="t1"), started("c1", "t1")])
    assert not running.settled
    assert running.settle("t1") == {"c1": "running"}
    dead = CallOutcomes()
    dead.see([event("turn_started", turn_id="t1"), started("c1", "t1")])
    assert dead.settle(None) == {"c1": "unknown"}


def test_only_calls_started_in_the_tracked_events_are_reported() -> None:
    calls = CallOutcomes()
    calls.see([event("turn_started", turn_id="t1")])
    calls.see([started("c9", "t1")], track=False)
    assert calls.outcomes == {}
    assert calls.settled
