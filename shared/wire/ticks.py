"""Ticks: the scheduler's wake-up messages to turn executors (and to external agent loops)."""

from __future__ import annotations

from pydantic import Field

from shared.domain.base import NonEmptyStr, UtcDatetime
from shared.domain.records import AgentId, WorkItemId
from shared.domain.views import CandidateClass
from shared.domain.wake import TickKind
from shared.wire.message import Message


class Candidate(Message):
    message_type = "candidate"
    work_item_id: WorkItemId
    candidate_class: CandidateClass
    rank: int = Field(ge=1)


class Tick(Message):
    """Wake one agent. `tick_id` is the idempotency key; one is outstanding per agent."""

    message_type = "tick"
    tick_id: NonEmptyStr
    agent_id: AgentId
    kind: TickKind
    work_item_id: WorkItemId | None = None
    candidates: tuple[Candidate, ...] = ()
    recheck_work_item_ids: tuple[WorkItemId, ...] = ()
    """For `recheck_due`: every item whose recheck this tick delivers (coalesced)."""
    issued_at: UtcDatetime


class TimerFired(Message):
    """A due timer moved from the partition's timer set; becomes a ledger command."""

    message_type = "timer_fired"
    agent_id: AgentId
    wait_id: str | None = None
    work_item_id: WorkItemId | None = None
    due_at: UtcDatetime
