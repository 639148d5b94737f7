"""Ledger events: past-tense facts, appended to the agent's history and its partition stream."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from shared.domain.base import NonEmptyStr, UtcDatetime
from shared.domain.delegation import DelegationRecord, DelegationStatus
from shared.domain.history import HistoryEvent
from shared.domain.records import (
    AgentId,
    AgentLoop,
    BriefRecord,
    DeliverySummaryRecord,
    PlanArtifact,
    Posture,
    ProcessNote,
    WaitId,
    WaitingIntent,
    WorkItem,
    WorkItemId,
)
from shared.domain.usage import TurnUsage
from shared.domain.wake import TickKind
from shared.wire.commands import CallbackSource, CallOutcome, TurnOutcome
from shared.wire.message import Message

_ENVELOPE_PART: set[str] = {"agent_id", "work_item_id"}
"""What every event carries besides its data (the history stores it beside `data`)."""
NOT_IN_EVENTS = {"process_notes"}
"""What an event carrying a whole WorkItem leaves out of it: the notes are the largest part of
a WorkItem and would be copied into every change of it (the history and the event streams);
they are read with GetWorkItem `include_process_notes`, and each note is in the history once,
in its `work_item_compacted`."""
_EXCLUDED: dict[str, Any] = {**dict.fromkeys(_ENVELOPE_PART, True), "work_item": NOT_IN_EVENTS}


class Event(Message):
    agent_id: AgentId
    work_item_id: WorkItemId | None = None

    def data(self) -> dict[str, Any]:
        """The type-specific part, as it is stored in the history's `data` field."""
        return self.model_dump(mode="json", exclude=_EXCLUDED)


class AgentCreated(Event):
    message_type = "agent_created"
    loop: AgentLoop


class AgentSpecChanged(Event):
    """The agent's spec changed: `spec_version` is the new version, `changed` its top-level
    fields that differ from the previous one."""

    message_type = "agent_spec_changed"
    spec_version: int
    changed: tuple[str, ...]


class WorkItemCreated(Event):
    message_type = "work_item_created"
    work_item: WorkItem


class WorkItemUpdated(Event):
    message_type = "work_item_updated"
    work_item: WorkItem
    changed: tuple[str, ...]


class WorkItemPicked(Event):
    message_type = "work_item_picked"
    previous_work_item_id: WorkItemId | None
    switch_kind: NonEmptyStr
    reason: str | None
    reason_required: bool
    reason_missing: bool
    focus_mode: NonEmptyStr
    blocker_cleared: bool
    picked_by: Literal["agent", "operator"] = "agent"
    """`operator`: sent with the operator's authority (the tools route with the operator
    token, as `longrun board apply` does), not by the agent itself."""


class WorkItemFocusReleased(Event):
    message_type = "work_item_focus_released"
    cause: NonEmptyStr
    reason: str | None = None
    """The operator's words when the operator put the item down (cause `put_down`)."""


class WorkItemCompleted(Event):
    message_type = "work_item_completed"
    work_item: WorkItem
    report_promoted: bool
    completed_with_unfinished_todos: bool
    unfinished_todo_count: int = Field(ge=0)
    pending_todo_count: int = Field(ge=0)
    in_progress_todo_count: int = Field(ge=0)


CancelledBy = Literal["agent", "operator", "delegator"]


class WorkItemCancelled(Event):
    message_type = "work_item_cancelled"
    work_item: WorkItem
    reason: NonEmptyStr
    cancelled_by: CancelledBy


class WorkItemVerifying(Event):
    """CompleteWorkItem on a gated item: its checks now run (`work_item.verification`)."""

    message_type = "work_item_verifying"
    work_item: WorkItem
    attempt: int = Field(ge=1)
    awaited: tuple[str, ...]


class CheckVerdictRecorded(Event):
    message_type = "check_verdict_recorded"
    attempt: int = Field(ge=1)
    check_index: int = Field(ge=0)
    kind: NonEmptyStr
    passed: bool
    reason: str
    source: NonEmptyStr


class AcceptancePassed(Event):
    """Every check passed: the item is completed as done and its report promoted."""

    message_type = "acceptance_passed"
    work_item: WorkItem
    attempt: int = Field(ge=1)


class AcceptanceFailed(Event):
    """A check failed: the item is open and runnable again, the agent told why."""

    message_type = "acceptance_failed"
    work_item: WorkItem
    attempt: int = Field(ge=1)
    reasons: tuple[str, ...]


class WaitCreated(Event):
    message_type = "wait_created"
    wait: WaitingIntent


class WaitCancelled(Event):
    message_type = "wait_cancelled"
    wait_id: WaitId
    cause: NonEmptyStr


class WaitTriggered(Event):
    message_type = "wait_triggered"
    wait_id: WaitId
    trigger_count: int = Field(ge=1)
    source: NonEmptyStr
    delivery_id: str | None = None
    token_id: str | None = None
    content_type: str | None = None


class OperatorMessageReceived(Event):
    message_type = "operator_message_received"
    message_id: NonEmptyStr
    text: str
    triggered_wait_id: WaitId | None = None


class CallbackDeliveredToInbox(Event):
    message_type = "callback_delivered_to_inbox"
    message_id: NonEmptyStr
    delivery_id: NonEmptyStr
    source: CallbackSource


class RecheckConsumed(Event):
    message_type = "recheck_consumed"
    work_item_ids: tuple[WorkItemId, ...]


class TurnStarted(Event):
    message_type = "turn_started"
    turn_id: NonEmptyStr
    fencing_token: int = Field(ge=1)
    tick_kind: TickKind
    turn_index: int = Field(ge=1)
    interrupted_turn_id: str | None = None
    tick_id: str | None = None


class TurnFinished(Event):
    message_type = "turn_finished"
    turn_id: NonEmptyStr
    outcome: TurnOutcome
    error: str | None = None
    usage: TurnUsage | None = None
    rounds: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    """Calls answered in the turn that no `tool_call_started` records (all but MCP and
    RunCommand calls); `tool_errors` names those of them that answered an error."""
    tool_errors: tuple[str, ...] = ()


class BriefRecorded(Event):
    message_type = "brief_recorded"
    brief: BriefRecord


class DeliverySummaryRecorded(Event):
    message_type = "delivery_summary_recorded"
    summary: DeliverySummaryRecord


class PlanArtifactRefreshed(Event):
    message_type = "plan_artifact_refreshed"
    artifact: PlanArtifact


class WakeBudgetExhausted(Event):
    message_type = "wake_budget_exhausted"
    used: int = Field(ge=0)
    limit: int = Field(ge=1)


class WakeBudgetReset(Event):
    message_type = "wake_budget_reset"
    cause: NonEmptyStr


class InboxUndeliverable(Event):
    """Inbox messages set aside after the turns shown them failed `attempts` times."""

    message_type = "inbox_undeliverable"
    message_ids: tuple[NonEmptyStr, ...]
    attempts: int = Field(ge=1)
    error: str


class ModelRetriesExhausted(Event):
    """The agent's model stayed unreachable through a turn's retries; it runs again at
    `retry_at` (why-not-running `model_unavailable`)."""

    message_type = "model_retries_exhausted"
    provider: NonEmptyStr
    status: int | None = None
    retry_at: UtcDatetime


class TokenBudgetExhausted(Event):
    """The agent spent its daily token budget: no turn starts before `resets_at` unless the
    operator raises the limit. Recorded once per UTC day."""

    message_type = "token_budget_exhausted"
    used: int = Field(ge=0)
    limit: int = Field(ge=1)
    resets_at: UtcDatetime


class AgentPaused(Event):
    message_type = "agent_paused"
    reason: NonEmptyStr
    by: NonEmptyStr
    interrupt: bool = False


class AgentResumed(Event):
    message_type = "agent_resumed"
    by: NonEmptyStr


class AgentRetired(Event):
    message_type = "agent_retired"
    reason: NonEmptyStr
    by: NonEmptyStr
    cancelled_work_items: tuple[str, ...] = ()


class AgentParked(Event):
    message_type = "agent_parked"
    posture: Posture
    reason: NonEmptyStr
    name: str | None = None
    """With `missing_secret`: the environment variable the executor lacks."""


class TranscriptRecorded(Event):
    message_type = "transcript_recorded"
    turn_id: NonEmptyStr
    entries: int = Field(ge=0)


class WorkItemCompacted(Event):
    """Earlier rounds of a WorkItem were compacted into a process note."""

    message_type = "work_item_compacted"
    note: ProcessNote
    merged: tuple[str, ...] = ()
    notes: int = Field(ge=1)
    turn_id: NonEmptyStr


class TranscriptTrimmed(Event):
    message_type = "transcript_trimmed"
    entries: int = Field(ge=1)
    rounds: int = Field(ge=0)
    turn_id: NonEmptyStr


class HistoryArchived(Event):
    """The agent's history up to `upto_seq` left Redis for the archive's `segment` (a file
    relative to the agent's archive directory); the chain goes on from its last hash."""

    message_type = "history_archived"
    upto_seq: int = Field(ge=1)
    segment: NonEmptyStr


class WorkItemsArchived(Event):
    """Finished WorkItems left Redis (with their briefs and delivery summaries) for the
    archive: their files under the agent's `items/`, listed by the manifest `batch`."""

    message_type = "work_items_archived"
    batch: NonEmptyStr
    work_item_ids: tuple[WorkItemId, ...] = Field(min_length=1)


class LivenessRepaired(Event):
    message_type = "liveness_repaired"
    kind: NonEmptyStr


class TimerScheduled(Event):
    """A WaitFor(timer) or a recheck deadline the scheduler must fire at `due_at`."""

    message_type = "timer_scheduled"
    due_at: UtcDatetime
    wait_id: WaitId | None = None


DeadlineTarget = Literal["wait", "delegation", "verification"]


class DeadlineScheduled(Event):
    """A wait's, a delegation's or an awaited check's deadline (target id `<work item id>:
    <attempt>:<check index>` for a check): the scheduler fires `ExpireDeadline` at `due_at`."""

    message_type = "deadline_scheduled"
    target: DeadlineTarget
    target_id: NonEmptyStr
    due_at: UtcDatetime


class WaitExpired(Event):
    message_type = "wait_expired"
    wait_id: WaitId
    reason: NonEmptyStr
    deadline_at: UtcDatetime


class ToolCallStarted(Event):
    """An external (MCP) call was about to be made."""

    message_type = "tool_call_started"
    call_id: NonEmptyStr
    server: NonEmptyStr
    tool: NonEmptyStr
    args_sha256: str
    arguments: str = ""
    turn_id: NonEmptyStr


class ToolCallFinished(Event):
    """How an external call ended (`unknown`: its turn died between the two records)."""

    message_type = "tool_call_finished"
    call_id: NonEmptyStr
    outcome: CallOutcome
    result_chars: int = 0
    truncated: bool = False


class DelegationCreated(Event):
    """This agent delegated a WorkItem (recorded on the delegating agent's side)."""

    message_type = "delegation_created"
    delegation: DelegationRecord


class DelegationReceived(Event):
    """Another agent delegated this WorkItem to this agent (the child's side)."""

    message_type = "delegation_received"
    delegation: DelegationRecord


class DelegationFinished(Event):
    """A delegation ended, as seen on this agent's side (`cause`: what ended it here)."""

    message_type = "delegation_finished"
    delegation_id: NonEmptyStr
    status: DelegationStatus
    report: str | None = None
    cause: NonEmptyStr


class AgentSpawned(Event):
    """This agent spawned another (on the spawning agent's side; `work_item_id`: its current
    WorkItem then). `delegation` for a private child, None for a public named agent."""

    message_type = "agent_spawned"
    child_agent_id: AgentId
    kind: Literal["private_child", "public_named"]
    workspace_mode: Literal["isolated", "shared"]
    delegation: DelegationRecord | None = None


class DelegationBound(Event):
    """A spawned child's delegation now names its WorkItem (`work_item_id`: on the child's
    side, the bound item; on the parent's, the item the delegation serves)."""

    message_type = "delegation_bound"
    delegation_id: NonEmptyStr
    child_agent_id: AgentId
    child_work_item_id: WorkItemId


class MessageSent(Event):
    """This agent sent another a message (SendMessage)."""

    message_type = "message_sent"
    message_id: NonEmptyStr
    to_agent: AgentId
    reply_to: str | None = None


class PeerMessageReceived(Event):
    """Another agent's message reached this agent's inbox (origin `peer`)."""

    message_type = "peer_message_received"
    message_id: NonEmptyStr
    from_agent: AgentId
    text: str
    reply_to: str | None = None


EVENTS: tuple[type[Event], ...] = (
    AgentCreated,
    AgentSpecChanged,
    WorkItemCreated,
    WorkItemUpdated,
    WorkItemPicked,
    WorkItemFocusReleased,
    WorkItemCompleted,
    WorkItemCancelled,
    WorkItemVerifying,
    CheckVerdictRecorded,
    AcceptancePassed,
    AcceptanceFailed,
    WaitCreated,
    WaitCancelled,
    WaitTriggered,
    OperatorMessageReceived,
    CallbackDeliveredToInbox,
    RecheckConsumed,
    TurnStarted,
    TurnFinished,
    BriefRecorded,
    DeliverySummaryRecorded,
    PlanArtifactRefreshed,
    WakeBudgetExhausted,
    WakeBudgetReset,
    InboxUndeliverable,
    ModelRetriesExhausted,
    TokenBudgetExhausted,
    AgentParked,
    DeadlineScheduled,
    WaitExpired,
    AgentPaused,
    AgentResumed,
    AgentRetired,
    TranscriptRecorded,
    LivenessRepaired,
    TimerScheduled,
    ToolCallStarted,
    ToolCallFinished,
    DelegationCreated,
    DelegationReceived,
    DelegationFinished,
    AgentSpawned,
    DelegationBound,
    MessageSent,
    PeerMessageReceived,
    WorkItemCompacted,
    TranscriptTrimmed,
    HistoryArchived,
    WorkItemsArchived,
)


class LedgerEvents(Message):
    """One entry of a partition's event stream: the history events one command appended."""

    message_type = "ledger_events"
    agent_id: AgentId
    command_id: str
    events: tuple[HistoryEvent, ...]
