"""The shapes ingress reads and writes: HTTP bodies (so /openapi.json documents them) and the
plain-field stream entries external systems exchange with longrun (so /asyncapi.json does)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from shared.domain.base import NonEmptyStr
from shared.domain.records import (
    AgentLoop,
    AgentState,
    BriefRecord,
    DeliverySummaryRecord,
    Posture,
    WaitingIntent,
    WakeBudget,
    WorkItem,
    WorkItemId,
)
from shared.domain.specs import AgentSpec, StoredSpec
from shared.domain.stored import AgentRecord
from shared.domain.tool_offers import tools_unavailable
from shared.domain.usage import why_not_running
from shared.domain.why import Reason, ReasonKind
from shared.tool_registry import ToolDefinition
from shared.wire.commands import CommandId, TaskStatus

DeliveryId = Annotated[str, Field(min_length=1, max_length=200)]
DEFAULT_CONTENT_TYPE = "application/octet-stream"


class Body(BaseModel):
    """A request body: unknown fields are refused, so a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)


# ---- errors
class ErrorDetail(Answer):
    kind: str
    message: str
    details: dict[str, Any] | None = None


class ErrorAnswer(Answer):
    error: ErrorDetail


# ---- agents
class AgentSummary(Answer):
    agent_id: str
    loop: AgentLoop
    posture: Posture
    current_work_item_id: str | None
    labels: dict[str, str] = Field(default_factory=dict, description="The spec's labels.")


class AgentList(Answer):
    agents: list[AgentSummary]
    next_cursor: str | None = Field(
        default=None, description="Pass it as `cursor` for the next page; null at the end."
    )


class PutAgentBody(Body):
    loop: AgentLoop | None = Field(
        default=None, description="builtin when the agent is created; it never changes after."
    )
    spec: AgentSpec | None = Field(
        default=None, description="Left out: the default spec on creation, unchanged afterwards."
    )


class AgentCreatedAnswer(Answer):
    agent_id: str
    loop: AgentLoop
    agent_token: str = Field(description="Shown once: the ledger keeps only its hash.")
    callback_url: str = Field(description="The agent-scope callback URL (a capability).")
    spec: AgentSpec = Field(description="The stored spec, defaults filled in.")
    spec_version: int


class AgentExistsAnswer(Answer):
    agent_id: str
    loop: AgentLoop
    spec: AgentSpec = Field(description="The stored spec, defaults filled in.")
    spec_version: int
    callback_url: str | None = Field(
        default=None,
        description="Present while it can be rebuilt from the operator token that created it.",
    )


class AgentDetail(AgentState):
    """AgentState with the counts by readiness, the agent's spec (operator only), and why it
    starts no turn right now (null when nothing holds it)."""

    spec: AgentSpec
    spec_version: int
    why_not_running: dict[str, Any] | None = Field(
        default=None,
        description="{kind, ...}: retired {reason, since}, paused {reason, since}, "
        "missing_secret {name, retry_at}, "
        "model_unavailable {provider, status, retry_at}, "
        "token_budget_exhausted {used, limit, resets_at}, wake_budget_exhausted {used, limit}, "
        "verifying {work_items: [{work_item_id, attempt, awaiting}]} (nothing runnable while "
        "items wait for their acceptance checks).",
    )
    tools_unavailable: list[dict[str, str]] = Field(
        default_factory=list,
        description="[{tool, reason}]: tools the spec asks for that cannot be offered, such as "
        "RunCommand (tools.commands) when no turn executor has a working sandbox.",
    )

    @classmethod
    def of(
        cls,
        state: AgentState,
        record: AgentRecord,
        stored: StoredSpec,
        now: datetime,
        verifying: Sequence[WorkItem] = (),
        *,
        sandboxes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> AgentDetail:
        why = why_not_running(
            missing=record.missing_secret,
            outage=record.model_outage,
            spent=record.day_tokens,
            limit=record.daily_token_budget,
            wake_budget=state.wake_budget,
            posture=state.posture,
            now=now,
            runnable=state.counts.runnable,
            verifying=verifying,
            paused=record.paused,
            retired=record.retired,
        )
        return cls(
            **dict(state),
            spec=stored.spec,
            spec_version=stored.spec_version,
            why_not_running=why,
            tools_unavailable=tools_unavailable(stored.spec, sandboxes or {}),
        )


class MessageBody(Body):
    text: NonEmptyStr
    work_item_id: WorkItemId | None = None


class PauseBody(Body):
    reason: Annotated[str, Field(min_length=1, max_length=2000)]
    interrupt: StrictBool = False
    """End the running turn at once (its model call abandoned, calls in flight left with an
    unknown outcome) instead of after its current round."""


class RetireBody(Body):
    reason: Annotated[str, Field(min_length=1, max_length=2000)]


class MessageAccepted(Answer):
    message_id: str


class TaskResultBody(Body):
    status: TaskStatus
    summary: str = Field(max_length=65_536)


class TaskResultAccepted(Answer):
    task_id: str
    wait_id: str
    disposition: Literal["triggered"]


class ToolCallBody(Body):
    args: dict[str, Any]
    assistant_text: str | None = Field(
        default=None, description="The round's operator-facing text (the completion report)."
    )
    command_id: CommandId | None = Field(
        default=None, description="Repeat it to retry safely: the first answer comes back."
    )


class ToolSchema(Answer):
    name: str
    description: str
    input_schema: dict[str, Any] = Field(description="JSON Schema of the tool's `args`.")


class ToolsAnswer(Answer):
    tools: list[ToolSchema]

    @classmethod
    def of(cls, definitions: Sequence[ToolDefinition]) -> ToolsAnswer:
        return cls(
            tools=[
                ToolSchema(name=t.name, description=t.description, input_schema=t.input_schema)
                for t in definitions
            ]
        )


# ---- reads
class BriefsAnswer(Answer):
    briefs: list[BriefRecord] = Field(description="Newest first.")
    delivery_summaries: list[DeliverySummaryRecord] = Field(
        description="Those of the WorkItems whose briefs are on this page."
    )
    next_cursor: str | None = Field(
        default=None, description="Pass it as `cursor` for the next page; null at the end."
    )


class WhyNotRunningAnswer(Answer):
    """Why a WorkItem is not running now: one reason, plus the one fact that explains it."""

    work_item_id: str
    reason: ReasonKind = Field(description="First match wins, as in the scheduler's decision.")
    wait: WaitingIntent | None = Field(default=None, description="For waiting_<kind>: the wait.")
    text: str | None = Field(
        default=None,
        description="For blocked and needs_input: the blocker; for completed: "
        "the completion report.",
    )
    rank: int | None = Field(
        default=None, description="For queued: 1 is the next queued runnable WorkItem."
    )
    tick_id: str | None = Field(
        default=None, description="For tick_pending: the outstanding or about-to-be-sent tick."
    )
    wake_budget: WakeBudget | None = Field(
        default=None, description="For wake_budget_exhausted: the spent budget."
    )
    awaiting: list[str] | None = Field(
        default=None,
        description="For verifying: the acceptance checks still awaited "
        "(`webhook <url>`, `operator_approval`).",
    )

    @classmethod
    def of(cls, work_item_id: str, reason: Reason) -> WhyNotRunningAnswer:
        return cls(
            work_item_id=work_item_id,
            reason=reason.kind,
            wait=reason.wait,
            text=reason.text,
            rank=reason.rank,
            tick_id=reason.tick_id,
            wake_budget=reason.budget,
            awaiting=list(reason.awaiting) if reason.kind is ReasonKind.VERIFYING else None,
        )


class HistoryPage(Answer):
    events: list[dict[str, Any]]
    next_after: int = Field(description="Pass it as `after` for the next page.")
    next_cursor: str | None = Field(
        default=None,
        description="Pass it as `cursor` for the next page; null when this page reached the "
        "newest event.",
    )
    call_outcomes: dict[str, str] = Field(
        default_factory=dict,
        description="Derived, not stored: the outcome of each external call started in this "
        "page, by call id: ok, error or timeout as recorded; unknown when the turn that started "
        "it ended without recording one; running while that turn still runs.",
    )


class TranscriptPage(Answer):
    entries: list[dict[str, Any]] = Field(
        description="{seq, turn_id, work_item_id, role, content, round, ...} ascending by seq."
    )
    next_after: int = Field(description="Pass it as `after` for the next page.")


# ---- callbacks
Disposition = Literal["triggered", "duplicate", "delivered_to_inbox"]


class CallbackAccepted(Answer):
    delivery_id: str
    disposition: Disposition
    wait_id: str | None = None


# ---- plain-field stream entries (not codec envelopes)
class CallbackEntry(Body):
    """An entry of `<prefix>:callbacks`, pushed by a system that does not speak HTTP."""

    token: Annotated[str, Field(min_length=1, max_length=1000)] = Field(
        description="The capability token (the last path segment of a callback URL)."
    )
    delivery_id: DeliveryId = Field(
        description="Dedup key, shared with the HTTP Idempotency-Key of the same capability."
    )
    body: bytes = Field(default=b"", description="Raw bytes; JSON, text or binary.")
    content_type: str = Field(default=DEFAULT_CONTENT_TYPE, max_length=255)


class WakeEntry(Answer):
    """An entry of `<prefix>:wakes`: one tick for an agent whose loop runs outside longrun."""

    agent_id: str
    kind: str = Field(description="Tick kind: input, continue_current, review_triggered, ...")
    work_item_id: str | None = Field(default=None, description="Empty or absent when none.")
    candidates: str = Field(description="JSON array of {work_item_id, candidate_class, rank}.")
    tick_id: str = Field(description="Idempotency key of the tick.")


class DeadLetterEntry(Answer):
    """An entry of `<prefix>:dead-letter`: the original fields plus why and where from."""

    model_config = ConfigDict(frozen=True, extra="allow")

    reason: str
    source_stream: str
    source_id: str


# ---- the wake feed
class WakeTick(Answer):
    """One tick of the agent's wake feed: `id` is its entry id on `<prefix>:wakes` (the SSE
    `id:`, and a resume point); the rest is the tick as published (docs/streams.md)."""

    id: str = Field(description="The tick's entry id on the wakes stream: a resume point.")
    agent_id: str
    kind: str = Field(
        description="input | continue_current | review_triggered | pick_queued | recheck_due"
    )
    work_item_id: str | None
    candidates: list[dict[str, Any]] = Field(
        description="The WorkItems the scheduler ranks as next, best first."
    )
    tick_id: str


class WakePage(Answer):
    """A long poll's answer: the ticks after the cursor (oldest first; none when `wait_s`
    passed without one) and where the next poll resumes."""

    ticks: list[WakeTick]
    next_cursor: str
