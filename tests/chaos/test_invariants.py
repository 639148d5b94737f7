"""The invariant checks themselves catch what they are for: a duplicated or missing effect, a
callback counted twice, overlapping turns, a WorkItem left open. Pure, on built histories."""

from __future__ import annotations

from typing import Any

from tests.bench.loadgen import Accepted
from tests.chaos.invariants import (
    Findings,
    check_callbacks,
    check_completions,
    check_messages,
    check_turns,
)

AGENT = "a1"


def event(kind: str, work_item_id: str | None = None, **data: Any) -> dict[str, Any]:
    return {"type": kind, "work_item_id": work_item_id, "data": data}


def started(turn: str, fence: int, interrupted: str | None = None) -> dict[str, Any]:
    return event("turn_started", turn_id=turn, fencing_token=fence, interrupted_turn_id=interrupted)


def test_messages_applied_once_pass_and_twice_fail() -> None:
    accepted = Accepted()
    accepted.messages[AGENT] += ["m1", "m2"]
    once = [event("operator_message_received", message_id=m) for m in ("m1", "m2")]
    good, bad, lost = Findings(), Findings(), Findings()
    check_messages(AGENT, once, accepted, good)
    check_messages(AGENT, [*once, once[0]], accepted, bad)
    check_messages(AGENT, once[:1], accepted, lost)
    assert good.violations == []
    assert any("m1 applied 2" in v for v in bad.violations)
    assert any("m2 applied 0" in v for v in lost.violations)


def test_a_message_beyond_the_accepted_ones_needs_a_lost_answer() -> None:
    accepted = Accepted()
    accepted.messages[AGENT].append("m1")
    history = [event("operator_message_received", message_id=m) for m in ("m1", "m0")]
    unexplained, explained = Findings(), Findings()
    check_messages(AGENT, history, accepted, unexplained)
    accepted.ambiguous_messages[AGENT] = 1
    check_messages(AGENT, history, accepted, explained)
    assert unexplained.violations
    assert explained.violations == []


def test_callbacks_counted_exactly_once() -> None:
    accepted = Accepted()
    accepted.callbacks[AGENT] += ["k1", "k2"]
    triggered = event("wait_triggered", "w1", wait_id="x", delivery_id="k1", source="http")
    inbox = event("callback_delivered_to_inbox", delivery_id="k2", message_id="i", source="stream")
    good, twice, missing = Findings(), Findings(), Findings()
    check_callbacks(AGENT, [triggered, inbox], accepted, good)
    check_callbacks(AGENT, [triggered, triggered, inbox], accepted, twice)
    check_callbacks(AGENT, [triggered], accepted, missing)
    assert good.violations == []
    assert any("k1 counted 2" in v for v in twice.violations)
    assert any("k2 counted 0" in v for v in missing.violations)


def test_turns_must_not_overlap_and_fences_must_grow() -> None:
    finished = event("turn_finished", turn_id="t1", outcome="yielded")
    sequential = [started("t1", 1), finished, started("t2", 2)]
    sequential.append(event("turn_finished", turn_id="t2", outcome="yielded"))
    recovered = [started("t1", 1), started("t2", 2, interrupted="t1")]
    recovered.append(event("turn_finished", turn_id="t2", outcome="yielded"))
    overlapping = [started("t1", 1), started("t2", 2), finished]
    stale_fence = [started("t1", 2), finished, started("t2", 2)]
    results = {}
    for name, history in {
        "sequential": sequential,
        "recovered": recovered,
        "overlapping": overlapping,
        "stale_fence": stale_fence,
    }.items():
        results[name] = Findings()
        check_turns(AGENT, history, results[name])
    assert results["sequential"].violations == []
    assert results["recovered"].violations == []
    assert any("while t1 was open" in v for v in results["overlapping"].violations)
    assert any("fencing token 2 after 2" in v for v in results["stale_fence"].violations)
    assert results["recovered"].figures["interrupted turns"] == 1


def test_every_work_item_completes_once() -> None:
    accepted = Accepted()
    accepted.completed[AGENT].append("w1")
    created = [event("work_item_created", "w1"), event("work_item_created", "w2")]
    done = [event("work_item_completed", "w1"), event("work_item_completed", "w2")]
    good, open_left, twice = Findings(), Findings(), Findings()
    check_completions(AGENT, [*created, *done], accepted, good)
    check_completions(AGENT, [*created, done[0]], accepted, open_left)
    check_completions(AGENT, [*created, *done, done[0]], accepted, twice)
    assert good.violations == []
    assert any("w2 completed 0" in v for v in open_left.violations)
    assert any("w1 completed 2" in v for v in twice.violations)


def test_an_open_item_is_a_violation_unless_the_crash_rule_blocked_it() -> None:
    created = [event("work_item_created", "w1"), event("work_item_created", "w2")]
    items = {"w1": {"blocked_by": "turn failed 3 times: boom"}, "w2": {"blocked_by": "Wait"}}
    found = Findings()
    check_completions(AGENT, created, Accepted(), found, items=items)
    assert found.figures["work items blocked by the crash rule"] == 1
    assert found.violations == [f"{AGENT}: WorkItem w2 completed 0 times"]


def test_a_cancelled_item_has_ended_but_only_once() -> None:
    created = [event("work_item_created", "w1")]
    cancelled = event("work_item_cancelled", "w1")
    once, twice = Findings(), Findings()
    check_completions(AGENT, [*created, cancelled], Accepted(), once)
    check_completions(
        AGENT, [*created, cancelled, event("work_item_completed", "w1")], Accepted(), twice
    )
    assert once.violations == []
    assert once.figures["work items cancelled"] == 1
    assert any("w1 completed 2" in v for v in twice.violations)
