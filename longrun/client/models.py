"""What longrun answers, as pydantic models. Each model named in `OPENAPI_NAMES` mirrors the
schema of that name in the server's /openapi.json (a test checks the fields and which are
required). Unknown fields are kept, not refused: a newer server may add fields."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---- the wake feed
class WakeTick(Model):
    """One tick of the agent's wake feed. `id` is its entry id on the wakes stream: the resume
    point (`Last-Event-ID`, `cursor`, or `wakes(after=...)`)."""

    id: str
    agent_id: str
    kind: str
    """input | continue_current | review_triggered | pick_queued | recheck_due"""
    work_item_id: str | None = None
    candidates: list[dict[str, Any]] = Field(default_factory=list)
    tick_id: str


class WakePage(Model):
    ticks: list[WakeTick]
    next_cursor: str


# ---- tools
class ToolWarning(Model):
    """`kind` says which: `unfinished_todos` carries the counts and a sample, `limit_clamped`
    what was asked and what was used."""

    kind: str
    message: str
    pending_count: int | None = None
    in_progress_count: int | None = None
    sample: list[str] | None = None
    requested: int | None = None
    applied: int | None = None


class ToolErrorBody(Model):
    kind: str
    message: str
    details: dict[str, Any] | None = None
    recovery_hint: str | None = None


class ToolEnvelope(Model):
    """A tool's answer: `result` on success (the tool's own shape), `warnings` always."""

    tool_name: str
    status: str
    result: dict[str, Any] | None = None
    warnings: list[ToolWarning] = Field(default_factory=list)
    error: ToolErrorBody | None = None


class ToolSchema(Model):
    """A tool the agent may call: its name, what it is for, the JSON Schema of its `args`."""

    name: str
    description: str
    input_schema: dict[str, Any]

    def openai_tool(self) -> dict[str, Any]:
        """The tool as an OpenAI-compatible chat-completions `tools` entry."""
        function = {"name": self.name, "description": self.description}
        return {"type": "function", "function": {**function, "parameters": self.input_schema}}


class ToolsAnswer(Model):
    tools: list[ToolSchema]


class WorkItemView(Model):
    """A WorkItem as GetWorkItem and ListWorkItems show it (the record plus its derived state);
    the fields most loops read are typed, the rest are kept as given."""

    id: str
    agent_id: str
    objective: str
    state: str
    plan_status: str | None = None
    blocked_by: str | None = None
    readiness: str | None = None
    scheduling_state: str | None = None
    is_current: bool = False
    result_summary: str | None = None
    todo_list: list[dict[str, Any]] | None = None
    active_waits: list[dict[str, Any]] = Field(default_factory=list)


class WorkItemPage(Model):
    """ListWorkItems' result."""

    filter: str | None = None
    state: str | None = None
    """`finished` for `work_items(state="finished")` (newest first)."""
    returned: int
    total_matching: int
    work_items: list[WorkItemView]
    next_cursor: str | None = None
    """Pass it as `cursor` for the next page; None at the end."""


class WorkItemAnswer(Model):
    """GetWorkItem's result."""

    current_work_item_id: str | None
    work_item: WorkItemView


# ---- agents
class AgentSummary(Model):
    agent_id: str
    loop: str
    posture: str
    current_work_item_id: str | None
    labels: dict[str, str] = Field(default_factory=dict)


class AgentList(Model):
    agents: list[AgentSummary]
    next_cursor: str | None = None


class AgentCreated(Model):
    """The first `PUT /v1/agents/{id}`: the agent token is shown this once."""

    agent_id: str
    loop: str
    agent_token: str
    callback_url: str | None = None
    spec: dict[str, Any] | None = None
    spec_version: int | None = None


class AgentExists(Model):
    """A later `PUT /v1/agents/{id}`: no token."""

    agent_id: str
    loop: str
    callback_url: str | None = None
    spec: dict[str, Any] | None = None
    spec_version: int | None = None


class AgentDetail(Model):
    """`GET /v1/agents/{id}` (and pause, resume, retire): the agent's state, spec and why it is
    not running."""

    agent_id: str
    loop: str | None = None
    posture: str | None = None
    current_work_item_id: str | None = None
    spec: dict[str, Any]
    spec_version: int
    why_not_running: dict[str, Any] | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    wake_budget: dict[str, Any] | None = None
    inbox_pending: int = 0
    turn_index: int = 0
    tools_unavailable: list[dict[str, Any]] = Field(default_factory=list)


class MessageAccepted(Model):
    message_id: str


class TaskResultAccepted(Model):
    task_id: str
    wait_id: str
    disposition: str


class CallbackAccepted(Model):
    delivery_id: str
    disposition: str
    wait_id: str | None = None


class BriefRecord(Model):
    id: str
    agent_id: str
    work_item_id: str | None = None
    kind: str
    text: str
    turn_id: str | None = None
    created_at: str
    in_reply_to: list[str] = Field(default_factory=list)


class BriefsAnswer(Model):
    briefs: list[BriefRecord]
    delivery_summaries: list[dict[str, Any]] = Field(default_factory=list)
    next_cursor: str | None = None


class HistoryPage(Model):
    events: list[dict[str, Any]]
    next_after: int | None = None
    next_cursor: str | None = None
    call_outcomes: dict[str, Any] = Field(default_factory=dict)


class VerifyResult(Model):
    ok: bool
    count: int
    head: str | None = None
    first_bad_index: int | None = None
    first_bad_seq: int | None = None
    archived: int = 0


OPENAPI_NAMES: dict[type[Model], str] = {
    WakeTick: "WakeTick",
    WakePage: "WakePage",
    ToolEnvelope: "ToolEnvelope",
    ToolErrorBody: "ToolErrorBody",
    ToolWarning: "ToolWarning",
    ToolSchema: "ToolSchema",
    ToolsAnswer: "ToolsAnswer",
    AgentSummary: "AgentSummary",
    AgentList: "AgentList",
    AgentCreated: "AgentCreatedAnswer",
    AgentExists: "AgentExistsAnswer",
    AgentDetail: "AgentDetail",
    MessageAccepted: "MessageAccepted",
    TaskResultAccepted: "TaskResultAccepted",
    CallbackAccepted: "CallbackAccepted",
    BriefRecord: "BriefRecord",
    BriefsAnswer: "BriefsAnswer",
    HistoryPage: "HistoryPage",
    VerifyResult: "VerifyResult",
}
"""The client model → the /openapi.json schema it mirrors (tests/unit/test_client_models.py)."""
