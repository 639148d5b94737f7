"""Tool inputs, results and the answer envelope of docs/contract.md §3, with their validation."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from shared.domain.acceptance import CHECK_ADAPTER, AcceptanceCheck, CheckKind
from shared.domain.base import NonEmptyStr, Record
from shared.domain.errors import DomainError, ErrorKind, ToolErrorBody, ToolWarning, WarningKind
from shared.domain.records import PlanStatus, TodoState, WakeKind
from shared.domain.views import ListFilter

LIST_LIMIT_DEFAULT = 20
LIST_LIMIT_MIN = 1
LIST_LIMIT_MAX = 100
DEFAULT_RECHECK_AFTER_MS = 3_600_000
"""Setting `blocked_by` without `recheck_after_ms` schedules a recheck one hour later."""


class ToolName(StrEnum):
    CREATE_WORK_ITEM = "CreateWorkItem"
    UPDATE_WORK_ITEM = "UpdateWorkItem"
    PICK_WORK_ITEM = "PickWorkItem"
    GET_WORK_ITEM = "GetWorkItem"
    LIST_WORK_ITEMS = "ListWorkItems"
    COMPLETE_WORK_ITEM = "CompleteWorkItem"
    CANCEL_WORK_ITEM = "CancelWorkItem"
    WAIT_FOR = "WaitFor"
    DELEGATE_WORK_ITEM = "DelegateWorkItem"
    CANCEL_DELEGATION = "CancelDelegation"
    SUBMIT_VERDICT = "SubmitVerdict"
    SPAWN_AGENT = "SpawnAgent"
    SEND_MESSAGE = "SendMessage"


TURN_ENDING_TOOLS = frozenset(
    {
        ToolName.WAIT_FOR,
        ToolName.COMPLETE_WORK_ITEM,
        ToolName.DELEGATE_WORK_ITEM,
        ToolName.SUBMIT_VERDICT,
    }
)
READ_ONLY_TOOLS = frozenset({ToolName.GET_WORK_ITEM, ToolName.LIST_WORK_ITEMS})


class ToolInput(BaseModel):
    """Base of every tool input: trims strings, rejects unknown fields, immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)


class TodoInput(ToolInput):
    text: NonEmptyStr
    state: TodoState = TodoState.PENDING


WorkItemRef = Annotated[str, Field(min_length=1, max_length=64)]
PositiveMs = Annotated[int, Field(ge=1, le=366 * 24 * 3_600_000)]
DeadlineSeconds = Annotated[int, Field(ge=1, le=366 * 24 * 3600)]
"""A deadline in seconds from now (at most a year)."""
MAX_CHECKS = 16


class AcceptanceCheckInput(ToolInput):
    """One acceptance check: `{kind: todos_done}`, `{kind: operator_approval}`,
    `{kind: webhook, url, timeout_s?}`, `{kind: reviewer_agent, agent_id}` (another existing
    agent) or `{kind: command, run, timeout_s?, expect?: exit0 | sentinel}` (a shell command
    run in a sandbox over your home; it passes with exit 0, and for `sentinel` a stdout line
    `__LONGRUN_CHECK_OK__`); operator_approval and reviewer_agent take `deadline_s?` (from each
    attempt's start). Who set it follows from who calls."""

    kind: CheckKind
    url: str | None = None
    timeout_s: float | None = None
    agent_id: str | None = None
    deadline_s: int | None = None
    run: str | None = None
    expect: Literal["exit0", "sentinel"] | None = None

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> AcceptanceCheckInput:
        self.to_check()
        return self

    def to_check(self) -> AcceptanceCheck:
        """The check as the WorkItem stores it (set_by the agent until the ledger says)."""
        fields = self.model_dump(exclude_none=True)
        try:
            return CHECK_ADAPTER.validate_python(fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'][1:]) or 'check'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ValueError(f"{self.kind} check: {problems}") from None


Checks = Annotated[tuple[AcceptanceCheckInput, ...], Field(max_length=MAX_CHECKS)]


def reviewer_ids(checks: tuple[AcceptanceCheckInput, ...] | None) -> frozenset[str]:
    """The agents the `reviewer_agent` checks of a list name."""
    return frozenset(
        c.agent_id for c in checks or () if c.kind is CheckKind.REVIEWER_AGENT and c.agent_id
    )


class CreateWorkItemInput(ToolInput):
    """Create a new open WorkItem for a genuinely separate objective. Never changes focus."""

    objective: NonEmptyStr
    plan_status: PlanStatus = PlanStatus.DRAFT
    plan: str | None = None
    todo_list: tuple[TodoInput, ...] = ()
    acceptance: Checks = ()
    """Checks that must pass before CompleteWorkItem makes the item done."""


class UpdateWorkItemInput(ToolInput):
    """Change an open WorkItem; `todo_list` replaces the whole list, `blocked_by: null` clears."""

    work_item_id: WorkItemRef
    objective: NonEmptyStr | None = None
    plan_status: PlanStatus | None = None
    todo_list: tuple[TodoInput, ...] | None = None
    blocked_by: NonEmptyStr | None = None
    recheck_after_ms: PositiveMs | None = None
    acceptance: Checks | None = None
    """The whole check list; the operator's checks must stay in it unchanged."""

    @model_serializer(mode="wrap")
    def _keep_absent_blocker_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`blocked_by: null` clears a blocker while an absent field leaves it alone, so the
        difference must survive serialization (every command crosses a stream)."""
        data: dict[str, Any] = handler(self)
        if "blocked_by" not in self.model_fields_set:
            data.pop("blocked_by", None)
        return data

    @property
    def clears_blocker(self) -> bool:
        return "blocked_by" in self.model_fields_set and self.blocked_by is None

    @property
    def sets_blocker(self) -> bool:
        return self.blocked_by is not None

    @model_validator(mode="after")
    def _recheck_needs_blocker(self) -> UpdateWorkItemInput:
        if self.recheck_after_ms is not None and self.blocked_by is None:
            raise ValueError("recheck_after_ms is only meaningful together with blocked_by")
        return self


class PickWorkItemInput(ToolInput):
    """Focus an open WorkItem; a blocked one is focused for inspection only."""

    work_item_id: WorkItemRef
    reason: NonEmptyStr | None = None
    clear_blocker: bool = False

    @field_validator("reason", mode="before")
    @classmethod
    def _blank_reason_is_no_reason(cls, value: object) -> object:
        """A reason is optional, so whitespace-only means "no reason" (the switch then warns)
        rather than a malformed call."""
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @model_validator(mode="after")
    def _clearing_needs_reason(self) -> PickWorkItemInput:
        if self.clear_blocker and self.reason is None:
            raise ValueError("clear_blocker: true needs a non-empty reason")
        return self


class GetWorkItemInput(ToolInput):
    """Read one WorkItem with its plan preview (the plan body is the file at plan_artifact.path)."""

    work_item_id: WorkItemRef
    include_todo_list: bool = False
    include_process_notes: bool = False
    """Also return `process_notes`: what earlier turns on this item were compacted into."""


class ListWorkItemsInput(ToolInput):
    """List WorkItems in ranking order; `limit` is clamped to 1..100."""

    filter: ListFilter = ListFilter.ALL
    limit: int = LIST_LIMIT_DEFAULT
    include_todo_list: bool = False

    def clamped(self) -> tuple[ListWorkItemsInput, list[ToolWarning]]:
        applied = min(max(self.limit, LIST_LIMIT_MIN), LIST_LIMIT_MAX)
        if applied == self.limit:
            return self, []
        warning = ToolWarning(
            kind=WarningKind.LIMIT_CLAMPED,
            message=f"limit {self.limit} is outside {LIST_LIMIT_MIN}..{LIST_LIMIT_MAX}; "
            f"used {applied}.",
            requested=self.limit,
            applied=applied,
        )
        return self.model_copy(update={"limit": applied}), [warning]


class CompleteWorkItemInput(ToolInput):
    """Complete an open WorkItem; write the operator-facing report as text in the same round."""

    work_item_id: WorkItemRef


class CancelWorkItemInput(ToolInput):
    """Drop an open WorkItem on purpose: it completes with outcome cancelled and no result."""

    work_item_id: WorkItemRef
    reason: NonEmptyStr


class WaitForInput(ToolInput):
    """Wait on operator input, a task result, an external callback, a timer or the system."""

    reason: NonEmptyStr
    wake: WakeKind
    work_item_id: WorkItemRef | None = None
    resource: NonEmptyStr | None = None
    recheck_after_ms: PositiveMs | None = None
    wake_after_ms: PositiveMs | None = None
    deadline_s: DeadlineSeconds | None = None
    """Past this many seconds the wait expires: its item is blocked with `deadline passed:
    <reason>` and the agent gets one message saying so."""

    @model_validator(mode="after")
    def _wake_needs(self) -> WaitForInput:
        if self.wake is WakeKind.TASK_RESULT and self.resource is None:
            raise ValueError("wake task_result needs resource (the task id)")
        if self.wake is WakeKind.TIMER and self.wake_after_ms is None:
            raise ValueError("wake timer needs wake_after_ms >= 1")
        if self.wake is not WakeKind.TIMER and self.wake_after_ms is not None:
            raise ValueError("wake_after_ms applies to wake timer only")
        return self


class DelegateWorkItemInput(ToolInput):
    """Hand work to another agent; the current WorkItem waits for its result. Ends the turn."""

    to_agent: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    objective: NonEmptyStr
    reason: NonEmptyStr
    plan: str | None = None
    todo_list: tuple[TodoInput, ...] = ()
    acceptance: Checks = ()
    """Checks the delegated WorkItem must pass before its report comes back; its agent cannot
    remove them."""
    deadline_s: DeadlineSeconds | None = None
    """Past this many seconds the delegation fails (`deadline passed`), the child's WorkItem is
    cancelled and the result reaches this agent once."""


class CancelDelegationInput(ToolInput):
    """Cancel a running delegation of this agent (its WorkItem and what it delegated in turn)."""

    delegation_id: Annotated[str, Field(min_length=1, max_length=64)]
    reason: NonEmptyStr


class SpawnKind(StrEnum):
    PRIVATE_CHILD = "private_child"
    PUBLIC_NAMED = "public_named"


class WorkspaceMode(StrEnum):
    ISOLATED = "isolated"
    SHARED = "shared"


SPAWN_MESSAGE_MAX_CHARS = 32_000
SpawnedAgentId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]


class SpawnAgentInput(ToolInput):
    """Create an agent: a private_child (its first WorkItem reports back) or a public_named one."""

    kind: SpawnKind = Field(
        description="private_child: a helper whose first WorkItem's report comes back to you "
        "(WaitFor task_result on the returned delegation id to wait; you are not blocked). "
        "public_named: a standing agent with the agent_id you give."
    )
    initial_message: (
        Annotated[str, Field(min_length=1, max_length=SPAWN_MESSAGE_MAX_CHARS)] | None
    ) = Field(default=None, description="What the child is for; required for private_child.")
    agent_id: SpawnedAgentId | None = None
    preset: SpawnedAgentId | None = Field(
        default=None, description="A preset the operator stored: the child's spec."
    )
    template: SpawnedAgentId | None = Field(
        default=None,
        description="An agent whose spec the child copies (with neither: yours less labels).",
    )
    workspace_mode: WorkspaceMode = Field(
        default=WorkspaceMode.ISOLATED,
        description="shared: the child's file tools work in your home; isolated: its own.",
    )
    keep: bool = False
    """A private child stays when the WorkItem it serves ends (default: it ends with it)."""

    @model_validator(mode="after")
    def _kind_needs(self) -> SpawnAgentInput:
        if self.kind is SpawnKind.PRIVATE_CHILD and self.initial_message is None:
            raise ValueError("kind private_child needs initial_message (what the child is for)")
        if self.kind is SpawnKind.PUBLIC_NAMED and self.agent_id is None:
            raise ValueError("kind public_named needs agent_id")
        if self.preset is not None and self.template is not None:
            raise ValueError("give preset or template, not both")
        return self


class SendMessageInput(ToolInput):
    """Message your parent, a child you spawned or a peer your spec lists; it wakes them."""

    to_agent: SpawnedAgentId
    text: Annotated[str, Field(min_length=1, max_length=SPAWN_MESSAGE_MAX_CHARS)]
    reply_to: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None, description="The id of the message this one answers."
    )


class SubmitVerdictInput(ToolInput):
    """On a review item only: pass or fail the reviewed report; completes the review item."""

    work_item_id: WorkItemRef
    passed: bool
    reason: NonEmptyStr


TOOL_INPUTS: dict[ToolName, type[ToolInput]] = {
    ToolName.CREATE_WORK_ITEM: CreateWorkItemInput,
    ToolName.UPDATE_WORK_ITEM: UpdateWorkItemInput,
    ToolName.PICK_WORK_ITEM: PickWorkItemInput,
    ToolName.GET_WORK_ITEM: GetWorkItemInput,
    ToolName.LIST_WORK_ITEMS: ListWorkItemsInput,
    ToolName.COMPLETE_WORK_ITEM: CompleteWorkItemInput,
    ToolName.CANCEL_WORK_ITEM: CancelWorkItemInput,
    ToolName.WAIT_FOR: WaitForInput,
    ToolName.DELEGATE_WORK_ITEM: DelegateWorkItemInput,
    ToolName.CANCEL_DELEGATION: CancelDelegationInput,
    ToolName.SUBMIT_VERDICT: SubmitVerdictInput,
    ToolName.SPAWN_AGENT: SpawnAgentInput,
    ToolName.SEND_MESSAGE: SendMessageInput,
}

_FIELD_HINTS: dict[str, str] = {
    "include_plan": "GetWorkItem has no include_plan: the plan body is a file; read "
    "plan_artifact.path with ReadFile (the view carries a preview).",
}


def _validation_error(tool: str, exc: ValidationError) -> DomainError:
    problems = [
        {"field": ".".join(str(p) for p in err["loc"]) or "(input)", "problem": err["msg"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
    unknown = [p["field"].rsplit(".", 1)[-1] for p in problems if "Extra inputs" in p["problem"]]
    hint = next((_FIELD_HINTS[name] for name in unknown if name in _FIELD_HINTS), None)
    fields = ", ".join(p["field"] for p in problems)
    return DomainError(
        ErrorKind.INVALID_TOOL_INPUT,
        f"{tool}: invalid input ({fields})",
        details={"errors": problems},
        recovery_hint=hint,
    )


def tool_name_of(name: str) -> ToolName:
    try:
        return ToolName(name)
    except ValueError:
        raise DomainError(
            ErrorKind.UNKNOWN_TOOL,
            f"unknown tool {name!r}",
            details={"known_tools": [t.value for t in ToolName]},
        ) from None


def parse_tool_input(name: str, raw: object) -> tuple[ToolInput, list[ToolWarning]]:
    """Validate raw arguments for a tool; raises DomainError(invalid_tool_input | unknown_tool)."""
    tool = tool_name_of(name)
    if not isinstance(raw, dict):
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"{tool}: arguments must be a JSON object, got {type(raw).__name__}",
        )
    try:
        parsed = TOOL_INPUTS[tool].model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(tool, exc) from None
    if isinstance(parsed, ListWorkItemsInput):
        return parsed.clamped()
    return parsed, []


def tool_schema(name: ToolName) -> dict[str, Any]:
    """JSON schema of a tool's input, generated from its model (used in the system prompt)."""
    return TOOL_INPUTS[name].model_json_schema()


class ToolEnvelope(Record):
    """Every tool answers with this envelope."""

    tool_name: str
    status: Literal["success", "error"]
    result: dict[str, Any] | None = None
    warnings: tuple[ToolWarning, ...] = ()
    error: ToolErrorBody | None = None

    @classmethod
    def success(
        cls,
        tool: str,
        result: dict[str, Any],
        warnings: list[ToolWarning] | tuple[ToolWarning, ...] = (),
    ) -> ToolEnvelope:
        return cls(tool_name=tool, status="success", result=result, warnings=tuple(warnings))

    @classmethod
    def failure(cls, tool: str, error: DomainError) -> ToolEnvelope:
        return cls(tool_name=tool, status="error", error=error.body())
