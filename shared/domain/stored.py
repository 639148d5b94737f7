"""What the ledger stores beside the contract records: per-agent bookkeeping and capabilities."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from shared.domain.base import Record, UtcDatetime
from shared.domain.control import AgentPause, AgentRetirement
from shared.domain.delegation import DelegationRecord, SpawnedBy
from shared.domain.history import GENESIS_HASH
from shared.domain.missing_secrets import MissingSecret
from shared.domain.model_failures import ModelOutage
from shared.domain.records import AgentId, AgentState, WaitId, WorkItemId
from shared.domain.usage import DayTokens

MAX_TURN_ATTEMPTS = 3
"""A WorkItem whose turns fail this many times in a row is blocked (the crash rule, contract §4)."""


class AgentRecord(Record):
    """The agent's state plus what the ledger needs to keep it consistent.

    `version` moves on every write for this agent, so a commit computed from a stale read is
    refused; `history_seq`/`history_head` are the chain's tip.
    """

    state: AgentState
    version: int = Field(ge=1)
    history_seq: int = Field(ge=0, default=0)
    history_head: str = GENESIS_HASH
    history_archived_seq: int = Field(ge=0, default=0)
    """The last seq of the agent's committed archive segments: the hot history starts after."""
    agent_token_hash: str
    callback_token_id: str
    current_turn_id: str | None = None
    current_turn_work_item_id: WorkItemId | None = None
    failed_attempts: dict[str, int] = Field(default_factory=dict)
    turn_reviewed: dict[str, int] = Field(default_factory=dict)
    """Trigger counts the running turn shows the model, per wait: they become the waits'
    `reviewed_trigger_count` only when that turn finishes, so a turn that dies (or fails) before
    its end leaves the triggers for the retry to review."""
    turn_inbox: tuple[str, ...] = ()
    """Inbox message ids the running turn opened with (the inbox's head): consumed when the
    turn reaches its end, kept for the next turn when it fails or is interrupted."""
    inbox_failed: dict[str, int] = Field(default_factory=dict)
    """How many failed or interrupted turns were shown each inbox message still waiting."""
    spec_version: int = Field(ge=0, default=0)
    """Moves by one on every spec change; 0 for an agent created before specs existed."""
    spec_digest: dict[str, str] = Field(default_factory=dict)
    """SHA-256 of each top-level spec field's canonical JSON: an identical PUT is found, and the
    changed fields named, without loading the spec itself (it lives under its own key)."""
    exhaustion_reported: bool = False
    """`wake_budget_exhausted` was recorded for the current budget; fresh input clears it."""
    model_outage: ModelOutage | None = None
    """The agent's model was unreachable through a turn's retries; cleared by a successful
    model call."""
    missing_secret: MissingSecret | None = None
    """The last executor to take a tick lacked a variable the spec names; cleared when a turn
    begins or the spec changes."""
    daily_token_budget: int | None = Field(default=None, ge=1)
    """The spec's `limits.daily_token_budget`, kept here so the scheduler reads it with the
    agent's state (input + output tokens per UTC day; None: no budget)."""
    day_tokens: DayTokens | None = None
    """Budget tokens (input + output) spent on the latest UTC day with usage."""
    budget_reported_day: str | None = None
    """The UTC day `token_budget_exhausted` was last recorded (once per day)."""
    delegations_out: dict[str, DelegationRecord] = Field(default_factory=dict)
    """This agent's running delegations, by id (finished ones live only in the delegations
    hash): a result, a cancel or the end of the parent item decides from these."""
    cancelled_delegations: tuple[str, ...] = ()
    """Delegations to this agent cancelled before their WorkItem arrived (most recent last,
    bounded): a creation arriving late creates nothing."""
    paused: AgentPause | None = None
    """Set by the operator's pause, cleared by resume: no turn starts while it is set."""
    retired: AgentRetirement | None = None
    """Set once by the operator's retire: the agent never runs again."""
    spawned_by: SpawnedBy | None = None
    """For a private child: the delegation it was spawned for, and its bound WorkItem."""
    parent_agent_id: str | None = None
    """The agent that spawned this one (private or public), if one did: a SendMessage peer."""
    children: tuple[str, ...] = ()
    peers: tuple[str, ...] = ()
    """The spec's `peers` (kept here so SendMessage is decided without reading the spec)."""
    """Agents this one spawned (private children and public named agents), oldest first."""
    nudge_pending: bool = False
    """A delegation result arrived since the last turn began and no fresh input since: the
    turn it wakes spends the wake budget, and none starts while the budget is spent."""
    created_at: UtcDatetime


class CapabilityRecord(Record):
    """A capability token, stored under the hash of the token; `wait_id` None = agent scope."""

    token_id: str
    agent_id: AgentId
    wait_id: WaitId | None = None


class Evidence(Record):
    """A callback or task result body kept with its provenance, shown to the reviewing turn."""

    id: str
    agent_id: AgentId
    wait_id: WaitId | None
    work_item_id: WorkItemId | None
    origin: str
    token_id: str | None = None
    delivery_id: str | None = None
    content_type: str | None = None
    body: Annotated[str, Field(max_length=65_536)]
    body_encoding: Literal["utf-8", "base64"] = "utf-8"
    """How `body` holds the delivered bytes: as text, or base64 when they were not UTF-8 (so a
    reader can tell an encoded binary body from text that merely looks like base64)."""
    created_at: UtcDatetime
