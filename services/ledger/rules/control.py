"""Ledger rules for the operator's control of an agent: pause, resume, retire, and the guard
that refuses what a paused or retired agent may not do.

A pause holds the agent in posture `paused`: no turn begins (BeginTurn is refused, so a tick
published before the pause starts nothing), an external agent's own tool calls are refused
(409 agent_paused), while messages, callbacks and the operator's own actions are still taken.
A running turn is told through the agent's `control` field (shared.domain.control) and ends
after its current round, or at once with `interrupt`. Resume clears the hold; the scheduler
decides again from `agent_resumed`. Retire cancels the open WorkItems (and with them their
waits and delegations), interrupts the running turn and leaves the agent `stopped` for good.
"""

from __future__ import annotations

from services.ledger.rules.outcomes import end_cancelled
from services.ledger.rules.posture import resting_posture
from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.control import AgentPause, AgentRetirement
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import Posture
from shared.domain.stored import AgentRecord
from shared.wire import commands as c
from shared.wire.events import AgentPaused, AgentResumed, AgentRetired, Event

_STARTS_WORK = (c.BeginTurn, c.RecordMissingSecret)
"""Commands that begin (or prepare) a turn: refused while the agent is paused or retired."""

_REFUSED_WHEN_RETIRED = (
    c.EnsureAgent,
    c.AppendOperatorMessage,
    c.PauseAgent,
    c.ResumeAgent,
)


def guard(state: LedgerState, cmd: c.Command) -> None:
    """Refuse what the agent's pause or retirement forbids (before any rule runs)."""
    agent = state.agent
    if agent is None or (agent.paused is None and agent.retired is None):
        return
    if agent.retired is not None:
        if isinstance(cmd, c.RecordCallback):
            raise DomainError(
                ErrorKind.ACCESS_DENIED,
                f"agent {state.agent_id!r} was retired; its callbacks trigger nothing",
                recovery_hint="The agent no longer runs; nothing will read this callback.",
            )
        if isinstance(cmd, (*_STARTS_WORK, *_REFUSED_WHEN_RETIRED)) or _own_tool_call(cmd):
            raise DomainError(
                ErrorKind.AGENT_RETIRED,
                f"agent {state.agent_id!r} was retired: {agent.retired.reason}",
                details={"retired_at": agent.retired.at.isoformat()},
            )
        return
    assert agent.paused is not None
    if isinstance(cmd, _STARTS_WORK) or _own_tool_call(cmd):
        raise DomainError(
            ErrorKind.AGENT_PAUSED,
            f"agent {state.agent_id!r} is paused: {agent.paused.reason}",
            details={"since": agent.paused.since.isoformat()},
        )


def _own_tool_call(cmd: c.Command) -> bool:
    """A tool call the agent makes outside a turn (an external agent's): a builtin turn's calls
    carry its fencing token and finish the round the pause lets it end; the operator's calls
    (by_operator) are the operator acting."""
    return isinstance(cmd, c.ToolCommand) and cmd.fencing_token is None and not cmd.by_operator


def _settled(agent: AgentRecord, posture: Posture) -> AgentRecord:
    """The posture the operator set, unless a turn still runs: it ends (after its round, or at
    once) and its FinishTurn leaves the agent there."""
    if agent.current_turn_id is not None:
        return agent
    return agent.model_copy(update={"state": agent.state.model_copy(update={"posture": posture})})


def pause_agent(state: LedgerState, cmd: c.PauseAgent, ctx: Context) -> Decision:
    agent = state.require_agent()
    running = agent.current_turn_id
    interrupt = running if cmd.interrupt else None
    already = agent.paused
    if already is not None and (interrupt is None or already.interrupt_turn_id == interrupt):
        return Decision(state=state, result={"paused": True, "changed": False})
    pause = AgentPause(
        reason=cmd.reason,
        by=cmd.by,
        since=already.since if already is not None else ctx.now,
        interrupt_turn_id=interrupt,
    )
    agent = _settled(agent.model_copy(update={"paused": pause}), Posture.PAUSED)
    event = AgentPaused(
        agent_id=state.agent_id, reason=cmd.reason, by=cmd.by, interrupt=interrupt is not None
    )
    return Decision(state.with_agent(agent), (event,), {"paused": True, "changed": True})


def resume_agent(state: LedgerState, cmd: c.ResumeAgent, ctx: Context) -> Decision:
    agent = state.require_agent()
    if agent.paused is None:
        return Decision(state=state, result={"paused": False, "changed": False})
    agent = agent.model_copy(update={"paused": None})
    state = state.with_agent(agent)
    agent = _settled(agent, resting_posture(state))
    event = AgentResumed(agent_id=state.agent_id, by=cmd.by)
    return Decision(state.with_agent(agent), (event,), {"paused": False, "changed": True})


def retire_agent(state: LedgerState, cmd: c.RetireAgent, ctx: Context) -> Decision:
    """Cancel every open item the command names (and any other open item the load read: the
    current one, those with active waits), stop the agent for good. Again on a retired agent:
    only the cancellations (the sender's sweep)."""
    agent = state.require_agent()
    first = agent.retired is None
    if first:
        retirement = AgentRetirement(reason=cmd.reason, by=cmd.by, at=ctx.now)
        agent = agent.model_copy(update={"retired": retirement, "paused": None})
        state = state.with_agent(_settled(agent, Posture.STOPPED))
    events: list[Event] = []
    cancelled: list[str] = []
    for item_id in sorted({*cmd.work_item_ids, *state.items}):
        item = state.items.get(item_id)
        if item is None or not item.is_open or item.agent_id != state.agent_id:
            continue
        ended = end_cancelled(state, item, f"agent retired: {cmd.reason}", "operator", ctx)
        state = ended.state
        events += [ended.event, *ended.after]
        cancelled.append(item_id)
    if first:
        events.insert(
            0,
            AgentRetired(
                agent_id=state.agent_id,
                reason=cmd.reason,
                by=cmd.by,
                cancelled_work_items=tuple(cancelled),
            ),
        )
    result = {"retired": True, "changed": first, "cancelled_work_items": cancelled}
    return Decision(state, tuple(events), result)
