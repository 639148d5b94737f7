"""Delegation rules, decided by the real ledger rules over an in-memory world: creation with its
wait and origin, every refusal, results once, cancellation both ways and down the tree, the
crash rule, and deliveries repeated, dropped or reordered."""

from __future__ import annotations

import itertools

import pytest

from shared.domain.delegation import DelegationStatus
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import MessageOrigin, WakeBudget, WakeKind, WorkItemOutcome
from shared.domain.webhooks import WebhookAllow
from shared.wire import commands as c
from tests.delegation_world import World


def world(*agents: str, max_depth: int = 4) -> World:
    w = World(max_depth=max_depth)
    for agent in agents:
        w.add_agent(agent)
    return w


def focused(w: World, agent: str, objective: str = "Root work") -> str:
    wid = w.create(agent, objective)
    w.pick(agent, wid)
    return wid


def test_delegate_creates_record_wait_and_child_with_origin() -> None:
    w = world("boss", "worker")
    root = focused(w, "boss")
    decision = w.delegate("boss", "worker", "Summarise the logs")
    record = next(iter(w.records["boss"].values()))
    assert record.status is DelegationStatus.RUNNING
    assert decision.result["delegation"]["id"] == record.id
    boss = w.states["boss"]
    (wait,) = boss.waits_of(root)
    assert (wait.wake, wait.resource) == (WakeKind.TASK_RESULT, record.id)
    assert boss.current_id is None
    assert boss.items[root].blocked_by == "needs a specialist"
    assert [cmd.command_id for cmd in w.outbox] == [f"{record.id}:create"]
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    assert child.id == record.child_work_item_id
    assert child.objective == "Summarise the logs"
    origin = child.delegated_from
    assert origin is not None
    assert (origin.agent_id, origin.work_item_id, origin.reason) == (
        "boss",
        root,
        "needs a specialist",
    )
    (message,) = w.inbox["worker"]
    assert message.origin is MessageOrigin.DELEGATION
    assert "needs a specialist" in message.text


def refusal(w: World, agent: str, to: str) -> ErrorKind:
    err = w.delegate(agent, to)
    assert isinstance(err, DomainError)
    return err.kind


def test_delegate_without_current_item_is_refused() -> None:
    w = world("boss", "worker")
    w.create("boss")
    assert refusal(w, "boss", "worker") is ErrorKind.NO_CURRENT_WORK_ITEM
    assert not w.outbox


def test_delegate_to_unknown_agent_or_self_is_refused() -> None:
    w = world("boss")
    focused(w, "boss")
    assert refusal(w, "boss", "nobody") is ErrorKind.AGENT_NOT_FOUND
    assert refusal(w, "boss", "boss") is ErrorKind.DELEGATION_CYCLE


def test_delegating_back_up_the_chain_is_a_cycle() -> None:
    w = world("a", "b", "c")
    focused(w, "a")
    w.delegate("a", "b")
    w.deliver_all()
    (b_item,) = w.delegated_items("b")
    w.pick("b", b_item.id)
    w.delegate("b", "c")
    w.deliver_all()
    (c_item,) = w.delegated_items("c")
    w.pick("c", c_item.id)
    assert refusal(w, "c", "a") is ErrorKind.DELEGATION_CYCLE
    assert refusal(w, "c", "b") is ErrorKind.DELEGATION_CYCLE


def chain(w: World, agents: list[str]) -> None:
    """Each agent delegates to the next from the item it was delegated."""
    focused(w, agents[0])
    for parent, child in itertools.pairwise(agents):
        result = w.delegate(parent, child)
        assert not isinstance(result, DomainError), result
        w.deliver_all()
        (item,) = w.delegated_items(child)
        w.pick(child, item.id)


def test_four_nested_delegations_are_allowed_and_a_fifth_is_too_deep() -> None:
    agents = ["a0", "a1", "a2", "a3", "a4", "a5"]
    w = world(*agents, max_depth=4)
    chain(w, agents[:5])
    (deepest,) = w.delegated_items("a4")
    assert deepest.delegated_from is not None
    assert deepest.delegated_from.depth == 4
    assert refusal(w, "a4", "a5") is ErrorKind.DELEGATION_TOO_DEEP


def test_child_done_succeeds_once_with_report_trigger_and_message() -> None:
    w = world("boss", "worker")
    root = focused(w, "boss")
    w.delegate("boss", "worker")
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    w.complete("worker", child.id, "Found 3 errors")
    (result,) = w.outbox
    assert isinstance(result, c.RecordDelegationResult)
    w.outbox += [result, result]  # delivered three times
    w.deliver_all()
    record = next(iter(w.records["boss"].values()))
    assert (record.status, record.report) == (DelegationStatus.SUCCEEDED, "Found 3 errors")
    (wait,) = w.states["boss"].waits_of(root)
    assert wait.trigger_count == 1
    messages = [m for m in w.inbox["boss"] if m.origin is MessageOrigin.TASK_RESULT]
    assert len(messages) == 1
    assert messages[0].report == "Found 3 errors"
    assert w.records["worker"][record.id].status is DelegationStatus.SUCCEEDED


def test_a_result_whose_id_was_forgotten_still_changes_nothing() -> None:
    """Idempotent by state too: a re-send after its idempotency record expired is a no-op."""
    w = world("boss", "worker")
    root = focused(w, "boss")
    w.delegate("boss", "worker")
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    w.complete("worker", child.id)
    (result,) = w.outbox
    w.deliver_all()
    w.applied["boss"].clear()
    w.apply(result)
    assert w.states["boss"].waits_of(root)[0].trigger_count == 1
    assert len([m for m in w.inbox["boss"] if m.origin is MessageOrigin.TASK_RESULT]) == 1


def test_result_does_not_reset_the_budget_and_the_next_turn_spends_it() -> None:
    w = world("boss", "worker")
    focused(w, "boss")
    boss = w.states["boss"]
    agent = boss.require_agent()
    spent = agent.state.model_copy(update={"wake_budget": WakeBudget(used=3, limit=5)})
    w.states["boss"] = boss.with_agent(agent.model_copy(update={"state": spent}))
    w.delegate("boss", "worker")
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    w.complete("worker", child.id)
    w.deliver_all()
    after = w.states["boss"].require_agent()
    assert after.nudge_pending
    assert after.state.wake_budget.used == 3
    w.apply(
        c.BeginTurn(
            command_id="begin-1",
            agent_id="boss",
            turn_id="turn-1",
            fencing_token=1,
            tick_id="t1",
            tick_kind="input",  # type: ignore[arg-type]
        )
    )
    begun = w.states["boss"].require_agent()
    assert begun.state.wake_budget.used == 4
    assert not begun.nudge_pending


def test_cancel_delegation_cancels_the_wait_silently_and_the_child_and_its_tree() -> None:
    w = world("a", "b", "c")
    chain(w, ["a", "b", "c"])
    record = next(iter(w.records["a"].values()))
    w.tool("a", c.CancelDelegation, {"delegation_id": record.id, "reason": "not needed"})
    assert w.records["a"][record.id].status is DelegationStatus.CANCELLED
    assert not [x for x in w.states["a"].active_waits() if x.resource == record.id]
    w.deliver_all()
    (b_item,) = w.delegated_items("b")
    (c_item,) = w.delegated_items("c")
    assert b_item.outcome is WorkItemOutcome.CANCELLED
    assert c_item.outcome is WorkItemOutcome.CANCELLED
    assert not any(m.origin is MessageOrigin.TASK_RESULT for m in w.inbox.get("a", []))
    (b_record,) = [r for r in w.records["b"].values() if r.parent_agent_id == "b"]
    assert {r.status for r in w.records["b"].values()} == {DelegationStatus.CANCELLED}
    assert w.records["c"][b_record.id].status is DelegationStatus.CANCELLED


def test_completing_the_parent_item_cancels_its_running_delegations() -> None:
    w = world("boss", "w1", "w2")
    root = focused(w, "boss")
    w.delegate("boss", "w1")
    w.pick("boss", root)
    w.delegate("boss", "w2")
    w.deliver_all()
    w.complete("boss", root)
    w.deliver_all()
    for worker in ("w1", "w2"):
        (item,) = w.delegated_items(worker)
        assert item.outcome is WorkItemOutcome.CANCELLED
    assert not w.states["boss"].require_agent().delegations_out


@pytest.mark.parametrize("by_operator", [False, True])
def test_child_side_cancel_reports_cancelled_to_the_parent(by_operator: bool) -> None:
    w = world("boss", "worker")
    root = focused(w, "boss")
    w.delegate("boss", "worker")
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    w.tool(
        "worker",
        c.CancelWorkItem,
        {"work_item_id": child.id, "reason": "cannot be done"},
        by_operator=by_operator,
    )
    w.deliver_all()
    record = next(iter(w.records["boss"].values()))
    assert record.status is DelegationStatus.CANCELLED
    assert w.states["boss"].waits_of(root)[0].trigger_count == 1
    (message,) = [m for m in w.inbox["boss"] if m.origin is MessageOrigin.TASK_RESULT]
    assert message.status == "cancelled"


def test_crash_rule_block_fails_the_delegation() -> None:
    w = world("boss", "worker")
    focused(w, "boss")
    w.delegate("boss", "worker")
    w.deliver_all()
    (child,) = w.delegated_items("worker")
    w.pick("worker", child.id)
    for n in range(3):
        w.apply(
            c.BeginTurn(
                command_id=f"b{n}",
                agent_id="worker",
                turn_id=f"turn{n}",
                fencing_token=1,
                tick_id=f"t{n}",
                tick_kind="continue_current",  # type: ignore[arg-type]
            )
        )
        w.apply(
            c.FinishTurn(
                command_id=f"f{n}",
                agent_id="worker",
                turn_id=f"turn{n}",
                fencing_token=1,
                outcome="failed",  # type: ignore[arg-type]
                work_item_id=child.id,
                error="model said no",
            )
        )
    assert w.item("worker", child.id).blocked_by is not None
    w.deliver_all()
    record = next(iter(w.records["boss"].values()))
    assert record.status is DelegationStatus.FAILED
    assert record.report is not None
    assert "turn failed 3 times" in record.report


def test_a_cancel_overtaking_the_creation_leaves_no_child_running() -> None:
    w = world("boss", "worker")
    focused(w, "boss")
    w.delegate("boss", "worker")
    (create,) = w.outbox
    w.outbox.clear()  # the first send of the creation is lost
    record = next(iter(w.records["boss"].values()))
    w.tool("boss", c.CancelDelegation, {"delegation_id": record.id, "reason": "changed plans"})
    w.deliver_all()  # the cancel arrives first
    w.apply(create)  # then the re-sent creation
    assert w.delegated_items("worker") == []


def test_cancel_delegation_of_unknown_id_is_not_found() -> None:
    w = world("boss")
    focused(w, "boss")
    err = w.tool("boss", c.CancelDelegation, {"delegation_id": "dlg_x", "reason": "r"})
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.DELEGATION_NOT_FOUND


def test_three_level_tree_completes_bottom_up_with_each_report_once() -> None:
    w = world("root", "c1", "c2", "c3", "g1", "g2", "g3")
    top = focused(w, "root")
    for child in ("c1", "c2", "c3"):
        w.pick("root", top)
        w.delegate("root", child)
    w.deliver_all()
    for child, grandchild in zip(("c1", "c2", "c3"), ("g1", "g2", "g3"), strict=True):
        (item,) = w.delegated_items(child)
        w.pick(child, item.id)
        w.delegate(child, grandchild)
    w.deliver_all()
    for child, grandchild in zip(("c1", "c2", "c3"), ("g1", "g2", "g3"), strict=True):
        (g_item,) = w.delegated_items(grandchild)
        w.complete(grandchild, g_item.id, f"{grandchild} report")
        w.outbox += list(w.outbox)  # every delivery twice
        w.deliver_all()
        (c_item,) = w.delegated_items(child)
        assert [m.report for m in w.inbox[child] if m.report] == [f"{grandchild} report"]
        w.complete(child, c_item.id, f"{child} report")
        w.deliver_all()
    reports = sorted(
        m.report or "" for m in w.inbox["root"] if m.origin is MessageOrigin.TASK_RESULT
    )
    assert reports == ["c1 report", "c2 report", "c3 report"]
    assert {r.status for r in w.records["root"].values()} == {DelegationStatus.SUCCEEDED}
    triggers = [x.trigger_count for x in w.states["root"].active_waits()]
    assert triggers == [1, 1, 1]


def test_a_delegators_webhook_check_must_be_on_the_allow_list() -> None:
    w = world("boss", "worker")
    focused(w, "boss")
    w.webhook_allow = WebhookAllow.parse("hooks.example.com")
    hook = {"kind": "webhook", "url": "http://169.254.169.254/latest/meta-data"}
    refused = w.delegate("boss", "worker", acceptance=[hook])
    assert isinstance(refused, DomainError)
    assert refused.kind is ErrorKind.WEBHOOK_NOT_ALLOWED
    assert not w.outbox
    allowed = {"kind": "webhook", "url": "https://hooks.example.com/check"}
    assert not isinstance(w.delegate("boss", "worker", acceptance=[allowed]), DomainError)
