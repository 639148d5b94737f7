"""The agent-level why-not-running for verifying items: with nothing runnable, the agent's next
turn waits for its verifying items' checks, and the reason names them per item and attempt."""

from __future__ import annotations

from typing import Any

from shared.domain.records import Posture, WakeBudget, WorkItem
from shared.domain.usage import why_not_running
from tests.builders import make_work_item
from tests.builders import work_item_id as wid
from tests.unit.test_ledger_rules_acceptance import HOOK, NOW, verifying


def why(
    verifying_items: tuple[WorkItem, ...], runnable: int = 0, budget: WakeBudget | None = None
) -> Any:
    return why_not_running(
        missing=None,
        outage=None,
        spent=None,
        limit=None,
        wake_budget=budget or WakeBudget(limit=25),
        posture=Posture.IDLE,
        now=NOW,
        runnable=runnable,
        verifying=verifying_items,
    )


def a_verifying_item() -> WorkItem:
    decision = verifying()
    (item,) = decision.state.items.values()
    return item


def test_nothing_runnable_names_each_verifying_items_awaited_checks() -> None:
    item = a_verifying_item()
    assert why((item,)) == {
        "kind": "verifying",
        "work_items": [
            {
                "work_item_id": item.id,
                "attempt": 1,
                "awaiting": [f"webhook {HOOK.url}", "operator_approval"],
            }
        ],
    }


def test_a_runnable_item_means_verifying_is_not_why_the_agent_is_idle() -> None:
    assert why((a_verifying_item(),), runnable=1) is None


def test_items_that_are_not_verifying_give_no_reason() -> None:
    assert why((make_work_item(id=wid(2)),)) is None
    assert why(()) is None


def test_an_agent_wide_hold_comes_before_the_verifying_items() -> None:
    spent = why((a_verifying_item(),), budget=WakeBudget(used=25, limit=25))
    assert spent is not None
    assert spent["kind"] == "wake_budget_exhausted"
