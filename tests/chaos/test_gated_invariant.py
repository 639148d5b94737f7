"""The acceptance gate's chaos invariant catches what it is for: a gated WorkItem done without
every check passing for its last attempt, or announced passed by the wrong attempt or twice.
Pure, on built items and histories."""

from __future__ import annotations

from typing import Any

from tests.chaos.gated import check_gate
from tests.chaos.invariants import Findings

AGENT = "a1"
WI = "wi_1"


def item(status: str = "passed", attempt: int = 2, *verdicts: bool | None) -> dict[str, Any]:
    checks = [{"kind": "webhook", "passed": v} for v in (verdicts or (True,))]
    return {
        "id": WI,
        "outcome": "done",
        "acceptance": [{"kind": "webhook", "url": "http://hook"}],
        "verification": {"status": status, "attempt": attempt, "checks": checks},
    }


def passed(attempt: int) -> dict[str, Any]:
    return {"type": "acceptance_passed", "work_item_id": WI, "data": {"attempt": attempt}}


def violations(items: dict[str, Any], *docs: dict[str, Any]) -> list[str]:
    found = Findings()
    check_gate(AGENT, list(docs), items, found)
    return found.violations


def test_done_after_one_pass_of_the_last_attempt_holds() -> None:
    failed = {"type": "acceptance_failed", "work_item_id": WI, "data": {"attempt": 1}}
    assert violations({WI: item()}, failed, passed(2)) == []


def test_done_without_a_passing_verification_is_a_violation() -> None:
    (found,) = violations({WI: item("failed", 2, False)}, passed(2))
    assert "done with verification failed" in found
    (unjudged,) = violations({WI: item("passed", 2, True, None)}, passed(2))
    assert "[True, None]" in unjudged


def test_a_pass_of_an_older_attempt_or_two_passes_are_violations() -> None:
    (older,) = violations({WI: item()}, passed(1))
    assert "acceptance_passed by attempt {1: 1}" in older
    (twice,) = violations({WI: item()}, passed(2), passed(2))
    assert "{2: 2}" in twice
    (never,) = violations({WI: item()})
    assert "{}" in never


def test_items_without_checks_or_not_done_are_not_looked_at() -> None:
    ungated = {**item("failed"), "acceptance": []}
    open_item = {**item("failed"), "outcome": None}
    assert violations({WI: ungated, "wi_2": {**open_item, "id": "wi_2"}}) == []
