"""Deadlines as pure rules: a wait's and a delegation's deadline is scheduled with its instant;
the expiry fired before that instant (by the ledger's clock) arms it again and changes nothing
else; at its instant a wait expires once (its item blocked `deadline passed: <reason>`, one
message) and a delegation fails once (its result reaches the parent, the child's WorkItem is
cancelled, nothing comes back); a deadline whose wait or delegation already ended changes
nothing. And the scheduler's side: the timer member, the deterministic command, poison."""

from __future__ import annotations

from datetime import timedelta

import pytest

from services.ledger.rules import LedgerState
from services.scheduler.policy import TimerKind, TimerRef, event_facts, expire_command
from shared.domain.delegation import DelegationStatus
from shared.domain.records import MessageOrigin, WaitStatus, WorkItemOutcome
from shared.wire import commands as c
from shared.wire import events as e
from shared.wire.codec import CodecError
from tests.builders import make_work_item
from tests.delegation_world import World
from tests.unit.ledger_kit import ITEM, NOW, chain, create, kinds, ledger_state, new_id, run, tool


def expire(target: str, target_id: str, due: object) -> c.ExpireDeadline:
    return c.ExpireDeadline.model_validate(
        {
            "command_id": new_id("cmd_"),
            "agent_id": "agent-1",
            "target": target,
            "target_id": target_id,
            "due_at": due,
        }
    )


def waiting(deadline_s: int = 60) -> tuple[LedgerState, str]:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM)
    wait_for = tool(
        "WaitFor", reason="the reviewer", wake="external", work_item_id=ITEM, deadline_s=deadline_s
    )
    decision = run(state, wait_for)
    (scheduled,) = [x for x in decision.events if isinstance(x, e.DeadlineScheduled)]
    wait = next(iter(decision.state.waits.values()))
    assert wait.deadline_at == NOW + timedelta(seconds=deadline_s)
    assert (scheduled.target, scheduled.target_id, scheduled.due_at) == (
        "wait",
        wait.id,
        wait.deadline_at,
    )
    return decision.state.committed(), wait.id


def test_a_wait_expires_at_its_deadline_once_with_its_item_blocked_and_one_message() -> None:
    state, wait_id = waiting(60)
    due = NOW + timedelta(seconds=60)
    decision = run(state, expire("wait", wait_id, due), now=due)
    assert decision.result == {"expired": True, "wait_id": wait_id}
    assert kinds(decision.events) == ["wait_expired", "work_item_updated"]
    after = decision.state
    assert after.waits[wait_id].status is WaitStatus.EXPIRED
    assert after.items[ITEM].blocked_by == "deadline passed: the reviewer"
    (message,) = decision.side.inbox_push
    assert message.origin is MessageOrigin.DEADLINE
    assert "the reviewer" in message.text
    again = run(after.committed(), expire("wait", wait_id, due), now=due + timedelta(hours=1))
    assert again.events == ()
    assert again.result == {"expired": False}


def test_an_early_expiry_never_expires_and_is_armed_again() -> None:
    state, wait_id = waiting(60)
    early = NOW + timedelta(seconds=30)
    decision = run(state, expire("wait", wait_id, early), now=early)
    assert decision.result["expired"] is False
    (again,) = decision.events
    assert isinstance(again, e.DeadlineScheduled)
    assert again.due_at == NOW + timedelta(seconds=60)
    assert decision.state.waits[wait_id].is_active
    # Fired at the deadline by a scheduler clock ahead of the ledger's: later than it, not equal.
    at_due = NOW + timedelta(seconds=60)
    decision = run(state, expire("wait", wait_id, at_due), now=early)
    (again,) = decision.events
    assert isinstance(again, e.DeadlineScheduled)
    assert again.due_at == at_due + timedelta(milliseconds=1)


def test_a_wait_answered_before_its_deadline_does_not_expire() -> None:
    state, wait_id = waiting(60)
    state, _ = chain(state, tool("UpdateWorkItem", work_item_id=ITEM, blocked_by=None))
    assert not state.waits[wait_id].is_active
    due = NOW + timedelta(seconds=60)
    decision = run(state, expire("wait", wait_id, due), now=due)
    assert decision.events == ()
    assert decision.state.items[ITEM].blocked_by is None


def test_a_delegation_fails_at_its_deadline_once_and_the_child_item_is_cancelled() -> None:
    w = World()
    for agent in ("boss", "worker"):
        w.add_agent(agent)
    root = w.create("boss")
    w.pick("boss", root)
    w.delegate("boss", "worker", deadline_s=600)
    w.deliver_all()
    (record,) = w.records["boss"].values()
    assert record.deadline_at == w.now + timedelta(seconds=600)
    scheduled = [x for x in w.events["boss"] if isinstance(x, e.DeadlineScheduled)]
    assert [(x.target, x.target_id) for x in scheduled] == [("delegation", record.id)]
    (child,) = w.delegated_items("worker")
    w.now += timedelta(seconds=600)
    fired = c.ExpireDeadline(
        command_id=f"deadline:delegation:{record.id}:1",
        agent_id="boss",
        target="delegation",
        target_id=record.id,
        due_at=w.now,
    )
    w.apply(fired)
    assert w.records["boss"][record.id].status is DelegationStatus.FAILED
    assert "deadline passed" in (w.records["boss"][record.id].report or "")
    results = [m for m in w.inbox["boss"] if m.origin is MessageOrigin.TASK_RESULT]
    assert len(results) == 1
    w.deliver_all()
    assert w.item("worker", child.id).outcome is WorkItemOutcome.CANCELLED
    # Nothing comes back from the cancelled child, and a second firing changes nothing.
    w.deliver_all()
    w.apply(fired.model_copy(update={"command_id": "deadline:delegation:again"}))
    assert len([m for m in w.inbox["boss"] if m.origin is MessageOrigin.TASK_RESULT]) == 1
    finished = [x for x in w.events["boss"] if isinstance(x, e.DelegationFinished)]
    assert len(finished) == 1


def test_the_scheduler_arms_one_timer_per_deadline_and_fires_a_deterministic_command() -> None:
    envelope = {
        "type": "ledger_events",
        "version": 1,
        "body": {
            "agent_id": "agent-1",
            "events": [
                {
                    "type": "deadline_scheduled",
                    "seq": 7,
                    "data": {
                        "target": "wait",
                        "target_id": "wait_1",
                        "due_at": "2026-01-01T00:00:00.0005Z",
                    },
                }
            ],
        },
    }
    facts = event_facts(envelope)
    ((ref, due, seq),) = facts.timers
    assert ref.kind is TimerKind.DEADLINE
    assert (due, seq) == (1767225600001, 7)  # rounded up: never early
    assert TimerRef.parse(ref.member()) == ref
    command = expire_command(ref)
    assert command.command_id == f"deadline:wait:wait_1:{due}"
    assert (command.target, command.target_id) == ("wait", "wait_1")
    assert expire_command(ref) == command  # the same timer always sends the same command
    with pytest.raises(CodecError):
        TimerRef.parse(b'{"agent_id": "agent-1", "deadline": "nonsense"}')


def verifying(deadline_s: int | None) -> tuple[LedgerState, str, e.DeadlineScheduled]:
    check: dict[str, object] = {"kind": "operator_approval"}
    if deadline_s is not None:
        check["deadline_s"] = deadline_s
    state = ledger_state(current=None)
    state, _ = chain(state, create(1, acceptance=[check], plan_status="ready"))
    state, _ = chain(state, tool("PickWorkItem", work_item_id=ITEM))
    decision = run(state, tool("CompleteWorkItem", work_item_id=ITEM, report_text="done"))
    (scheduled,) = [x for x in decision.events if isinstance(x, e.DeadlineScheduled)]
    return decision.state.committed(), ITEM, scheduled


def test_an_awaited_verdict_fails_its_check_at_the_deadline_from_the_attempts_start() -> None:
    state, item_id, scheduled = verifying(120)
    assert (scheduled.target, scheduled.target_id) == ("verification", f"{item_id}:1:0")
    assert scheduled.due_at == NOW + timedelta(seconds=120)
    early = run(state, expire("verification", scheduled.target_id, NOW), now=NOW)
    assert early.result["expired"] is False
    assert state.items[item_id].is_verifying
    due = scheduled.due_at
    decision = run(state, expire("verification", scheduled.target_id, due), now=due)
    assert decision.result["expired"] is True
    assert kinds(decision.events)[:2] == ["check_verdict_recorded", "acceptance_failed"]
    # A deadline is no operator input: its message spends the wake budget, nothing resets it.
    assert "wake_budget_reset" not in kinds(decision.events)
    assert decision.state.require_agent().nudge_pending
    item = decision.state.items[item_id]
    assert not item.is_verifying
    assert item.verification is not None
    assert item.verification.checks[0].reason.startswith("deadline")
    again = run(
        decision.state.committed(), expire("verification", scheduled.target_id, due), now=due
    )
    assert again.events == ()


def test_the_check_deadline_defaults_to_the_deployments_and_a_verdict_in_time_wins() -> None:
    state, item_id, scheduled = verifying(None)
    assert scheduled.due_at == NOW + timedelta(seconds=86_400)
    verdict = c.RecordVerdict(
        command_id=new_id("cmd_"),
        agent_id="agent-1",
        work_item_id=item_id,
        source="operator",
        passed=True,
    )
    state, _ = chain(state, verdict)
    due = scheduled.due_at
    late = run(state, expire("verification", scheduled.target_id, due), now=due)
    assert late.events == ()
    assert late.result == {"expired": False}
