"""No endless verification (contract §24), the ledger's part: after LONGRUN_MAX_VERIFY_ATTEMPTS
failed attempts the item is blocked and held for the operator (the agent's tools cannot move it;
the operator's verdict, update or cancel can); a failed check's message spends the wake budget
(a nudge, not fresh input) unless the operator rejected; a review item spends the reviewer's
budget and never resets it."""

from __future__ import annotations

from typing import Any

import pytest

from services.ledger.rules import Context, Decision, LedgerState, decide
from shared.domain.acceptance import OperatorApprovalCheck, VerificationStatus, WebhookCheck
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import MessageOrigin, WorkItemOutcome, WorkItemState
from shared.domain.stored import AgentRecord
from shared.domain.views import SchedulingState, scheduling_state
from shared.wire import commands as c
from tests.builders import AGENT_ID, at, make_agent, make_work_item
from tests.builders import work_item_id as wid
from tests.delegation_world import World
from tests.unit.test_ledger_rules_review import gated as review_gated

WI = wid(1)
HOOK = WebhookCheck(url="http://127.0.0.1:9/check", timeout_s=2)
USED = 4
"""Wake budget the agent has spent before the test: a reset would bring it to 0."""


def agent_state(item: Any) -> LedgerState:
    agent = AgentRecord(
        state=make_agent(wake_budget={"used": USED, "limit": 25}),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    return LedgerState(agent_id=AGENT_ID, agent=agent, items={item.id: item})


def run(state: LedgerState, cmd: Any, attempts: int = 3) -> Decision:
    counter = iter(range(1, 10_000))
    ctx = Context(
        now=at(minutes=5),
        new_id=lambda p: f"{p}{next(counter):026d}",
        max_verify_attempts=attempts,
    )
    return decide(state, cmd, ctx)


def tool(cls: type[c.ToolCommand], args: dict[str, Any], **extra: Any) -> Any:
    body = {"command_id": f"c-{cls.__name__}-{len(str(args))}", "agent_id": AGENT_ID}
    return cls.model_validate({**body, "args": args, **extra})


def complete(attempt: int) -> c.CompleteWorkItem:
    return c.CompleteWorkItem.model_validate(
        {
            "command_id": f"complete-{attempt}",
            "agent_id": AGENT_ID,
            "args": {"work_item_id": WI},
            "report_text": f"report {attempt}",
        }
    )


def webhook_fails(attempt: int) -> c.RecordVerdict:
    return c.RecordVerdict.model_validate(
        {
            "command_id": f"verdict-{attempt}",
            "agent_id": AGENT_ID,
            "work_item_id": WI,
            "attempt": attempt,
            "check_index": 0,
            "source": "webhook",
            "passed": False,
            "reason": "3 tests fail",
        }
    )


def operator_verdict(passed: bool, note: str = "looked at it myself") -> c.RecordVerdict:
    return c.RecordVerdict.model_validate(
        {
            "command_id": f"op-{passed}",
            "agent_id": AGENT_ID,
            "work_item_id": WI,
            "source": "operator",
            "passed": passed,
            "reason": note,
        }
    )


def failed_times(count: int, attempts: int = 3) -> tuple[LedgerState, list[Decision]]:
    state = agent_state(make_work_item(id=WI, acceptance=(HOOK,)))
    decisions = []
    for attempt in range(1, count + 1):
        state = run(state, complete(attempt), attempts).state.committed()
        decision = run(state, webhook_fails(attempt), attempts)
        decisions.append(decision)
        state = decision.state.committed()
    return state, decisions


def test_a_failed_check_spends_the_wake_budget_instead_of_resetting_it() -> None:
    state, (decision,) = failed_times(1)
    agent = state.require_agent()
    assert agent.nudge_pending  # the turn it wakes spends one unit
    assert agent.state.wake_budget.used == USED
    assert "wake_budget_reset" not in [e.message_type for e in decision.events]
    (message,) = decision.side.inbox_push
    assert message.origin is MessageOrigin.ACCEPTANCE
    item = state.items[WI]
    assert not item.held_for_operator
    assert item.blocked_by is None
    assert scheduling_state(item, []) is not SchedulingState.BLOCKED


def test_the_third_failed_attempt_blocks_the_item_for_the_operator() -> None:
    state, decisions = failed_times(3)
    item = state.items[WI]
    assert item.held_for_operator
    assert item.state is WorkItemState.OPEN
    assert item.blocked_by == "acceptance failed 3 times: webhook: 3 tests fail"
    assert item.recheck_at is None  # nothing wakes the agent for it again
    assert scheduling_state(item, []) is SchedulingState.BLOCKED
    assert item.verification is not None
    assert (item.verification.attempt, item.verification.failed_attempts) == (3, 3)
    texts = [d.side.inbox_push[0].text for d in decisions]
    assert all("open again" in t for t in texts[:2])
    assert "only the operator can move it" in texts[2]


def test_the_limit_is_the_setting() -> None:
    state, _ = failed_times(1, attempts=1)
    assert state.items[WI].held_for_operator
    state, _ = failed_times(4, attempts=5)
    assert not state.items[WI].held_for_operator


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (c.CompleteWorkItem, {"work_item_id": WI}),
        (c.UpdateWorkItem, {"work_item_id": WI, "blocked_by": None}),
        (c.UpdateWorkItem, {"work_item_id": WI, "acceptance": []}),
        (c.CancelWorkItem, {"work_item_id": WI, "reason": "give up"}),
        (c.PickWorkItem, {"work_item_id": WI, "clear_blocker": True, "reason": "retry"}),
    ],
    ids=["complete", "unblock", "drop-checks", "cancel", "pick-clearing"],
)
def test_the_agent_cannot_move_a_held_item(cls: type[c.ToolCommand], args: dict[str, Any]) -> None:
    state, _ = failed_times(3)
    with pytest.raises(DomainError) as refused:
        run(state, tool(cls, args))
    assert refused.value.kind is ErrorKind.ACCEPTANCE_FAILED
    assert "only the operator" in refused.value.message


def test_the_agent_may_still_look_at_a_held_item() -> None:
    state, _ = failed_times(3)
    picked = run(state, tool(c.PickWorkItem, {"work_item_id": WI}))
    assert picked.state.current_id == WI
    assert picked.state.items[WI].held_for_operator


def test_the_operators_approval_completes_a_held_item_with_its_last_report() -> None:
    state, _ = failed_times(3)
    decision = run(state, operator_verdict(True))
    item = decision.state.items[WI]
    assert item.outcome is WorkItemOutcome.DONE
    assert item.result_summary == "report 3"
    assert item.verification is not None
    assert item.verification.status is VerificationStatus.PASSED
    assert all(v.passed for v in item.verification.checks)
    assert item.verification.checks[0].reason == "operator override: looked at it myself"
    assert "acceptance_passed" in [e.message_type for e in decision.events]


def test_the_operators_rejection_gives_the_agent_fresh_attempts_and_resets_its_budget() -> None:
    state, _ = failed_times(3)
    decision = run(state, operator_verdict(False, "the tests are flaky, try again"))
    item = decision.state.items[WI]
    assert not item.held_for_operator
    assert item.blocked_by is None
    assert item.verification is not None
    assert item.verification.failed_attempts == 0
    assert decision.state.require_agent().state.wake_budget.used == 0  # operator input
    (message,) = decision.side.inbox_push
    assert "the tests are flaky, try again" in message.text
    state = decision.state.committed()
    again = run(state, complete(4)).state.committed()
    assert again.items[WI].is_verifying


def test_the_operators_update_or_cancel_moves_a_held_item() -> None:
    state, _ = failed_times(3)
    updated = run(state, tool(c.UpdateWorkItem, {"work_item_id": WI}, by_operator=True))
    item = updated.state.items[WI]
    assert not item.held_for_operator
    assert item.blocked_by is None
    blocked = run(
        state,
        tool(c.UpdateWorkItem, {"work_item_id": WI, "blocked_by": "mine now"}, by_operator=True),
    )
    assert blocked.state.items[WI].blocked_by == "mine now"
    assert not blocked.state.items[WI].held_for_operator
    cancel = tool(c.CancelWorkItem, {"work_item_id": WI, "reason": "dropped"}, by_operator=True)
    assert run(state, cancel).state.items[WI].outcome is WorkItemOutcome.CANCELLED


def test_an_operator_rejection_is_fresh_input() -> None:
    state = agent_state(make_work_item(id=WI, acceptance=(OperatorApprovalCheck(),)))
    state = run(state, complete(1)).state.committed()
    decision = run(state, operator_verdict(False, "not yet"))
    assert decision.state.require_agent().state.wake_budget.used == 0
    assert not decision.state.require_agent().nudge_pending


# ---------------------------------------------------------------- reviews


def test_a_review_item_spends_the_reviewers_budget_and_never_resets_it() -> None:
    w = World()
    w.add_agent("writer")
    w.add_agent("reviewer")
    spent = w.states["reviewer"].require_agent()
    budget = spent.state.wake_budget.model_copy(update={"used": USED})
    w.states["reviewer"] = w.states["reviewer"].with_agent(
        spent.model_copy(update={"state": spent.state.model_copy(update={"wake_budget": budget})})
    )
    item = review_gated(w, "writer", "reviewer")
    w.complete("writer", item, "Release 1.2")
    w.deliver_all()
    (review,) = w.delegated_items("reviewer")
    reviewer = w.states["reviewer"].require_agent()
    assert reviewer.state.wake_budget.used == USED
    assert reviewer.nudge_pending
    assert "wake_budget_reset" not in [e.message_type for e in w.events.get("reviewer", [])]
    assert review.delegated_from is not None


def test_a_rejecting_reviewer_holds_the_item_after_the_limit() -> None:
    w = World(max_verify_attempts=2)
    w.add_agent("writer")
    w.add_agent("reviewer")
    item = review_gated(w, "writer", "reviewer")
    for attempt in (1, 2):
        assert not isinstance(w.complete("writer", item, f"draft {attempt}"), DomainError)
        w.deliver_all()
        review = next(r for r in w.delegated_items("reviewer") if r.is_open_review)
        verdict = {"work_item_id": review.id, "passed": False, "reason": "not good enough"}
        w.tool("reviewer", c.SubmitVerdict, verdict)
        w.deliver_all()
        assert w.states["writer"].require_agent().nudge_pending
    held = w.item("writer", item)
    assert held.held_for_operator
    assert held.blocked_by is not None
    assert held.blocked_by.startswith("acceptance failed 2 times: reviewer_agent")
    refused = w.complete("writer", item, "draft 3")
    assert isinstance(refused, DomainError)
    assert refused.kind is ErrorKind.ACCEPTANCE_FAILED
