"""SpawnAgent rules, decided by the real ledger rules over an in-memory world: a private child
created with its first message and no WorkItem, its first WorkItem (made in a turn showing the
message) bound once and its result back once, refusals (taken id, depth, too many children),
public named agents without a delegation, cancellation before and after the binding, and
deliveries repeated or reordered."""

from __future__ import annotations

import itertools

from shared.domain.delegation import DelegationStatus
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import MessageOrigin, WakeKind
from shared.wire import commands as c
from shared.wire.events import AgentSpawned, DelegationBound
from tests.delegation_world import World


def world(*agents: str, **kw: int) -> World:
    w = World(**kw)
    for agent in agents:
        w.add_agent(agent)
    return w


def focused(w: World, agent: str, objective: str = "Root work") -> str:
    wid = w.create(agent, objective)
    w.pick(agent, wid)
    return wid


def spawned_child(w: World, parent: str = "lead", **kw: object) -> tuple[str, str]:
    decision = w.spawn(parent, **kw)
    assert not isinstance(decision, DomainError), decision
    return decision.result["agent_id"], decision.result["delegation"]["id"]


def test_a_private_child_is_created_with_its_message_and_no_work_item() -> None:
    w = world("lead")
    root = focused(w, "lead")
    child, dlg = spawned_child(w)
    record = w.records["lead"][dlg]
    assert (record.parent_work_item_id, record.child_work_item_id) == (root, None)
    assert record.spawned
    assert record.status is DelegationStatus.RUNNING
    assert w.states["lead"].current_id == root  # the parent is not blocked
    assert not w.states["lead"].waits_of(root)
    (spawned,) = [e for e in w.events["lead"] if isinstance(e, AgentSpawned)]
    assert spawned.child_agent_id == child
    assert [cmd.command_id for cmd in w.outbox] == [f"{dlg}:create"]
    w.deliver_all()
    state = w.states[child]
    agent = state.require_agent()
    assert agent.parent_agent_id == "lead"
    assert agent.spawned_by is not None
    assert agent.spawned_by.delegation_id == dlg
    assert not state.items  # the runtime never creates a WorkItem for the child
    (message,) = w.inbox[child]
    assert message.origin is MessageOrigin.DELEGATION
    assert message.sender == "lead"
    assert "Find the flaky test" in message.text
    assert w.records[child][dlg].child_work_item_id is None
    assert w.states["lead"].require_agent().children == (child,)


def test_the_first_item_made_in_a_turn_showing_the_message_is_bound_and_reports_once() -> None:
    w = world("lead")
    root = focused(w, "lead")
    child, dlg = spawned_child(w)
    w.deliver_all()
    w.tool("lead", c.WaitFor, {"wake": "task_result", "resource": dlg, "reason": "the child"})
    # Made outside a turn that shows the message: not bound.
    stray = w.create(child, "Something else")
    assert w.item(child, stray).delegated_from is None
    w.open_turn(child)
    first = w.create(child, "Find the flaky test")
    second = w.create(child, "A second thing")
    origin = w.item(child, first).delegated_from
    assert origin is not None
    assert (origin.delegation_id, origin.agent_id, origin.work_item_id) == (dlg, "lead", root)
    assert w.item(child, second).delegated_from is None
    bound = [e for e in w.events[child] if isinstance(e, DelegationBound)]
    assert [e.child_work_item_id for e in bound] == [first]
    assert [cmd.command_id for cmd in w.outbox] == [f"{dlg}:bind"]
    w.deliver_all()
    assert w.records["lead"][dlg].child_work_item_id == first
    assert w.states["lead"].require_agent().delegations_out[dlg].child_work_item_id == first
    w.pick(child, first)
    w.complete(child, first, "It was the clock.")
    (result,) = w.outbox
    assert result.command_id == f"{dlg}:result"
    w.outbox.append(result)  # delivered twice
    w.deliver_all()
    final = w.records["lead"][dlg]
    assert (final.status, final.report) == (DelegationStatus.SUCCEEDED, "It was the clock.")
    results = [m for m in w.inbox["lead"] if m.origin is MessageOrigin.TASK_RESULT]
    assert len(results) == 1
    (wait,) = [wt for wt in w.states["lead"].waits.values() if wt.wake is WakeKind.TASK_RESULT]
    assert wait.trigger_count == 1
    assert dlg not in w.states["lead"].require_agent().delegations_out


def test_refusals() -> None:
    w = world("lead", "taken", max_children=2, max_depth=1)
    focused(w, "lead")
    err = w.spawn("lead", agent_id="taken")
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.AGENT_EXISTS
    err = w.spawn("lead", kind="public_named", message=None, agent_id="lead")
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.AGENT_EXISTS
    spawned_child(w)
    spawned_child(w)
    err = w.spawn("lead")
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.TOO_MANY_CHILDREN
    assert err.details is not None
    assert err.details["limit"] == 2
    # Public named agents are not private children: not counted.
    public = w.spawn("lead", kind="public_named", message=None, agent_id="pub")
    assert not isinstance(public, DomainError)
    # Depth: a child's bound item sits one hop down; its own spawn would be two.
    w2 = world("lead", max_depth=1)
    focused(w2, "lead")
    child, _ = spawned_child(w2)
    w2.deliver_all()
    w2.open_turn(child)
    item = w2.create(child, "the job")
    w2.pick(child, item)
    err = w2.spawn(child)
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.DELEGATION_TOO_DEEP


def test_a_public_named_agent_has_no_delegation() -> None:
    w = world("lead")
    decision = w.spawn("lead", kind="public_named", message="Hello there", agent_id="scout")
    assert "delegation" not in decision.result
    assert [cmd.command_id for cmd in w.outbox] == ["spawn:lead"]
    w.deliver_all()
    agent = w.states["scout"].require_agent()
    assert agent.spawned_by is None
    assert agent.parent_agent_id == "lead"
    (message,) = w.inbox["scout"]
    assert (message.origin, message.sender) == (MessageOrigin.PEER, "lead")
    assert not w.records.get("scout")


def test_an_id_taken_before_the_creation_fails_the_delegation_once() -> None:
    w = world("lead")
    focused(w, "lead")
    child, dlg = spawned_child(w)
    w.add_agent(child)  # someone else created it first
    w.deliver_all()
    assert w.records["lead"][dlg].status is DelegationStatus.FAILED
    assert "taken" in (w.records["lead"][dlg].report or "")


def test_the_parent_item_ending_cancels_the_child_before_and_after_the_binding() -> None:
    for bind_first in (False, True):
        w = world("lead")
        root = focused(w, "lead")
        child, dlg = spawned_child(w)
        w.deliver_all()
        item = None
        if bind_first:
            w.open_turn(child)
            item = w.create(child, "the job")
            # The parent ends before it learns the binding: `<dlg>:bind` still in flight.
            held = list(w.outbox)
            w.outbox.clear()
        w.complete("lead", root, "done without it")
        assert w.records["lead"][dlg].status is DelegationStatus.CANCELLED
        w.deliver_all()
        if bind_first:
            w.outbox += held
            w.deliver_all()
            assert item is not None
            assert w.item(child, item).outcome == "cancelled"
        else:
            w.open_turn(child)
            late = w.create(child, "the job")
            assert w.item(child, late).delegated_from is None  # never bound after a cancel
        assert not [m for m in w.inbox["lead"] if m.origin is MessageOrigin.TASK_RESULT]


def test_deliveries_in_any_order_and_twice_give_one_child_one_binding_one_result() -> None:
    for order in itertools.permutations(range(3)):
        w = world("lead")
        focused(w, "lead")
        child, dlg = spawned_child(w)
        create = w.outbox.pop()
        w.apply(create)
        w.apply(create)
        w.open_turn(child)
        item = w.create(child, "the job")
        w.pick(child, item)
        w.complete(child, item, "found it")
        owed = list(w.outbox)
        w.outbox.clear()
        assert sorted(cmd.command_id for cmd in owed) == [f"{dlg}:bind", f"{dlg}:result"]
        for i in order:
            w.apply(owed[i % len(owed)])
        for cmd in owed:
            w.apply(cmd)
        record = w.records["lead"][dlg]
        assert (record.status, record.child_work_item_id) == (DelegationStatus.SUCCEEDED, item)
        results = [m for m in w.inbox["lead"] if m.origin is MessageOrigin.TASK_RESULT]
        assert len(results) == 1


def test_send_message_reaches_parent_and_child_once_as_a_nudge() -> None:
    w = world("lead", "stranger")
    focused(w, "lead")
    child, _ = spawned_child(w)
    w.deliver_all()
    w.inbox[child].clear()
    sent = w.tool("lead", c.SendMessage, {"to_agent": child, "text": "Status?"}, message_id="msg_1")
    assert sent.result == {"message_id": "msg_1", "to_agent": child}
    (deliver,) = w.outbox
    assert deliver.command_id == "msg_1:deliver"
    w.outbox.append(deliver)  # sent twice
    used_before = w.states[child].require_agent().state.wake_budget.used
    w.deliver_all()
    (message,) = w.inbox[child]
    assert (message.origin, message.sender, message.reply_to) == (MessageOrigin.PEER, "lead", None)
    agent = w.states[child].require_agent()
    assert agent.nudge_pending  # the turn it wakes spends the budget
    assert agent.state.wake_budget.used == used_before  # and nothing reset it
    reply = w.tool(
        child,
        c.SendMessage,
        {"to_agent": "lead", "text": "Half done.", "reply_to": "msg_1"},
        message_id="msg_2",
    )
    assert not isinstance(reply, DomainError)
    w.deliver_all()
    (answer,) = [m for m in w.inbox["lead"] if m.origin is MessageOrigin.PEER]
    assert (answer.sender, answer.reply_to) == (child, "msg_1")
    err = w.tool("lead", c.SendMessage, {"to_agent": "stranger", "text": "Hi"}, message_id="m3")
    assert isinstance(err, DomainError)
    assert err.kind is ErrorKind.PEER_NOT_ALLOWED
    assert not w.outbox
