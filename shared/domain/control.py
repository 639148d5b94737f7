"""The operator's control of an agent: a pause (with or without interrupting the running turn)
and a retirement, as the agent's record keeps them, and the control signal the running turn's
executor reads (the `control` field of the agent's hash)."""

from __future__ import annotations

from pydantic import Field

from shared.domain.base import Record, UtcDatetime


class AgentPause(Record):
    """Why and since when the agent is paused; `interrupt_turn_id`: the turn running when the
    pause asked for an interrupt (it ends at once instead of after its current round)."""

    reason: str = Field(min_length=1, max_length=2000)
    by: str
    since: UtcDatetime
    interrupt_turn_id: str | None = None


class AgentRetirement(Record):
    reason: str = Field(min_length=1, max_length=2000)
    by: str
    at: UtcDatetime


PAUSED_SIGNAL = "paused"
"""The running turn ends after its current round."""
INTERRUPT_SIGNAL = "interrupt"
"""`interrupt <turn_id>`: that turn ends at once (its model call abandoned, calls in flight
left without an outcome, so the next turn records them unknown as after a crash)."""


def control_signal(
    pause: AgentPause | None, retired: AgentRetirement | None, current_turn_id: str | None
) -> str:
    """What the agent's hash says to its running turn: "" (run on), "paused", or
    "interrupt <turn_id>" (a retirement interrupts the running turn too)."""
    interrupted = pause.interrupt_turn_id if pause is not None else None
    if retired is not None and current_turn_id is not None:
        interrupted = current_turn_id
    if interrupted is not None and interrupted == current_turn_id:
        return f"{INTERRUPT_SIGNAL} {interrupted}"
    if pause is not None or retired is not None:
        return PAUSED_SIGNAL
    return ""


def ends_turn_now(signal: str, turn_id: str) -> bool:
    return signal == f"{INTERRUPT_SIGNAL} {turn_id}"


def ends_turn_after_round(signal: str) -> bool:
    """Any signal ends a running turn at its next round at the latest."""
    return bool(signal)
