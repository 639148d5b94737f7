"""Delegation between agents (docs/contract.md, delegation): the record, a WorkItem's origin,
the chain rules (cycle and depth), and the deterministic ids of the commands that cross
partitions. Pure: no I/O, no clock."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from shared.domain.base import NonEmptyStr, Record, UtcDatetime

DELEGATION_ID_PATTERN = r"^dlg_[0-9A-HJKMNP-TV-Z]{26}$"
DelegationId = Annotated[str, StringConstraints(pattern=DELEGATION_ID_PATTERN)]
DEFAULT_MAX_CHILDREN = 8
"""LONGRUN_MAX_CHILDREN: an agent's private children whose delegation still runs."""
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
    BIND = "bind"
    """A spawned child's first WorkItem, bound: the child tells the parent."""


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
    work_item_id: str | None
    """The delegating agent's WorkItem; None for a child spawned outside any WorkItem."""
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
    parent_work_item_id: str | None
    """None: a child spawned while its parent had no current WorkItem."""
    child_agent_id: str
    child_work_item_id: str | None
    """None for a spawned child until its first WorkItem is bound (`delegation_bound`)."""
    status: DelegationStatus = DelegationStatus.RUNNING
    report: str | None = None
    objective: NonEmptyStr
    reason: NonEmptyStr
    depth: Annotated[int, Field(ge=1)] = 1
    review: bool = False
    """A review delegation: its result is the reviewer's verdict, not a message."""
    spawned: bool = False
    """The delegation of a private child SpawnAgent created (the child binds its WorkItem)."""
    keep: bool = False
    """A spawned child that stays when the WorkItem it serves ends."""
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


class SpawnedBy(Record):
    """On a private child's agent record: the delegation it was spawned for, and the WorkItem
    bound to it (None until the child creates its first one while the spawn message is in its
    turn)."""

    delegation_id: DelegationId
    parent_agent_id: str
    parent_work_item_id: str | None
    chain: tuple[str, ...]
    label: str
    bound_work_item_id: str | None = None

    def origin(self) -> DelegatedFrom:
        """What the bound WorkItem carries as `delegated_from` (its result goes back as a
        delegated item's does)."""
        return DelegatedFrom(
            delegation_id=self.delegation_id,
            agent_id=self.parent_agent_id,
            work_item_id=self.parent_work_item_id,
            reason=f"spawned by {self.parent_agent_id}: {self.label}",
            chain=self.chain,
        )


def spawn_label(message: str, limit: int = 80) -> str:
    """The delegation's label: the message's first line, cut at a word within `limit`."""
    line = " ".join(message.strip().splitlines()[0].split()) if message.strip() else "child"
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return (cut or line[:limit]) + "…"


def child_slug(message: str, limit: int = 24) -> str:
    """`<slug of the message>` in a generated child id: lower-case words joined by `-`."""
    words = re.findall(r"[a-z0-9]+", message.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    return slug or (words[0][:limit] if words else "child")


def child_agent_id(parent: str, message: str, suffix: str) -> str:
    """`<parent>--<slug of the message>-<4 hex>`, within the 128 characters of an agent id."""
    tail = f"--{child_slug(message)}-{suffix}"
    return f"{parent[: 128 - len(tail)]}{tail}"


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
