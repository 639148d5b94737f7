"""CompleteWorkItem's records: the completion warnings travel with the delivery summary."""

from __future__ import annotations

import pytest

from services.ledger.rules import Context, LedgerState, decide
from shared.domain.stored import AgentRecord
from shared.wire.commands import CompleteWorkItem
from tests.builders import AGENT_ID, at, make_agent, make_todo, make_work_item, work_item_id

NOW = at(minutes=5)
WI = work_item_id(1)


def ids(prefix: str) -> str:
    return prefix + "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def state_with(todos: list[tuple[str, str]]) -> LedgerState:
    item = make_work_item(id=WI, todo_list=[make_todo(t, s) for t, s in todos])
    agent = AgentRecord(
        state=make_agent(current_work_item_id=WI),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    return LedgerState(agent_id=AGENT_ID, agent=agent, items={WI: item})


def complete(report: str | None) -> CompleteWorkItem:
    return CompleteWorkItem.model_validate(
        {
            "command_id": "c1",
            "agent_id": AGENT_ID,
            "args": {"work_item_id": WI},
            "report_text": report,
            "turn_id": "turn_1",
        }
    )


@pytest.mark.parametrize(
    ("todos", "report", "summary_warnings"),
    [
        ([], "Shipped.", ()),
        ([("a", "completed")], "Shipped.", ()),
        ([("a", "pending")], "Shipped.", ("unfinished_todos",)),
        ([("a", "completed"), ("b", "in_progress")], "Shipped.", ("unfinished_todos",)),
        ([("a", "pending")], None, None),
        ([], "   ", None),
    ],
)
def test_the_delivery_summary_carries_the_completion_warnings(
    todos: list[tuple[str, str]], report: str | None, summary_warnings: tuple[str, ...] | None
) -> None:
    decision = decide(state_with(todos), complete(report), Context(now=NOW, new_id=ids))
    tool_warnings = tuple(w.kind.value for w in decision.warnings)
    if summary_warnings is None:
        # No report: nothing is synthesized, the warning is on the answer only.
        assert decision.side.summaries == ()
        assert "missing_completion_report" in tool_warnings
        return
    (summary,) = decision.side.summaries
    assert summary.warnings == summary_warnings == tool_warnings
    (recorded,) = [e for e in decision.events if e.message_type == "delivery_summary_recorded"]
    assert recorded.model_dump()["summary"]["warnings"] == summary_warnings
