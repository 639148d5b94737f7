"""Delegation between agents (docs/contract.md, delegation): the record, a WorkItem's origin,
the chain rules (cycle and depth), and the deterministic ids of the commands that cross
partitions. Pure: no I/O, no clock."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from shared.domain.base import NonEmptyStr, Record, UtcDatetime

DELEGATION_ID_PATTERN = r"^dlg_[0-9A-HJKMNP-TV-Z]{26}$"
DelegationId = Annotated[str, StringConstraints(pattern=DELEGATION_ID_PATTERN)]
DEFAULT_MAX_DELEGATION_DEPTH = 4
"""LONGRUN_MAX_DELEGATION_DEPTH: hops from the root WorkItem; the fifth nested one is refused."""
REVIEW_OBJECTIVE = "Review WorkItem"
"""How a review item's objective begins (`Review WorkItem <id> of agent <a> (attempt <n>): ...`)."""
CANCELLED_MEMORY = 200
"""Delegations an agent remembers as cancelled before their WorkItem arrived (bounded)."""


class DelegationStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DelegationStep(StrEnum):
    """The three cross-partition deliveries of one delegation; each is one command whose id is
    `<delegation id>:<step>`, so a re-send is a duplicate, never a second effect."""

    CREATE = "create"
    RESULT = "result"
    CANCEL = "cancel"


def step_command_id(delegation_id: str, step: DelegationStep) -> str:
    return f"{delegation_id}:{step.value}"


class ReviewOf(Record):
    """What a review WorkItem reviews: another agent's verifying item, its attempt and the
    `reviewer_agent` check this review decides."""

    work_item_id: str
    attempt: Annotated[int, Field(ge=1)]
    check_index: Annotated[int, Field(ge=0)]


class DelegatedFrom(Record):
    """Where a delegated WorkItem came from: the delegation, the delegating agent and its item.
    `reason` is the delegating agent's why; `chain` the delegating agents from the root item's
    owner down to `agent_id` (its length is the item's depth)."""

    delegation_id: DelegationId
    agent_id: str
    work_item_id: str
    reason: str = ""
    chain: tuple[str, ...] = ()
    review_of: ReviewOf | None = None
    """Set on a review item (a `reviewer_agent` check): SubmitVerdict decides the check."""

    @property
    def depth(self) -> int:
        return len(self.chain)


class DelegationRecord(Record):
    id: DelegationId
    parent_agent_id: str
    parent_work_item_id: str
    child_agent_id: str
    child_work_item_id: str
    status: DelegationStatus = DelegationStatus.RUNNING
    report: str | None = None
    objective: NonEmptyStr
    reason: NonEmptyStr
    depth: Annotated[int, Field(ge=1)] = 1
    review: bool = False
    """A review delegation: its result is the reviewer's verdict, not a message."""
    created_at: UtcDatetime
    finished_at: UtcDatetime | None = None
    deadline_at: UtcDatetime | None = None
    """DelegateWorkItem's `deadline_s` from its creation: past it the delegation fails (report
    `deadline passed ...`), reaches the parent once, and the child's WorkItem is cancelled."""

    @property
    def running(self) -> bool:
        return self.status is DelegationStatus.RUNNING

    def direction_for(self, agent_id: str) -> Literal["out", "in"]:
        return "out" if self.parent_agent_id == agent_id else "in"


class ChainRefusal(StrEnum):
    CYCLE = "cycle"
    TOO_DEEP = "too_deep"


def new_chain(origin: DelegatedFrom | None, caller: str) -> tuple[str, ...]:
    """The chain of a WorkItem the caller delegates from an item of this origin."""
    return (*(origin.chain if origin is not None else ()), caller)


def chain_refusal(chain: tuple[str, ...], to_agent: str, max_depth: int) -> ChainRefusal | None:
    """Why a delegation down this chain to `to_agent` is refused, if it is: the target already
    delegates in the chain (the caller included), or the new item would sit deeper than
    `max_depth` hops from the root."""
    if to_agent in chain:
        return ChainRefusal.CYCLE
    if len(chain) > max_depth:
        return ChainRefusal.TOO_DEEP
    return None
