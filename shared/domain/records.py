"""The records the ledger owns (docs/contract.md §1), with their exact field names and enums."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from shared.domain.acceptance import AcceptanceCheck, Verification, VerificationStatus
from shared.domain.base import NonEmptyStr, Record, UtcDatetime
from shared.domain.delegation import DelegatedFrom

WORK_ITEM_ID_PATTERN = r"^wi_[0-9A-HJKMNP-TV-Z]{26}$"
WAIT_ID_PATTERN = r"^wait_[0-9A-HJKMNP-TV-Z]{26}$"
WorkItemId = Annotated[str, StringConstraints(pattern=WORK_ITEM_ID_PATTERN)]
WaitId = Annotated[str, StringConstraints(pattern=WAIT_ID_PATTERN)]
AgentId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
"""Agent ids appear in URLs, file paths and Redis keys, so they are kept to a safe alphabet."""


class WorkItemState(StrEnum):
    OPEN = "open"
    COMPLETED = "completed"


class WorkItemOutcome(StrEnum):
    """How a completed WorkItem ended: its objective met, or dropped on purpose."""

    DONE = "done"
    CANCELLED = "cancelled"


class PlanStatus(StrEnum):
    DRAFT = "draft"
    READY = "ready"
    NEEDS_INPUT = "needs_input"


class TodoState(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class TodoItem(Record):
    text: NonEmptyStr
    state: TodoState = TodoState.PENDING


class PlanArtifact(Record):
    """Descriptor of the plan file; the body lives in the agent's home, never in the record."""

    path: str
    relative_path: str
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    bytes: Annotated[int, Field(ge=0)]
    updated_at: UtcDatetime
    preview: str
    preview_complete: bool


PLAN_PREVIEW_CHARS = 1600
NOTE_ID_PATTERN = r"^note_[0-9A-HJKMNP-TV-Z]{26}$"
NoteId = Annotated[str, StringConstraints(pattern=NOTE_ID_PATTERN)]


class NoteCovers(Record):
    """The turns a process note summarizes: the oldest and the newest, both included."""

    from_turn: NonEmptyStr
    to_turn: NonEmptyStr
    to_round: Annotated[int, Field(ge=1)] | None = None
    """The last round of `to_turn` the note covers, when it was written between two rounds of
    that turn (its later rounds are not covered); None: the whole turn."""


class ProcessNote(Record):
    """What the agent learned while working a WorkItem in earlier turns, compacted by its own
    model from the recorded rounds it covers (docs/architecture.md, "How a turn's prompt is
    assembled")."""

    id: NoteId
    work_item_id: WorkItemId
    text: NonEmptyStr
    covers: NoteCovers
    created_at: UtcDatetime


class WorkItem(Record):
    id: WorkItemId
    agent_id: AgentId
    revision: Annotated[int, Field(ge=1)]
    objective: NonEmptyStr
    state: WorkItemState = WorkItemState.OPEN
    plan_status: PlanStatus = PlanStatus.DRAFT
    plan_artifact: PlanArtifact
    todo_list: tuple[TodoItem, ...] = ()
    blocked_by: NonEmptyStr | None = None
    recheck_at: UtcDatetime | None = None
    recheck_consumed_at: UtcDatetime | None = None
    result_summary: NonEmptyStr | None = None
    outcome: WorkItemOutcome | None = None
    """None while open; `done` or `cancelled` once completed."""
    acceptance: tuple[AcceptanceCheck, ...] = ()
    """Checks that must all pass before the item can complete as done."""
    verification: Verification | None = None
    """The latest attempt to complete a gated item: verifying, failed or passed."""
    delegated_from: DelegatedFrom | None = None
    """Set on a WorkItem another agent delegated (docs/contract.md, delegation)."""
    process_notes: tuple[ProcessNote, ...] = ()
    """Oldest first; bounded in tokens by the executor, which merges older notes."""
    created_at: UtcDatetime
    updated_at: UtcDatetime

    @model_validator(mode="before")
    @classmethod
    def _completed_before_outcomes_were_done(cls, data: Any) -> Any:
        """Items completed before outcomes existed were all completed as done."""
        if (
            isinstance(data, dict)
            and data.get("state") == WorkItemState.COMPLETED
            and data.get("outcome") is None
        ):
            return {**data, "outcome": WorkItemOutcome.DONE}
        return data

    @property
    def is_open(self) -> bool:
        return self.state is WorkItemState.OPEN

    @property
    def is_open_review(self) -> bool:
        """Open, and delegated by a `reviewer_agent` check: SubmitVerdict decides it."""
        origin = self.delegated_from
        return self.is_open and origin is not None and origin.review_of is not None

    @property
    def is_verifying(self) -> bool:
        """Open, with its acceptance checks running: nothing but a verdict or a cancel moves it."""
        return (
            self.state is WorkItemState.OPEN
            and self.verification is not None
            and self.verification.status is VerificationStatus.VERIFYING
        )

    @property
    def held_for_operator(self) -> bool:
        """Open and blocked after LONGRUN_MAX_VERIFY_ATTEMPTS failed attempts: the agent can no
        longer move it; the operator's verdict, update or cancel does."""
        return (
            self.state is WorkItemState.OPEN
            and self.verification is not None
            and self.verification.held_for_operator
        )


class WakeKind(StrEnum):
    OPERATOR_INPUT = "operator_input"
    TASK_RESULT = "task_result"
    EXTERNAL = "external"
    TIMER = "timer"
    SYSTEM = "system"


class WaitStatus(StrEnum):
    ACTIVE = "active"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    """Its `deadline_at` passed before it was done with (`wait_expired`)."""


class WaitingIntent(Record):
    id: WaitId
    agent_id: AgentId
    work_item_id: WorkItemId | None = None
    wake: WakeKind
    reason: NonEmptyStr
    resource: str | None = None
    status: WaitStatus = WaitStatus.ACTIVE
    trigger_count: Annotated[int, Field(ge=0)] = 0
    last_triggered_at: UtcDatetime | None = None
    reviewed_trigger_count: Annotated[int, Field(ge=0)] = 0
    wake_at: UtcDatetime | None = None
    deadline_at: UtcDatetime | None = None
    """WaitFor's `deadline_s` from its creation: past it the wait expires and its item is
    blocked (`deadline passed: <reason>`)."""
    callback_url: str | None = None
    created_at: UtcDatetime
    cancelled_at: UtcDatetime | None = None

    @property
    def is_active(self) -> bool:
        return self.status is WaitStatus.ACTIVE

    @property
    def is_triggered(self) -> bool:
        """Derived, never stored: a trigger counts, it does not resolve the wait."""
        return self.trigger_count > 0

    @property
    def has_unreviewed_triggers(self) -> bool:
        return self.trigger_count > self.reviewed_trigger_count


class AgentLoop(StrEnum):
    BUILTIN = "builtin"
    EXTERNAL = "external"


class Posture(StrEnum):
    RUNNING = "running"
    IDLE = "idle"
    DORMANT = "dormant"
    STOPPED = "stopped"
    """Retired by the operator: no turn ever starts again."""
    PAUSED = "paused"
    """Paused by the operator: no turn starts until it is resumed."""


DEFAULT_WAKE_BUDGET = 25


class WakeBudget(Record):
    used: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int, Field(ge=1)] = DEFAULT_WAKE_BUDGET

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit


class ReadinessCounts(Record):
    runnable: int = 0
    waiting_for_operator: int = 0
    blocked: int = 0
    completed: int = 0


class AgentState(Record):
    agent_id: AgentId
    loop: AgentLoop = AgentLoop.BUILTIN
    current_work_item_id: WorkItemId | None = None
    posture: Posture = Posture.DORMANT
    wake_budget: WakeBudget = WakeBudget()
    inbox_pending: Annotated[int, Field(ge=0)] = 0
    turn_index: Annotated[int, Field(ge=0)] = 0
    counts: ReadinessCounts = ReadinessCounts()


class BriefKind(StrEnum):
    ACK = "ack"
    RESULT = "result"
    FAILURE = "failure"
    REPLY = "reply"
    """A turn's final assistant text when it promoted no completion report."""


class BriefRecord(Record):
    id: str
    agent_id: AgentId
    work_item_id: WorkItemId | None
    kind: BriefKind
    text: NonEmptyStr
    turn_id: str | None
    created_at: UtcDatetime
    in_reply_to: tuple[str, ...] = ()
    """The inbox messages this brief answers: those a replying turn was shown, or those set
    aside undelivered; how `longrun send --wait` finds the answer to its message."""


class DeliverySummaryRecord(Record):
    id: str
    agent_id: AgentId
    work_item_id: WorkItemId | None
    text: NonEmptyStr
    turn_id: str | None
    created_at: UtcDatetime
    warnings: tuple[str, ...] = ()


class MessageOrigin(StrEnum):
    """Where an inbox message came from; only `operator` carries operator authority."""

    OPERATOR = "operator"
    CALLBACK = "callback"
    ACCEPTANCE = "acceptance"
    """longrun itself: an acceptance check failed and the item is open again."""
    TASK_RESULT = "task_result"
    """A delegated WorkItem's result, delivered to the delegating agent."""
    DELEGATION = "delegation"
    """Another agent handed this agent a WorkItem, or spawned it with a message."""
    DEADLINE = "deadline"
    """longrun itself: a wait's deadline passed and its item is blocked."""
    PEER = "peer"
    """Another agent's message (SendMessage, or the message a public named agent was spawned
    with): `sender` names it."""


class InboxMessage(Record):
    id: str
    agent_id: AgentId
    origin: MessageOrigin
    text: str
    work_item_id: WorkItemId | None = None
    content_type: str | None = None
    body_encoding: Literal["utf-8", "base64"] = "utf-8"
    """How a callback's text is encoded: base64 for a binary body."""
    token_id: str | None = None
    delivery_id: str | None = None
    delegation_id: str | None = None
    status: str | None = None
    """With origin task_result: the delegation's status."""
    report: str | None = None
    """With origin task_result: the child's completion report."""
    sender: AgentId | None = None
    """With origin peer or a spawn's delegation: the agent that sent it."""
    reply_to: str | None = None
    """With origin peer: the id of the message this one answers."""
    created_at: UtcDatetime
