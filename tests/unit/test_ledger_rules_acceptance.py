"""The acceptance gate's ledger rules: who may set checks, CompleteWorkItem entering
verification, verdicts passing (done, report promoted once) or failing (runnable again, one
inbox message), attempts, and the tools refused while an item is verifying."""

from __future__ import annotations

from typing import Any

import pytest

from services.ledger.rules import Context, Decision, LedgerState, decide
from shared.domain.acceptance import (
    OperatorApprovalCheck,
    SetBy,
    TodosDoneCheck,
    VerificationStatus,
    WebhookCheck,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import (
    MessageOrigin,
    TodoItem,
    TodoState,
    WorkItem,
    WorkItemOutcome,
    WorkItemState,
)
from shared.domain.stored import AgentRecord
from shared.domain.views import SchedulingState, scheduling_state
from shared.wire import commands as c
from tests.builders import AGENT_ID, at, make_agent, make_plan_artifact, make_work_item
from tests.builders import work_item_id as wid

NOW = at(minutes=5)
WI = wid(1)
HOOK = WebhookCheck(url="http://127.0.0.1:9/check", timeout_s=2)


def ids(prefix: str) -> str:
    return prefix + "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def state_with(item: WorkItem, *, current: str | None = WI) -> LedgerState:
    agent = AgentRecord(
        state=make_agent(current_work_item_id=current),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    return LedgerState(agent_id=AGENT_ID, agent=agent, items={item.id: item})


def gated(*checks: Any, todos: tuple[TodoItem, ...] = ()) -> WorkItem:
    return make_work_item(id=WI, acceptance=checks, todo_list=todos)


def tool(cls: type[c.ToolCommand], args: dict[str, Any], **extra: Any) -> Any:
    body = {"command_id": "c1", "agent_id": AGENT_ID, "args": args, **extra}
    return cls.model_validate(body)


def complete(report: str = "All tests pass.") -> c.CompleteWorkItem:
    return tool(c.CompleteWorkItem, {"work_item_id": WI}, report_text=report)


def verdict(passed: bool, **fields: Any) -> c.RecordVerdict:
    body = {"command_id": "v1", "agent_id": AGENT_ID, "work_item_id": WI, "passed": passed}
    return c.RecordVerdict.model_validate({"source": "webhook", **body, **fields})


def run(state: LedgerState, cmd: Any) -> Decision:
    return decide(state, cmd, Context(now=NOW, new_id=ids))


def then(decision: Decision, cmd: Any) -> Decision:
    return run(decision.state.committed(), cmd)


def event_types(decision: Decision) -> list[str]:
    return [e.message_type for e in decision.events]


def verifying() -> Decision:
    return run(state_with(gated(TodosDoneCheck(), HOOK, OperatorApprovalCheck())), complete())


# ---------------------------------------------------------------- entering verification


def test_gated_completion_enters_verification_in_the_same_write() -> None:
    decision = verifying()
    item = decision.state.items[WI]
    assert item.state is WorkItemState.OPEN
    assert item.outcome is None
    assert item.verification is not None
    assert item.verification.status is VerificationStatus.VERIFYING
    assert item.verification.attempt == 1
    assert item.verification.report_candidate == "All tests pass."
    assert [v.passed for v in item.verification.checks] == [True, None, None]
    assert scheduling_state(item, []) is SchedulingState.WAITING_SYSTEM
    assert decision.state.current_id is None
    assert "work_item_verifying" in event_types(decision)
    assert item.result_summary is None
    assert not decision.side.briefs
    assert not decision.side.summaries
    assert decision.result is not None
    assert decision.result["verification"]["awaiting"] == [
        f"webhook {HOOK.url}",
        "operator_approval",
    ]


def test_open_todos_fail_todos_done_at_once_and_change_nothing() -> None:
    todos = (TodoItem(text="write the tests", state=TodoState.PENDING),)
    state = state_with(gated(TodosDoneCheck(), HOOK, todos=todos))
    with pytest.raises(DomainError) as err:
        run(state, complete())
    assert err.value.kind is ErrorKind.ACCEPTANCE_FAILED
    assert err.value.details is not None
    assert "write the tests" in err.value.details["reasons"][0]


def test_only_immediate_checks_passing_completes_as_done_at_once() -> None:
    decision = run(state_with(gated(TodosDoneCheck())), complete())
    item = decision.state.items[WI]
    assert (item.state, item.outcome) == (WorkItemState.COMPLETED, WorkItemOutcome.DONE)
    assert item.verification is not None
    assert item.verification.status is VerificationStatus.PASSED
    assert len(decision.side.briefs) == 1
    assert "acceptance_passed" in event_types(decision)


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (c.UpdateWorkItem, {"work_item_id": WI, "objective": "another"}),
        (c.PickWorkItem, {"work_item_id": WI}),
        (c.CompleteWorkItem, {"work_item_id": WI}),
        (c.WaitFor, {"work_item_id": WI, "wake": "operator_input", "reason": "asking"}),
    ],
    ids=["update", "pick", "complete", "wait_for"],
)
def test_tools_are_refused_while_verifying(cls: type[c.ToolCommand], args: dict[str, Any]) -> None:
    with pytest.raises(DomainError) as err:
        then(verifying(), tool(cls, args))
    assert err.value.kind is ErrorKind.WORK_ITEM_VERIFYING
    assert "being verified" in err.value.message
    assert err.value.details == {"awaiting": [f"webhook {HOOK.url}", "operator_approval"]}


def test_cancel_is_allowed_while_verifying_and_a_late_verdict_is_ignored() -> None:
    cancelled = then(verifying(), tool(c.CancelWorkItem, {"work_item_id": WI, "reason": "moot"}))
    assert cancelled.state.items[WI].outcome is WorkItemOutcome.CANCELLED
    late = then(cancelled, verdict(True, attempt=1, check_index=1))
    assert late.result is not None
    assert late.result["ignored"] == "not_verifying"
    assert late.events == ()


# ---------------------------------------------------------------- verdicts


def test_every_check_passing_completes_done_and_promotes_the_report_once() -> None:
    one = then(verifying(), verdict(True, attempt=1, check_index=1, reason="green"))
    assert one.state.items[WI].is_verifying
    assert not one.side.briefs
    op = c.RecordVerdict(
        command_id="v2", agent_id=AGENT_ID, work_item_id=WI, source="operator", passed=True
    )
    passed = then(one, op)
    item = passed.state.items[WI]
    assert (item.state, item.outcome) == (WorkItemState.COMPLETED, WorkItemOutcome.DONE)
    assert item.result_summary == "All tests pass."
    assert [b.text for b in passed.side.briefs] == ["All tests pass."]
    assert len(passed.side.summaries) == 1
    assert {"acceptance_passed", "work_item_completed"} <= set(event_types(passed))
    again = then(passed, verdict(True, attempt=1, check_index=1))
    assert again.result is not None
    assert again.result["ignored"] == "not_verifying"
    assert not again.side.briefs
    assert again.events == ()


def test_a_failing_check_makes_the_item_runnable_with_one_inbox_message() -> None:
    failed = then(verifying(), verdict(False, attempt=1, check_index=1, reason="3 tests fail"))
    item = failed.state.items[WI]
    assert item.state is WorkItemState.OPEN
    assert item.verification is not None
    assert item.verification.status is VerificationStatus.FAILED
    assert item.verification.checks[1].reason == "3 tests fail"
    assert scheduling_state(item, []) is SchedulingState.RUNNABLE
    assert failed.state.current_id is None
    assert event_types(failed)[-1] == "acceptance_failed"
    (message,) = failed.side.inbox_push
    assert message.origin is MessageOrigin.ACCEPTANCE
    assert "3 tests fail" in message.text
    assert not failed.side.briefs
    assert item.result_summary is None


def test_a_verdict_for_an_older_attempt_is_ignored() -> None:
    failed = then(verifying(), verdict(False, attempt=1, check_index=1))
    second = then(failed, complete("Fixed."))
    assert second.state.items[WI].verification.attempt == 2  # type: ignore[union-attr]
    stale = then(second, verdict(True, attempt=1, check_index=1))
    assert stale.result is not None
    assert stale.result["ignored"] == "stale_attempt"
    assert stale.events == ()
    assert stale.state.items[WI].is_verifying


def test_a_verdict_from_the_wrong_source_does_not_count() -> None:
    wrong = then(verifying(), verdict(True, attempt=1, check_index=2))
    assert wrong.result is not None
    assert wrong.result["ignored"] == "not_decided_by_webhook"


def test_an_operator_verdict_needs_an_awaited_operator_check() -> None:
    state = run(state_with(gated(HOOK)), complete())
    op = c.RecordVerdict(
        command_id="v2", agent_id=AGENT_ID, work_item_id=WI, source="operator", passed=True
    )
    with pytest.raises(DomainError) as err:
        then(state, op)
    assert err.value.kind is ErrorKind.WORK_ITEM_NOT_VERIFYING


# ---------------------------------------------------------------- who sets checks


def test_checks_are_set_by_whoever_calls() -> None:
    state = state_with(make_work_item(id=wid(9)))
    args = {"objective": "ship it", "acceptance": [{"kind": "operator_approval"}]}
    common = {"work_item_id": WI, "plan_artifact": make_plan_artifact(item_id=WI)}
    for by_operator, by in ((True, SetBy.OPERATOR), (False, SetBy.AGENT)):
        created = run(state, tool(c.CreateWorkItem, args, by_operator=by_operator, **common))
        assert created.state.items[WI].acceptance[0].set_by is by


def test_an_agent_cannot_remove_or_change_an_operator_check() -> None:
    operator_hook = HOOK.model_copy(update={"set_by": SetBy.OPERATOR})
    state = state_with(gated(operator_hook, TodosDoneCheck()))
    for new in ([{"kind": "todos_done"}], [{"kind": "webhook", "url": "http://other/"}]):
        with pytest.raises(DomainError) as err:
            run(state, tool(c.UpdateWorkItem, {"work_item_id": WI, "acceptance": new}))
        assert err.value.kind is ErrorKind.WORK_ITEM_ACCESS_DENIED
    kept = [{"kind": "webhook", "url": HOOK.url, "timeout_s": 2}, {"kind": "operator_approval"}]
    updated = run(state, tool(c.UpdateWorkItem, {"work_item_id": WI, "acceptance": kept}))
    checks = updated.state.items[WI].acceptance
    assert [(ch.kind, ch.set_by) for ch in checks] == [
        ("webhook", SetBy.OPERATOR),
        ("operator_approval", SetBy.AGENT),
    ]
    by_operator = run(
        state, tool(c.UpdateWorkItem, {"work_item_id": WI, "acceptance": []}, by_operator=True)
    )
    assert by_operator.state.items[WI].acceptance == ()


def _create_reviewed_by(reviewer: str, found: frozenset[str]) -> Decision:
    args = {"objective": "x", "acceptance": [{"kind": "reviewer_agent", "agent_id": reviewer}]}
    common = {"work_item_id": WI, "plan_artifact": make_plan_artifact(item_id=WI)}
    state = state_with(make_work_item(id=wid(9)))._copy(agents_found=found)
    return run(state, tool(c.CreateWorkItem, args, **common))


def test_reviewer_agent_checks_naming_an_existing_agent_are_accepted() -> None:
    """Delegation runs them (tests/unit/test_ledger_rules_review.py)."""
    decision = _create_reviewed_by("rev", frozenset({"rev"}))
    (check,) = decision.state.items[WI].acceptance
    assert (check.kind, check.agent_id) == ("reviewer_agent", "rev")


def test_a_reviewer_agent_check_naming_a_missing_agent_is_refused() -> None:
    with pytest.raises(DomainError) as refused:
        _create_reviewed_by("nobody", frozenset())
    assert refused.value.kind is ErrorKind.AGENT_NOT_FOUND
    assert "'nobody'" in refused.value.message
    assert refused.value.details == {"agent_id": "nobody"}


def test_an_agent_cannot_be_the_reviewer_of_its_own_work() -> None:
    with pytest.raises(DomainError) as refused:
        _create_reviewed_by(AGENT_ID, frozenset({AGENT_ID}))
    assert refused.value.kind is ErrorKind.DELEGATION_CYCLE


def test_an_update_naming_a_missing_reviewer_changes_nothing() -> None:
    state = state_with(gated())._copy(agents_found=frozenset())
    checks = [{"kind": "reviewer_agent", "agent_id": "nobody"}]
    with pytest.raises(DomainError) as refused:
        run(state, tool(c.UpdateWorkItem, {"work_item_id": WI, "acceptance": checks}))
    assert refused.value.kind is ErrorKind.AGENT_NOT_FOUND
