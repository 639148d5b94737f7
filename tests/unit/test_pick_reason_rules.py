"""PickWorkItem's reason: whitespace-only counts as no reason, whatever the switch."""

from __future__ import annotations

import pytest

from services.ledger.rules import Context, LedgerState, decide
from shared.domain.errors import WarningKind
from shared.domain.stored import AgentRecord
from shared.wire.commands import PickWorkItem
from tests.builders import AGENT_ID, at, make_agent, make_work_item, work_item_id

NOW = at(minutes=5)
A, B = work_item_id(1), work_item_id(2)


def ids(prefix: str) -> str:
    return prefix + "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def state_with_current(current: str | None) -> LedgerState:
    items = {i: make_work_item(id=i) for i in (A, B)}
    agent = AgentRecord(
        state=make_agent(current_work_item_id=current),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    return LedgerState(agent_id=AGENT_ID, agent=agent, items=items)


def pick(target: str, reason: object) -> PickWorkItem:
    args: dict[str, object] = {"work_item_id": target}
    if reason is not None:
        args["reason"] = reason
    return PickWorkItem.model_validate({"command_id": "c1", "agent_id": AGENT_ID, "args": args})


@pytest.mark.parametrize(
    ("reason", "stored_reason", "warned"),
    [
        (None, None, True),
        ("", None, True),
        ("   ", None, True),
        ("\t\n ", None, True),
        ("  the other item is urgent ", "the other item is urgent", False),
    ],
)
def test_a_switch_away_from_runnable_work_without_a_real_reason_warns(
    reason: object, stored_reason: str | None, warned: bool
) -> None:
    decision = decide(state_with_current(A), pick(B, reason), Context(now=NOW, new_id=ids))
    kinds = [w.kind for w in decision.warnings]
    assert (WarningKind.MISSING_PICK_REASON in kinds) is warned
    assert decision.result is not None
    assert decision.result["transition"]["reason"] == stored_reason
    (picked,) = [e for e in decision.events if e.message_type == "work_item_picked"]
    assert picked.model_dump()["reason_missing"] is warned
    assert picked.model_dump()["reason"] == stored_reason


def test_clearing_a_blocker_with_a_whitespace_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty reason"):
        PickWorkItem.model_validate(
            {
                "command_id": "c1",
                "agent_id": AGENT_ID,
                "args": {"work_item_id": B, "reason": "  ", "clear_blocker": True},
            }
        )


@pytest.mark.parametrize(("by_operator", "by"), [(False, "agent"), (True, "operator")])
def test_the_pick_event_says_who_picked(by_operator: bool, by: str) -> None:
    command = pick(B, "operator: org edit").model_copy(update={"by_operator": by_operator})
    decision = decide(state_with_current(A), command, Context(now=NOW, new_id=ids))
    (picked,) = [e for e in decision.events if e.message_type == "work_item_picked"]
    assert picked.model_dump()["picked_by"] == by
