"""Ledger commands: imperative, one handler (the ledger), may be rejected with a reason."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from shared.domain.acceptance import AcceptanceCheck, VerdictSourceName
from shared.domain.archive import ITEM_BATCH_MAX
from shared.domain.base import NonEmptyStr, UtcDatetime
from shared.domain.delegation import DelegatedFrom, DelegationId, DelegationStatus, SpawnedBy
from shared.domain.missing_secrets import MissingSecret
from shared.domain.model_failures import ModelOutage
from shared.domain.records import (
    AgentId,
    AgentLoop,
    PlanArtifact,
    PlanStatus,
    ProcessNote,
    TodoItem,
    WaitId,
    WorkItemId,
)
from shared.domain.specs import AgentSpec
from shared.domain.tools import (
    CancelDelegationInput,
    CancelWorkItemInput,
    CompleteWorkItemInput,
    CreateWorkItemInput,
    DelegateWorkItemInput,
    GetWorkItemInput,
    ListWorkItemsInput,
    PickWorkItemInput,
    SendMessageInput,
    SpawnAgentInput,
    SubmitVerdictInput,
    ToolInput,
    ToolName,
    UpdateWorkItemInput,
    WaitForInput,
)
from shared.domain.usage import BudgetExhausted, TurnUsage
from shared.domain.wake import TickKind
from shared.wire.message import Message

CommandId = Annotated[str, Field(min_length=1, max_length=200)]
TokenHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
FencingToken = Annotated[int, Field(ge=1)]


class Command(Message):
    command_id: CommandId
    agent_id: AgentId
    reply_to: str | None = None
    """Stream the ledger answers on (the sender's reply stream), if the sender waits."""


class ToolCommand(Command):
    """A WorkItem tool call. `fencing_token` is absent for calls made outside a turn."""

    tool: ClassVar[ToolName]
    fencing_token: FencingToken | None = None
    turn_id: str | None = None
    args: ToolInput
    by_operator: bool = False
    """Sent with the operator's authority (an operator route, or the tools route called with
    the operator token) rather than by the owning agent."""


class CreateWorkItem(ToolCommand):
    """The sender mints the id and creates the plan file first, so the ledger never touches files
    (Decision: the ledger owns only Redis; executors and ingress share the agent home)."""

    message_type = "create_work_item"
    tool = ToolName.CREATE_WORK_ITEM
    args: CreateWorkItemInput
    work_item_id: WorkItemId
    plan_artifact: PlanArtifact


class UpdateWorkItem(ToolCommand):
    message_type = "update_work_item"
    tool = ToolName.UPDATE_WORK_ITEM
    args: UpdateWorkItemInput


class PickWorkItem(ToolCommand):
    message_type = "pick_work_item"
    tool = ToolName.PICK_WORK_ITEM
    args: PickWorkItemInput


class GetWorkItem(ToolCommand):
    message_type = "get_work_item"
    tool = ToolName.GET_WORK_ITEM
    args: GetWorkItemInput


class ListWorkItems(ToolCommand):
    message_type = "list_work_items"
    tool = ToolName.LIST_WORK_ITEMS
    args: ListWorkItemsInput


class CompleteWorkItem(ToolCommand):
    message_type = "complete_work_item"
    tool = ToolName.COMPLETE_WORK_ITEM
    args: CompleteWorkItemInput
    report_text: str | None = None
    """The same round's operator-facing text (for the HTTP route, `assistant_text`)."""


class CancelWorkItem(ToolCommand):
    message_type = "cancel_work_item"
    tool = ToolName.CANCEL_WORK_ITEM
    args: CancelWorkItemInput


class WaitFor(ToolCommand):
    message_type = "wait_for"
    tool = ToolName.WAIT_FOR
    args: WaitForInput
    capability_token_hash: TokenHash | None = None
    """For external waits: the hash of the fresh capability token the sender holds."""


class DelegateWorkItem(ToolCommand):
    """The sender mints the delegation id, the child's WorkItem id and its plan file (in the
    child agent's home), as it does for CreateWorkItem."""

    message_type = "delegate_work_item"
    tool = ToolName.DELEGATE_WORK_ITEM
    args: DelegateWorkItemInput
    delegation_id: DelegationId
    child_work_item_id: WorkItemId
    child_plan_artifact: PlanArtifact


class CancelDelegation(ToolCommand):
    message_type = "cancel_delegation"
    tool = ToolName.CANCEL_DELEGATION
    args: CancelDelegationInput


class SpawnAgent(ToolCommand):
    """The sender resolves the child's spec (preset, template or the parent's), mints its id,
    the delegation id of a private child and the child's token hashes (nobody is shown the
    tokens: the operator reaches children like any agent), and links a shared home; the ledger
    records the spawn and leaves `CreateSpawnedAgent` in the outbox."""

    message_type = "spawn_agent"
    tool = ToolName.SPAWN_AGENT
    args: SpawnAgentInput
    child_agent_id: AgentId
    delegation_id: DelegationId | None = None
    child_spec: AgentSpec
    agent_token_hash: TokenHash
    callback_token_hash: TokenHash


class SendMessage(ToolCommand):
    """The sender mints the message id; the ledger checks the recipient is a peer and owes it
    `DeliverPeerMessage` through the outbox."""

    message_type = "send_message"
    tool = ToolName.SEND_MESSAGE
    args: SendMessageInput
    message_id: NonEmptyStr


class SubmitVerdict(ToolCommand):
    message_type = "submit_verdict"
    tool = ToolName.SUBMIT_VERDICT
    args: SubmitVerdictInput


TOOL_COMMANDS: dict[ToolName, type[ToolCommand]] = {
    cls.tool: cls
    for cls in (
        CreateWorkItem,
        UpdateWorkItem,
        PickWorkItem,
        GetWorkItem,
        ListWorkItems,
        CompleteWorkItem,
        CancelWorkItem,
        WaitFor,
        DelegateWorkItem,
        CancelDelegation,
        SubmitVerdict,
        SpawnAgent,
        SendMessage,
    )
}


class RecordVerdict(Command):
    """A verdict on a verifying WorkItem's checks. From the webhook runner (`check_index` and
    `attempt` given, id from `verdict_command_id`) or the operator (`check_index` None: every
    awaited operator_approval check). A verdict for another attempt changes nothing."""

    message_type = "record_verdict"
    work_item_id: WorkItemId
    attempt: Annotated[int, Field(ge=1)] | None = None
    """The attempt judged; None: the current one."""
    check_index: Annotated[int, Field(ge=0)] | None = None
    source: VerdictSourceName
    passed: bool
    reason: Annotated[str, Field(max_length=4000)] = ""


class PutDownWorkItem(Command):
    """The operator takes focus off the agent's current WorkItem (the org board's move back to
    TODO): the item stays open as it is, and the agent chooses what to pick next."""

    message_type = "put_down_work_item"
    work_item_id: WorkItemId
    reason: NonEmptyStr


class CreateDelegatedWorkItem(Command):
    """To the child agent, from the delegating agent's outbox (id `<delegation id>:create`):
    create the delegated WorkItem, unless it exists or its delegation was cancelled first."""

    message_type = "create_delegated_work_item"
    work_item_id: WorkItemId
    plan_artifact: PlanArtifact
    objective: NonEmptyStr
    plan_status: PlanStatus = PlanStatus.DRAFT
    todo_list: tuple[TodoItem, ...] = ()
    delegated_from: DelegatedFrom
    acceptance: tuple[AcceptanceCheck, ...] = ()
    """The delegator's checks, carried by the delegated WorkItem."""


class CreateSpawnedAgent(Command):
    """To the new agent, from the spawning agent's outbox (id `<delegation id>:create` for a
    private child, `spawn:<parent>` for a public named agent): create it with the spec and the
    first inbox message, unless it exists (then nothing is created; a private child's
    delegation fails, unless this very spawn created it)."""

    message_type = "create_spawned_agent"
    parent_agent_id: AgentId
    spec: AgentSpec
    agent_token_hash: TokenHash
    callback_token_hash: TokenHash
    message: Annotated[str, Field(max_length=32_000)] | None = None
    spawned_by: SpawnedBy | None = None
    """For a private child: the delegation it serves."""


class DeliverPeerMessage(Command):
    """To the recipient, from the sender's outbox (id `<message id>:deliver`): a `peer` inbox
    message that wakes it as a nudge (it spends the wake budget)."""

    message_type = "deliver_peer_message"
    message_id: NonEmptyStr
    sender: AgentId
    text: Annotated[str, Field(min_length=1, max_length=32_000)]
    in_reply_to: str | None = None
    """The message this one answers (`reply_to` names the ledger's answer stream)."""


class RecordDelegationBound(Command):
    """To the spawning agent, from the child's outbox (id `<delegation id>:bind`): the child's
    first WorkItem is bound to the delegation."""

    message_type = "record_delegation_bound"
    delegation_id: DelegationId
    child_agent_id: AgentId
    child_work_item_id: WorkItemId


class RecordDelegationResult(Command):
    """To the delegating agent, from the child's outbox (id `<delegation id>:result`): the
    delegation ended; a delegation already ended changes nothing."""

    message_type = "record_delegation_result"
    delegation_id: DelegationId
    status: DelegationStatus
    report: str | None = None
    child_agent_id: AgentId
    child_work_item_id: WorkItemId | None


class CancelDelegatedWorkItem(Command):
    """To the child agent, from the delegating agent's outbox (id `<delegation id>:cancel`):
    the delegator cancelled; the child WorkItem is cancelled and nothing is reported back."""

    message_type = "cancel_delegated_work_item"
    delegation_id: DelegationId
    work_item_id: WorkItemId | None
    """None: a spawned child's delegation not bound when the parent cancelled."""
    reason: NonEmptyStr


class EnsureAgent(Command):
    """Create the agent if it does not exist, or change its spec; tokens arrive hashed and are
    stored hashed. `loop` None: builtin on creation, unchanged afterwards. `spec` None: the
    default spec on creation, unchanged afterwards."""

    message_type = "ensure_agent"
    loop: AgentLoop | None = None
    spec: AgentSpec | None = None
    agent_token_hash: TokenHash
    callback_token_hash: TokenHash


class AppendOperatorMessage(Command):
    message_type = "append_operator_message"
    message_id: NonEmptyStr
    text: NonEmptyStr
    work_item_id: WorkItemId | None = None


class CallbackSource(StrEnum):
    HTTP = "http"
    STREAM = "stream"


class RecordCallback(Command):
    """A callback authenticated by capability; dedup by (capability, delivery_id)."""

    message_type = "record_callback"
    token_hash: TokenHash
    delivery_id: NonEmptyStr
    content_type: str
    body: str
    body_encoding: Literal["utf-8", "base64"] = "utf-8"
    source: CallbackSource


class TaskStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RecordTaskResult(Command):
    message_type = "record_task_result"
    task_id: NonEmptyStr
    status: TaskStatus
    summary: str


class FireTimer(Command):
    message_type = "fire_timer"
    wait_id: WaitId
    due_at: UtcDatetime


class ExpireDeadline(Command):
    """A deadline's timer fired (`command_id` derives from its target and due instant, so a
    timer fired twice expires once). The ledger checks the deadline against its own record: not
    yet due (the scheduler's clock ran ahead), it schedules the deadline again; already done
    with (the wait ended, the delegation finished), it changes nothing."""

    message_type = "expire_deadline"
    target: Literal["wait", "delegation", "verification"]
    target_id: Annotated[str, Field(min_length=1, max_length=200)]
    due_at: UtcDatetime


class ConsumeRecheck(Command):
    """Deliver due rechecks of an agent, coalesced: marks `recheck_consumed_at` on each item."""

    message_type = "consume_recheck"
    work_item_ids: tuple[WorkItemId, ...]


class BeginTurn(Command):
    message_type = "begin_turn"
    turn_id: NonEmptyStr
    fencing_token: FencingToken
    tick_id: NonEmptyStr
    tick_kind: TickKind
    interrupted_turn_id: str | None = None
    reviewed_triggers: dict[WaitId, int] = Field(default_factory=dict)
    """Trigger counts this turn shows the model; they become reviewed_trigger_count when the
    turn finishes (not if it fails or is interrupted: the retry reviews them)."""
    inbox_shown: tuple[NonEmptyStr, ...] = ()
    """Ids of the inbox messages this turn shows the model, in inbox order: consumed when the
    turn finishes, shown again to the next turn if it fails or is interrupted."""


class TurnOutcome(StrEnum):
    COMPLETED = "completed"
    WAITING = "waiting"
    YIELDED = "yielded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    MODEL_UNAVAILABLE = "model_unavailable"
    """The model stayed unreachable through the turn's retries: not a failed attempt."""
    PAUSED = "paused"
    """Ended by the operator's pause or retire: not an attempt, like a model outage."""


MAX_TOOL_ERRORS = 100
"""Tool errors a turn names in its FinishTurn (the count of calls stays exact past it)."""
ToolErrorLine = Annotated[str, Field(max_length=300)]


class FinishTurn(Command):
    message_type = "finish_turn"
    turn_id: NonEmptyStr
    fencing_token: FencingToken
    outcome: TurnOutcome
    work_item_id: WorkItemId | None = None
    error: str | None = None
    inbox_consumed: int = Field(default=0, ge=0)
    """Inbox messages a successful turn consumed (its opening inbox and any it took in while
    running); ignored for a failed or interrupted turn, whose inbox stays for the next one."""
    usage: TurnUsage | None = None
    """Tokens of the turn's successful model calls (None: unknown, as for older senders)."""
    model_outage: ModelOutage | None = None
    """With `model_unavailable`: which model, its last status and when to try again."""
    reply_text: str | None = None
    """The turn's final assistant text when it promoted no completion report: recorded as a
    `reply` brief by a turn that reached its end."""
    answered: tuple[NonEmptyStr, ...] = ()
    """The inbox message ids the turn was shown (at its start and between rounds)."""
    rounds: int = Field(default=0, ge=0)
    """Model rounds the turn ran (run telemetry)."""
    tool_calls: int = Field(default=0, ge=0)
    """Tool calls the turn answered that are not in the history on their own: every call but
    the external ones (MCP, RunCommand), which `tool_call_started` records."""
    tool_errors: tuple[ToolErrorLine, ...] = Field(default=(), max_length=MAX_TOOL_ERRORS)
    """Of those, each one that answered an error: `<tool>: <kind>: <message>`, cut short."""


class RefreshPlanArtifact(Command):
    message_type = "refresh_plan_artifact"
    work_item_id: WorkItemId
    artifact: PlanArtifact
    fencing_token: FencingToken | None = None


class PauseAgent(Command):
    """The operator pauses the agent: no turn starts; a running turn ends after its current
    round, or at once with `interrupt`."""

    message_type = "pause_agent"
    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    interrupt: bool = False
    by: str = "operator"


class ResumeAgent(Command):
    message_type = "resume_agent"
    by: str = "operator"


class RetireAgent(Command):
    """The operator retires the agent: its open WorkItems and their waits are cancelled, its
    running turn interrupted, its tokens refused; it never runs again. `work_item_ids`: the
    open items the sender read (the ledger loads only the items a command names). Sent again
    to a retired agent, it cancels whichever of the named items are still open: the sender's
    sweep for an item created while its first read was on its way."""

    message_type = "retire_agent"
    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    work_item_ids: tuple[WorkItemId, ...] = Field(default=(), max_length=10_000)
    by: str = "operator"


class ParkReason(StrEnum):
    WAKE_BUDGET_EXHAUSTED = "wake_budget_exhausted"
    NOTHING_RUNNABLE = "nothing_runnable"
    MODEL_UNAVAILABLE = "model_unavailable"
    TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"  # noqa: S105 (a reason, not a secret)
    MISSING_SECRET = "missing_secret"  # noqa: S105 (a reason, not a secret)


class ParkAgent(Command):
    """The scheduler found nothing to tick: record the posture (idle or dormant) and why."""

    message_type = "park_agent"
    reason: ParkReason
    budget: BudgetExhausted | None = None
    """With `token_budget_exhausted`: the spent budget the scheduler saw."""


class TranscriptEntry(Message):
    """One message of a turn: what the model was shown or said, or a tool call and its answer."""

    message_type = "transcript_entry"
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    round: int = Field(default=0, ge=0)
    tool_name: str | None = None
    tool_call_id: str | None = None


class RecordTranscript(Command):
    """Keep a turn's transcript, bound to the WorkItem that was current."""

    message_type = "record_transcript"
    turn_id: NonEmptyStr
    fencing_token: FencingToken | None = None
    work_item_id: WorkItemId | None = None
    entries: tuple[TranscriptEntry, ...]


class RecordLivenessRepair(Command):
    message_type = "record_liveness_repair"
    work_item_id: WorkItemId | None
    kind: NonEmptyStr


CallOutcome = Literal["ok", "error", "timeout", "unknown"]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class RecordMissingSecret(Command):
    """The executor holding the agent's lease lacks an environment variable the spec names: no
    turn runs, and the agent parks idle until `hold.retry_at` or a spec change (fenced)."""

    message_type = "record_missing_secret"
    fencing_token: FencingToken
    hold: MissingSecret


class RecordToolCallStart(Command):
    """An external (MCP) tool call is about to be made: recorded, fenced, before it is."""

    message_type = "record_tool_call_start"
    turn_id: NonEmptyStr
    fencing_token: FencingToken
    call_id: NonEmptyStr
    server: NonEmptyStr
    tool: NonEmptyStr
    args_sha256: Sha256
    arguments: Annotated[str, Field(max_length=2000)] = ""
    """The canonical JSON arguments, cut short: enough to name the call if its turn dies."""


class RecordToolCallFinish(Command):
    """How an external call ended; `unknown` is recorded by the turn after one that died."""

    message_type = "record_tool_call_finish"
    turn_id: NonEmptyStr
    fencing_token: FencingToken
    call_id: NonEmptyStr
    outcome: CallOutcome
    result_chars: Annotated[int, Field(ge=0)] = 0
    truncated: bool = False


class BeginFileToolCall(Command):
    """A file tool call that changes files, from outside a turn (the HTTP tools route, MCP), is
    about to run: the ledger claims its command id, so a repeat of the call never runs it again."""

    message_type = "begin_file_tool_call"
    tool: NonEmptyStr


class FinishFileToolCall(Command):
    """The envelope a claimed file tool call answered with, kept as this command's reply: a
    repeat of the call is answered with it."""

    message_type = "finish_file_tool_call"
    started_command_id: CommandId
    envelope: dict[str, Any]


class SignHistoryHead(Command):
    """Sign the agent's history tip as it stands when the ledger applies this (changes nothing;
    the answer is the signed head)."""

    message_type = "sign_history_head"


class CompactWorkItem(Command):
    """Store a WorkItem's process notes after a compaction: `notes` is the whole new list
    (older notes merged, `note` appended), so a repeat is harmless."""

    message_type = "compact_work_item"
    turn_id: NonEmptyStr
    fencing_token: FencingToken
    work_item_id: WorkItemId
    notes: tuple[ProcessNote, ...] = Field(min_length=1, max_length=64)
    merged: tuple[str, ...] = ()
    """Ids of the earlier notes folded into the first of `notes`."""


class TrimTranscript(Command):
    """Drop the agent's oldest recorded transcript entries: `entries` from the head, holding
    `rounds` rounds, all covered by a process note or bound to a completed WorkItem (the
    executor checked; the fencing token keeps two turns from trimming the same head)."""

    message_type = "trim_transcript"
    turn_id: NonEmptyStr
    fencing_token: FencingToken
    entries: int = Field(ge=1)
    rounds: int = Field(ge=0)


class CommitArchive(Command):
    """The archiver wrote the agent's history up to `upto_seq` (from the first event still hot)
    into a segment file whose SHA-256 is `segment_sha256`, fsynced: drop those hot events. The
    ledger drops them only if the same events, as it holds them, hash to the same file; it never
    reads the file (it does no file I/O)."""

    message_type = "commit_archive"
    upto_seq: int = Field(ge=1)
    segment_sha256: Sha256


class CommitItemArchive(Command):
    """The archiver wrote the files of a batch of the agent's finished WorkItems (each with its
    briefs and delivery summaries) and the batch's manifest, whose SHA-256 is `batch_sha256`,
    fsynced, at `written_at`: drop those hot copies. The ledger drops them only if the same
    WorkItems, briefs and summaries, as it holds them, make the same manifest (it never reads
    the files), none is open or current, and the files are recent (older ones a sweep may have
    taken for a crash's leftovers)."""

    message_type = "commit_item_archive"
    work_item_ids: tuple[WorkItemId, ...] = Field(min_length=1, max_length=ITEM_BATCH_MAX)
    batch_sha256: Sha256
    written_at: UtcDatetime


COMMANDS: tuple[type[Command], ...] = (
    *TOOL_COMMANDS.values(),
    RecordVerdict,
    PutDownWorkItem,
    EnsureAgent,
    AppendOperatorMessage,
    RecordCallback,
    RecordTaskResult,
    FireTimer,
    ConsumeRecheck,
    BeginTurn,
    FinishTurn,
    RefreshPlanArtifact,
    ParkAgent,
    RecordTranscript,
    RecordLivenessRepair,
    RecordToolCallStart,
    RecordToolCallFinish,
    BeginFileToolCall,
    FinishFileToolCall,
    CreateDelegatedWorkItem,
    RecordDelegationResult,
    CancelDelegatedWorkItem,
    CreateSpawnedAgent,
    RecordDelegationBound,
    DeliverPeerMessage,
    SignHistoryHead,
    RecordMissingSecret,
    CompactWorkItem,
    TrimTranscript,
    CommitArchive,
    ExpireDeadline,
    PauseAgent,
    ResumeAgent,
    RetireAgent,
    CommitItemArchive,
)
