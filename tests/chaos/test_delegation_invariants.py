"""The delegation invariants catch what they are for: a delegation still running or ended twice,
a result delivered twice or for a delegation its parent cancelled, a child left running under a
finished parent. Pure, on built records."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.chaos.delegation import Delegation
from tests.chaos.delegation_checks import _nothing_running_below, _one_status, _result_once
from tests.chaos.invariants import Findings

D = Delegation("dlg_1", "p", "c", "results")


def record(status: str, **more: Any) -> dict[str, Any]:
    return {"status": status, "parent_work_item_id": "wp", "child_work_item_id": "wc", **more}


def ended(cause: str) -> dict[str, Any]:
    return {"delegation_id": "dlg_1", "cause": cause}


def test_a_delegation_ends_once_in_one_status() -> None:
    checks = {
        "ok": (record("succeeded"), record("succeeded"), [ended("child_result")]),
        "running": (record("running"), record("running"), []),
        "twice": (record("succeeded"), record("succeeded"), [ended("child_result")] * 2),
        "disagree": (record("failed"), record("succeeded"), [ended("child_result")]),
        "parent_first": (record("cancelled"), record("succeeded"), [ended("cancelled")]),
    }
    results = {}
    for name, (mine, theirs, events) in checks.items():
        found = Findings()
        _one_status(D, mine, theirs, {"p": events, "c": []}, found)
        results[name] = found.violations
    assert results["ok"] == results["parent_first"] == []
    assert any("running after quiescence" in v for v in results["running"])
    assert any("finished 2 times" in v for v in results["twice"])
    assert any("parent says failed, child says succeeded" in v for v in results["disagree"])


def test_a_result_reaches_its_parent_once_and_a_cancelled_one_never() -> None:
    def violations(cause: str, messages: int) -> list[str]:
        found = Findings()
        inbox = {"p": Counter({"dlg_1": messages})}
        _result_once(D, record("x"), {"p": [ended(cause)]}, inbox, found)
        return found.violations

    assert violations("child_result", 1) == []
    assert violations("cancelled_by_parent", 0) == []
    assert violations("child_result", 2) != []
    assert violations("child_result", 0) != []
    assert violations("parent_ended", 1) != []


def test_no_child_runs_under_a_finished_parent() -> None:
    def violations(child: dict[str, Any] | None, theirs: str = "running") -> list[str]:
        found = Findings()
        items = {"p": {"wp": {"state": "completed"}}, "c": {"wc": child} if child else {}}
        _nothing_running_below(D, record("cancelled"), record(theirs), items, found)
        return found.violations

    assert violations({"id": "wc", "state": "completed"}) == []
    assert violations(None) == []  # the cancel overtook the creation
    assert violations({"id": "wc", "state": "open"}, theirs="failed") == []  # the crash rule
    assert violations({"id": "wc", "state": "open"}) != []
