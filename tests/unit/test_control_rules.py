"""The operator's control of an agent as pure ledger rules at a fixed instant: a pause holds
the agent `paused` (a turn running ends where its FinishTurn leaves it: still paused, and not
counted as an attempt), no turn begins and an external agent's own tool calls are refused while
messages and callbacks are still taken; resume leaves it where its work puts it; retire cancels
every open item with its waits, leaves it `stopped` for good and refuses what would use it; the
scheduler holds a paused or stopped agent and a park never moves it."""

from __future__ import annotations

from shared.domain.control import control_signal, ends_turn_after_round, ends_turn_now
from shared.domain.errors import ErrorKind
from shared.domain.records import Posture
from shared.domain.usage import why_not_running
from shared.wire import commands as c
from shared.wire import events as e
from tests.builders import AGENT_ID, make_agent, make_agent_record, make_wait, make_work_item
from tests.unit.ledger_kit import (
    ITEM,
    NOW,
    OTHER,
    begin_turn,
    callback,
    chain,
    create,
    finish_turn,
    kinds,
    ledger_state,
    new_id,
    operator_message,
    refusal,
    run,
    token_hash,
    tool,
)


def pause(reason: str = "looping", *, interrupt: bool = False) -> c.PauseAgent:
    return c.PauseAgent(
        command_id=new_id("cmd_"), agent_id=AGENT_ID, reason=reason, interrupt=interrupt
    )


def resume() -> c.ResumeAgent:
    return c.ResumeAgent(command_id=new_id("cmd_"), agent_id=AGENT_ID)


def retire(*ids: str, reason: str = "done with it") -> c.RetireAgent:
    return c.RetireAgent(
        command_id=new_id("cmd_"), agent_id=AGENT_ID, reason=reason, work_item_ids=ids
    )


def idle_agent() -> object:
    return make_agent_record(state=make_agent(posture=Posture.IDLE))


def test_a_pause_holds_the_agent_and_no_turn_begins_until_resume() -> None:
    state = ledger_state(make_work_item(id=ITEM), agent=idle_agent(), fence=1)
    state, events = chain(state, pause())
    agent = state.require_agent()
    assert agent.state.posture is Posture.PAUSED
    assert agent.paused is not None
    assert agent.paused.reason == "looping"
    assert [type(x) for x in events] == [e.AgentPaused]
    assert refusal(state, begin_turn("turn-1")) is ErrorKind.AGENT_PAUSED
    # Messages and callbacks are still taken, and the operator still acts.
    by_operator = create(2).model_copy(update={"by_operator": True})
    state, events = chain(state, operator_message(), by_operator)
    assert "operator_message_received" in kinds(events)
    # An external agent's own tool call is refused while paused.
    assert refusal(state, create(3)) is ErrorKind.AGENT_PAUSED
    state, events = chain(state, resume())
    assert [type(x) for x in events] == [e.AgentResumed]
    assert state.require_agent().paused is None
    assert state.require_agent().state.posture is Posture.IDLE  # runnable work is left
    chain(state, begin_turn("turn-1"))


def test_a_pause_during_a_turn_takes_effect_when_the_turn_ends_and_is_no_attempt() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    state, _ = chain(state, begin_turn("turn-1"))
    state, _ = chain(state, pause())
    agent = state.require_agent()
    assert agent.state.posture is Posture.RUNNING  # the turn ends after its round
    # No reason beside a posture that contradicts it: paused shows once the turn has ended.
    running_why = why_not_running(
        outage=None,
        spent=None,
        limit=None,
        wake_budget=agent.state.wake_budget,
        posture=agent.state.posture,
        now=NOW,
        paused=agent.paused,
    )
    assert running_why is None
    assert control_signal(agent.paused, agent.retired, agent.current_turn_id) == "paused"
    # The turn's own tool calls (fenced) still finish its round.
    state, _ = chain(state, tool("UpdateWorkItem", fencing_token=1, work_item_id=ITEM))
    state, events = chain(state, finish_turn("turn-1", c.TurnOutcome.PAUSED, work_item_id=ITEM))
    agent = state.require_agent()
    assert agent.state.posture is Posture.PAUSED
    assert agent.failed_attempts == {}
    assert "agent_parked" not in kinds(events)


def test_an_interrupt_names_the_running_turn_and_a_later_turn_is_not_interrupted() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    state, _ = chain(state, begin_turn("turn-1"))
    state, events = chain(state, pause(interrupt=True))
    agent = state.require_agent()
    signal = control_signal(agent.paused, agent.retired, agent.current_turn_id)
    assert ends_turn_now(signal, "turn-1")
    assert not ends_turn_now(signal, "turn-2")
    assert ends_turn_after_round(signal)
    (paused_event,) = [x for x in events if isinstance(x, e.AgentPaused)]
    assert paused_event.interrupt is True
    state, _ = chain(state, finish_turn("turn-1", c.TurnOutcome.PAUSED), resume())
    agent = state.require_agent()
    assert control_signal(agent.paused, agent.retired, agent.current_turn_id) == ""


def test_a_repeated_pause_changes_nothing_and_resume_of_a_running_agent_is_a_no_op() -> None:
    state = ledger_state(make_work_item(id=ITEM), agent=idle_agent(), fence=1)
    state, _ = chain(state, pause())
    decision = run(state, pause("again"))
    assert decision.events == ()
    assert decision.result["changed"] is False
    state, _ = chain(state, resume())
    decision = run(state, resume())
    assert decision.events == ()
    assert decision.result["changed"] is False


def test_a_park_never_moves_a_paused_agent() -> None:
    state = ledger_state(agent=idle_agent())
    state, _ = chain(state, pause())
    park = c.ParkAgent(
        command_id=new_id("cmd_"), agent_id=AGENT_ID, reason=c.ParkReason.NOTHING_RUNNABLE
    )
    decision = run(state, park)
    assert decision.events == ()
    assert decision.state.require_agent().state.posture is Posture.PAUSED


def test_retire_cancels_every_open_item_with_its_waits_and_stops_the_agent() -> None:
    wait = make_wait(work_item_id=OTHER)
    items = (make_work_item(id=ITEM), make_work_item(id=OTHER, blocked_by="the callback"))
    state = ledger_state(*items, waits=[wait], agent=idle_agent())
    state, events = chain(state, retire(ITEM))  # OTHER is loaded for its wait
    agent = state.require_agent()
    assert agent.state.posture is Posture.STOPPED
    assert agent.retired is not None
    assert all(not item.is_open for item in state.items.values())
    assert state.active_waits() == []
    assert kinds(events).count("work_item_cancelled") == 2
    retired = events[0]
    assert isinstance(retired, e.AgentRetired)
    assert sorted(retired.cancelled_work_items) == sorted([ITEM, OTHER])
    # Refused from now on: turns, messages, the agent's own calls, a PUT; callbacks are 403.
    assert refusal(state, begin_turn("turn-1")) is ErrorKind.AGENT_RETIRED
    assert refusal(state, operator_message()) is ErrorKind.AGENT_RETIRED
    assert refusal(state, create(3)) is ErrorKind.AGENT_RETIRED
    assert refusal(state, pause()) is ErrorKind.AGENT_RETIRED
    ensure = c.EnsureAgent(
        command_id=new_id("cmd_"),
        agent_id=AGENT_ID,
        agent_token_hash=token_hash("t"),
        callback_token_hash=token_hash("cb"),
    )
    assert refusal(state, ensure) is ErrorKind.AGENT_RETIRED
    assert refusal(state, callback()) is ErrorKind.ACCESS_DENIED


def test_retire_again_sweeps_an_item_the_first_missed() -> None:
    state = ledger_state(make_work_item(id=ITEM), agent=idle_agent(), fence=1)
    state, _ = chain(state, retire(ITEM))
    late = ledger_state(
        *state.items.values(), make_work_item(id=OTHER), agent=state.require_agent()
    )
    decision = run(late, retire(OTHER))
    assert decision.result == {"retired": True, "changed": False, "cancelled_work_items": [OTHER]}
    assert kinds(decision.events) == ["work_item_cancelled"]


def test_why_not_running_says_paused_or_retired_first() -> None:
    state = ledger_state(make_work_item(id=ITEM), agent=idle_agent(), fence=1)
    paused, _ = chain(state, pause("too chatty"))
    agent = paused.require_agent()
    why = why_not_running(
        outage=None,
        spent=None,
        limit=None,
        wake_budget=agent.state.wake_budget,
        posture=agent.state.posture,
        now=NOW,
        paused=agent.paused,
    )
    assert why is not None
    assert why["kind"] == "paused"
    assert why["reason"] == "too chatty"
    assert why["since"].startswith(NOW.date().isoformat())
    retired, _ = chain(state, retire(ITEM, reason="replaced"))
    agent = retired.require_agent()
    why = why_not_running(
        outage=None,
        spent=None,
        limit=None,
        wake_budget=agent.state.wake_budget,
        posture=agent.state.posture,
        now=NOW,
        retired=agent.retired,
    )
    assert why == {"kind": "retired", "reason": "replaced", "since": why["since"]}
