"""Acceptance checks on a delegation: the delegated WorkItem carries the delegator's checks, its
agent cannot remove them, and its report comes back only once they pass (here the delegator
itself reviews it); a check naming a missing agent or the delegated agent refuses the call."""

from __future__ import annotations

from shared.domain.acceptance import SetBy, VerificationStatus
from shared.domain.delegation import DelegationStatus
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import MessageOrigin, WorkItemOutcome
from shared.wire import commands as c
from tests.delegation_world import World


def delegated_with(*checks: dict[str, str]) -> tuple[World, str, object]:
    w = World()
    for agent in ("boss", "worker"):
        w.add_agent(agent)
    root = w.create("boss")
    w.pick("boss", root)
    decision = w.delegate("boss", "worker", "Check the figures", acceptance=list(checks))
    return w, root, decision


def test_the_delegated_item_carries_the_delegators_checks() -> None:
    w, _, _ = delegated_with({"kind": "operator_approval"}, {"kind": "todos_done"})
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    assert [(ch.kind, ch.set_by) for ch in child.acceptance] == [
        ("operator_approval", SetBy.DELEGATOR),
        ("todos_done", SetBy.DELEGATOR),
    ]
    dropped = w.tool("worker", c.UpdateWorkItem, {"work_item_id": child.id, "acceptance": []})
    assert isinstance(dropped, DomainError)
    assert dropped.kind is ErrorKind.WORK_ITEM_ACCESS_DENIED
    assert len(w.item("worker", child.id).acceptance) == 2


def test_the_report_comes_back_only_after_the_delegators_review_passes() -> None:
    w, root, _ = delegated_with({"kind": "reviewer_agent", "agent_id": "boss"})
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    w.complete("worker", child.id, "The figures add up.")
    verifying = w.item("worker", child.id).verification
    assert verifying is not None
    assert verifying.status is VerificationStatus.VERIFYING
    w.deliver_all()
    assert not [m for m in w.inbox.get("boss", []) if m.origin is MessageOrigin.TASK_RESULT]
    (review,) = [i for i in w.delegated_items("boss") if i.is_open_review]
    verdict = {"work_item_id": review.id, "passed": True, "reason": "checked twice"}
    w.tool("boss", c.SubmitVerdict, verdict)
    w.outbox += list(w.outbox)  # every delivery twice
    w.deliver_all()
    assert w.item("worker", child.id).outcome is WorkItemOutcome.DONE
    (result,) = [m for m in w.inbox["boss"] if m.origin is MessageOrigin.TASK_RESULT]
    assert result.report == "The figures add up."
    parent = next(r for r in w.records["boss"].values() if r.parent_work_item_id == root)
    assert parent.status is DelegationStatus.SUCCEEDED


def test_a_check_naming_a_missing_reviewer_refuses_the_delegation() -> None:
    w, root, refused = delegated_with({"kind": "reviewer_agent", "agent_id": "nobody"})
    assert isinstance(refused, DomainError)
    assert refused.kind is ErrorKind.AGENT_NOT_FOUND
    assert not w.outbox
    assert w.states["boss"].current_id == root
    assert "boss" not in w.records


def test_the_delegated_agent_cannot_review_its_own_item() -> None:
    _, _, refused = delegated_with({"kind": "reviewer_agent", "agent_id": "worker"})
    assert isinstance(refused, DomainError)
    assert refused.kind is ErrorKind.DELEGATION_CYCLE
