"""Hypothesis strategies for valid records and for every message on the wire.

Every strategy builds its values explicitly, so what it draws always satisfies the models'
constraints (id alphabets, aware UTC instants, trimmed non-empty strings, sha256 hex, the tool
inputs' cross-field rules) and is realistic enough for the rules that read it.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
from hypothesis import strategies as st
from pydantic import BaseModel

from shared.domain.acceptance import (
    CheckKind,
    CheckVerdict,
    CommandCheck,
    OperatorApprovalCheck,
    SetBy,
    TodosDoneCheck,
    Verification,
    VerificationStatus,
    WebhookCheck,
)
from shared.domain.delegation import (
    DelegatedFrom,
    DelegationRecord,
    DelegationStatus,
    ReviewOf,
    SpawnedBy,
)
from shared.domain.errors import ErrorKind, ToolErrorBody, ToolWarning, WarningKind
from shared.domain.history import GENESIS_HASH, HistoryEvent, seal_encoded
from shared.domain.missing_secrets import MissingSecret
from shared.domain.model_failures import ModelOutage
from shared.domain.records import (
    PLAN_PREVIEW_CHARS,
    AgentLoop,
    AgentState,
    BriefKind,
    BriefRecord,
    DeliverySummaryRecord,
    InboxMessage,
    MessageOrigin,
    NoteCovers,
    PlanArtifact,
    PlanStatus,
    Posture,
    ProcessNote,
    ReadinessCounts,
    TodoItem,
    TodoState,
    WaitingIntent,
    WaitStatus,
    WakeBudget,
    WakeKind,
    WorkItem,
    WorkItemOutcome,
    WorkItemState,
)
from shared.domain.specs import SPEC_FIELDS, AgentSpec, Limits
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
    SpawnKind,
    SubmitVerdictInput,
    UpdateWorkItemInput,
    WaitForInput,
    WorkspaceMode,
)
from shared.domain.usage import BudgetExhausted, ModelUsage, TurnUsage
from shared.domain.views import CandidateClass, ListFilter
from shared.domain.wake import TickKind
from shared.wire import commands as c
from shared.wire import events as e
from shared.wire.codec import Envelope
from shared.wire.message import Message
from shared.wire.replies import CommandOutcome, CommandReply
from shared.wire.ticks import Candidate, Tick, TimerFired

M = TypeVar("M", bound=BaseModel)

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
AGENT_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
AGENT_REST = AGENT_FIRST + "._-"
MAX_MS = 366 * 24 * 3_600_000

# ---------------------------------------------------------------- scalars

# Surrogates cannot be encoded as UTF-8, so no JSON message can carry them.
_chars = st.characters(exclude_categories=["Cs"])
any_text = st.text(_chars, max_size=40)
"""Any string, including non-ASCII, control characters and surrounding whitespace."""

trimmed_text = st.text(_chars, min_size=1, max_size=40).map(str.strip).filter(bool)
"""A non-empty string with no surrounding whitespace: what a NonEmptyStr field keeps."""

optional_text = st.none() | any_text


def _crockford26(number: int) -> str:
    digits = []
    for _ in range(26):
        number, digit = divmod(number, 32)
        digits.append(CROCKFORD[digit])
    return "".join(reversed(digits))


# One integer draw per id, rather than 26 character draws, keeps generation fast.
ulid_body = st.integers(min_value=0, max_value=32**26 - 1).map(_crockford26)
work_item_ids = ulid_body.map(lambda s: "wi_" + s)
wait_ids = ulid_body.map(lambda s: "wait_" + s)
agent_ids = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(AGENT_FIRST),
    st.text(AGENT_REST, max_size=30),
)
sha256_hex = st.binary(max_size=32).map(lambda b: hashlib.sha256(b).hexdigest())
utc_datetimes = st.datetimes(
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001 - bounds are naive by hypothesis's API
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
command_ids = st.text(_chars, min_size=1, max_size=60)
positive_ms = st.integers(min_value=1, max_value=MAX_MS)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | any_text
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
"""Any JSON value orjson can encode and decode back unchanged."""

json_objects = st.dictionaries(any_text, json_values, max_size=4)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def model(cls: type[M], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[M]:
    """Like st.builds, but never infers a field: every value comes from the given strategies."""
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


# ---------------------------------------------------------------- records

todo_items = model(TodoItem, text=trimmed_text, state=st.sampled_from(TodoState))
delegation_ids = ulid_body.map(lambda s: "dlg_" + s)
message_ids = ulid_body.map(lambda s: "msg_" + s)
review_ofs = model(
    ReviewOf,
    work_item_id=work_item_ids,
    attempt=st.integers(1, 50),
    check_index=st.integers(0, 15),
)
delegated_froms = model(
    DelegatedFrom,
    delegation_id=delegation_ids,
    agent_id=agent_ids,
    work_item_id=_optional(work_item_ids),
    reason=trimmed_text,
    chain=st.lists(agent_ids, min_size=1, max_size=4).map(tuple),
    review_of=_optional(review_ofs),
)

spawned_bys = model(
    SpawnedBy,
    delegation_id=delegation_ids,
    parent_agent_id=agent_ids,
    parent_work_item_id=_optional(work_item_ids),
    chain=st.lists(agent_ids, min_size=1, max_size=4).map(tuple),
    label=trimmed_text,
    bound_work_item_id=_optional(work_item_ids),
)


@st.composite
def delegation_records(draw: st.DrawFn) -> DelegationRecord:
    status = draw(st.sampled_from(DelegationStatus))
    return DelegationRecord(
        id=draw(delegation_ids),
        parent_agent_id=draw(agent_ids),
        parent_work_item_id=draw(_optional(work_item_ids)),
        child_agent_id=draw(agent_ids),
        child_work_item_id=draw(_optional(work_item_ids)),
        status=status,
        report=draw(_optional(trimmed_text)),
        objective=draw(trimmed_text),
        reason=draw(trimmed_text),
        depth=draw(st.integers(1, 10)),
        review=draw(st.booleans()),
        spawned=draw(st.booleans()),
        keep=draw(st.booleans()),
        created_at=draw(utc_datetimes),
        finished_at=None if status is DelegationStatus.RUNNING else draw(utc_datetimes),
    )


@st.composite
def plan_artifacts(
    draw: st.DrawFn, agent_id: str | None = None, work_item_id: str | None = None
) -> PlanArtifact:
    agent = agent_id if agent_id is not None else draw(agent_ids)
    item = work_item_id if work_item_id is not None else draw(work_item_ids)
    # A short chunk repeated: long enough to cross the preview limit without drawing 1600 chars.
    body = draw(st.text(_chars, max_size=40)) * draw(st.integers(min_value=1, max_value=60))
    preview = body[:PLAN_PREVIEW_CHARS]
    relative = f"work-items/{item}/plan.md"
    return PlanArtifact(
        path=f"/srv/longrun/home/{agent}/{relative}",
        relative_path=relative,
        sha256=hashlib.sha256(body.encode()).hexdigest(),
        bytes=len(body.encode()),
        updated_at=draw(utc_datetimes),
        preview=preview,
        preview_complete=preview == body,
    )


def _ordered_instants(draw: st.DrawFn) -> tuple[datetime, datetime]:
    first, second = sorted((draw(utc_datetimes), draw(utc_datetimes)))
    return first, second


acceptance_checks = st.one_of(
    st.builds(TodosDoneCheck, set_by=st.sampled_from(SetBy)),
    st.builds(OperatorApprovalCheck, set_by=st.sampled_from(SetBy)),
    st.builds(
        WebhookCheck,
        url=st.sampled_from(["http://127.0.0.1:9/check", "https://checks.example/v1"]),
        timeout_s=st.floats(min_value=0.5, max_value=120),
        set_by=st.sampled_from(SetBy),
    ),
    st.builds(
        CommandCheck,
        run=st.sampled_from(["python -m pytest -q", "make check && echo __LONGRUN_CHECK_OK__"]),
        timeout_s=st.floats(min_value=1, max_value=3600),
        expect=st.sampled_from(["exit0", "sentinel"]),
        set_by=st.sampled_from(SetBy),
    ),
)


@st.composite
def verifications(draw: st.DrawFn, checks: tuple[Any, ...]) -> Verification:
    verdicts = tuple(
        CheckVerdict(
            kind=CheckKind(check.kind),
            passed=draw(st.none() | st.booleans()),
            reason=draw(_optional(trimmed_text)),
        )
        for check in checks
    )
    return Verification(
        status=draw(st.sampled_from(VerificationStatus)),
        attempt=draw(st.integers(min_value=1, max_value=50)),
        checks=verdicts,
        report_candidate=draw(_optional(trimmed_text)),
        started_at=draw(utc_datetimes),
    )


process_notes = st.builds(
    ProcessNote,
    id=ulid_body.map(lambda s: "note_" + s),
    work_item_id=work_item_ids,
    text=trimmed_text,
    covers=st.builds(NoteCovers, from_turn=trimmed_text, to_turn=trimmed_text),
    created_at=utc_datetimes,
)


@st.composite
def work_items(
    draw: st.DrawFn,
    agent_id: str | None = None,
    state: WorkItemState | None = None,
) -> WorkItem:
    """A WorkItem with todos and a plan artifact; completed items carry no blocker."""
    agent = agent_id if agent_id is not None else draw(agent_ids)
    item_id = draw(work_item_ids)
    item_state = state if state is not None else draw(st.sampled_from(WorkItemState))
    created_at, updated_at = _ordered_instants(draw)
    is_open = item_state is WorkItemState.OPEN
    blocked_by = draw(_optional(trimmed_text)) if is_open else None
    checks = tuple(draw(st.lists(acceptance_checks, max_size=3)))
    return WorkItem(
        id=item_id,
        agent_id=agent,
        revision=draw(st.integers(min_value=1, max_value=10_000)),
        objective=draw(trimmed_text),
        state=item_state,
        plan_status=draw(st.sampled_from(PlanStatus)),
        plan_artifact=draw(plan_artifacts(agent_id=agent, work_item_id=item_id)),
        todo_list=tuple(draw(st.lists(todo_items, max_size=6))),
        blocked_by=blocked_by,
        recheck_at=draw(_optional(utc_datetimes)) if blocked_by else None,
        recheck_consumed_at=draw(_optional(utc_datetimes)) if blocked_by else None,
        result_summary=None if is_open else draw(_optional(trimmed_text)),
        outcome=None if is_open else draw(st.sampled_from(WorkItemOutcome)),
        acceptance=checks,
        verification=draw(st.none() | verifications(checks)) if checks else None,
        delegated_from=draw(_optional(delegated_froms)),
        process_notes=tuple(draw(st.lists(process_notes, max_size=2))),
        created_at=created_at,
        updated_at=updated_at,
    )


@st.composite
def waiting_intents(draw: st.DrawFn, agent_id: str | None = None) -> WaitingIntent:
    """A wait whose kind-specific fields match its kind and whose counts are consistent."""
    wake = draw(st.sampled_from(WakeKind))
    created_at, later = _ordered_instants(draw)
    trigger_count = draw(st.integers(min_value=0, max_value=50))
    status = draw(st.sampled_from(WaitStatus))
    wait_id = draw(wait_ids)
    resource = draw(trimmed_text) if wake is WakeKind.TASK_RESULT else draw(_optional(any_text))
    return WaitingIntent(
        id=wait_id,
        agent_id=agent_id if agent_id is not None else draw(agent_ids),
        work_item_id=draw(_optional(work_item_ids)),
        wake=wake,
        reason=draw(trimmed_text),
        resource=resource,
        status=status,
        trigger_count=trigger_count,
        last_triggered_at=later if trigger_count else None,
        reviewed_trigger_count=draw(st.integers(min_value=0, max_value=trigger_count)),
        wake_at=later if wake is WakeKind.TIMER else None,
        callback_url=(
            f"http://127.0.0.1:8080/v1/callbacks/{draw(sha256_hex)}"
            if wake is WakeKind.EXTERNAL
            else None
        ),
        created_at=created_at,
        cancelled_at=later if status is WaitStatus.CANCELLED else None,
    )


@st.composite
def wake_budgets(draw: st.DrawFn) -> WakeBudget:
    limit = draw(st.integers(min_value=1, max_value=100))
    return WakeBudget(used=draw(st.integers(min_value=0, max_value=limit)), limit=limit)


small_counts = st.integers(min_value=0, max_value=1000)
readiness_counts = model(
    ReadinessCounts,
    runnable=small_counts,
    waiting_for_operator=small_counts,
    blocked=small_counts,
    completed=small_counts,
)
agent_states = model(
    AgentState,
    agent_id=agent_ids,
    loop=st.sampled_from(AgentLoop),
    current_work_item_id=_optional(work_item_ids),
    posture=st.sampled_from(Posture),
    wake_budget=wake_budgets(),
    inbox_pending=small_counts,
    turn_index=small_counts,
    counts=readiness_counts,
)
brief_records = model(
    BriefRecord,
    id=trimmed_text,
    agent_id=agent_ids,
    work_item_id=_optional(work_item_ids),
    kind=st.sampled_from(BriefKind),
    text=trimmed_text,
    turn_id=_optional(trimmed_text),
    created_at=utc_datetimes,
)
delivery_summary_records = model(
    DeliverySummaryRecord,
    id=trimmed_text,
    agent_id=agent_ids,
    work_item_id=_optional(work_item_ids),
    text=trimmed_text,
    turn_id=_optional(trimmed_text),
    created_at=utc_datetimes,
    warnings=st.lists(st.sampled_from([w.value for w in WarningKind]), max_size=2).map(tuple),
)
inbox_messages = model(
    InboxMessage,
    id=trimmed_text,
    agent_id=agent_ids,
    origin=st.sampled_from(MessageOrigin),
    text=any_text,
    work_item_id=_optional(work_item_ids),
    content_type=_optional(st.sampled_from(["application/json", "text/plain"])),
    token_id=_optional(trimmed_text),
    delivery_id=_optional(trimmed_text),
    created_at=utc_datetimes,
)

# ---------------------------------------------------------------- tool inputs

todo_inputs = st.fixed_dictionaries({"text": trimmed_text, "state": st.sampled_from(TodoState)})


@st.composite
def create_inputs(draw: st.DrawFn) -> CreateWorkItemInput:
    raw: dict[str, Any] = {"objective": draw(trimmed_text)}
    if draw(st.booleans()):
        raw["plan_status"] = draw(st.sampled_from(PlanStatus))
    if draw(st.booleans()):
        raw["plan"] = draw(any_text)
    if draw(st.booleans()):
        raw["todo_list"] = draw(st.lists(todo_inputs, max_size=4))
    return CreateWorkItemInput.model_validate(raw)


@st.composite
def update_inputs(draw: st.DrawFn) -> UpdateWorkItemInput:
    """Covers all three blocker intents: untouched (key absent), cleared (null), set."""
    raw: dict[str, Any] = {"work_item_id": draw(work_item_ids)}
    if draw(st.booleans()):
        raw["objective"] = draw(trimmed_text)
    if draw(st.booleans()):
        raw["plan_status"] = draw(st.sampled_from(PlanStatus))
    if draw(st.booleans()):
        raw["todo_list"] = draw(st.lists(todo_inputs, max_size=4))
    blocker = draw(st.sampled_from(["absent", "clear", "set"]))
    if blocker == "clear":
        raw["blocked_by"] = None
    elif blocker == "set":
        raw["blocked_by"] = draw(trimmed_text)
        if draw(st.booleans()):
            raw["recheck_after_ms"] = draw(positive_ms)
    return UpdateWorkItemInput.model_validate(raw)


@st.composite
def pick_inputs(draw: st.DrawFn) -> PickWorkItemInput:
    clear = draw(st.booleans())
    raw: dict[str, Any] = {"work_item_id": draw(work_item_ids), "clear_blocker": clear}
    if clear or draw(st.booleans()):
        raw["reason"] = draw(trimmed_text)
    return PickWorkItemInput.model_validate(raw)


get_inputs = model(GetWorkItemInput, work_item_id=work_item_ids, include_todo_list=st.booleans())
list_inputs = model(
    ListWorkItemsInput,
    filter=st.sampled_from(ListFilter),
    limit=st.integers(min_value=1, max_value=100),
    include_todo_list=st.booleans(),
)
complete_inputs = model(CompleteWorkItemInput, work_item_id=work_item_ids)
delegate_inputs = model(
    DelegateWorkItemInput,
    to_agent=agent_ids,
    objective=trimmed_text,
    reason=trimmed_text,
    plan=optional_text,
    todo_list=st.lists(todo_inputs, max_size=3).map(tuple),
)
cancel_delegation_inputs = model(
    CancelDelegationInput, delegation_id=delegation_ids, reason=trimmed_text
)
cancel_inputs = model(CancelWorkItemInput, work_item_id=work_item_ids, reason=trimmed_text)


@st.composite
def spawn_inputs(draw: st.DrawFn) -> SpawnAgentInput:
    kind = draw(st.sampled_from(SpawnKind))
    raw: dict[str, Any] = {"kind": kind, "workspace_mode": draw(st.sampled_from(WorkspaceMode))}
    if kind is SpawnKind.PRIVATE_CHILD or draw(st.booleans()):
        raw["initial_message"] = draw(trimmed_text)
    if kind is SpawnKind.PUBLIC_NAMED or draw(st.booleans()):
        raw["agent_id"] = draw(agent_ids)
    source = draw(st.sampled_from(["preset", "template", "none"]))
    if source != "none":
        raw[source] = draw(agent_ids)
    raw["keep"] = draw(st.booleans())
    return SpawnAgentInput.model_validate(raw)


@st.composite
def wait_for_inputs(draw: st.DrawFn) -> WaitForInput:
    wake = draw(st.sampled_from(WakeKind))
    raw: dict[str, Any] = {"reason": draw(trimmed_text), "wake": wake}
    if draw(st.booleans()):
        raw["work_item_id"] = draw(work_item_ids)
    if wake is WakeKind.TASK_RESULT or draw(st.booleans()):
        raw["resource"] = draw(trimmed_text)
    if wake is WakeKind.TIMER:
        raw["wake_after_ms"] = draw(positive_ms)
    if draw(st.booleans()):
        raw["recheck_after_ms"] = draw(positive_ms)
    return WaitForInput.model_validate(raw)


# ---------------------------------------------------------------- commands

_command_fields: dict[str, st.SearchStrategy[Any]] = {
    "command_id": command_ids,
    "agent_id": agent_ids,
    "reply_to": _optional(st.builds(lambda p: f"lr:replies:{p}", trimmed_text)),
}
_tool_fields: dict[str, st.SearchStrategy[Any]] = {
    **_command_fields,
    "fencing_token": _optional(st.integers(min_value=1, max_value=2**53)),
    "turn_id": _optional(trimmed_text),
}
fencing_tokens = st.integers(min_value=1, max_value=2**53)
_counts = st.integers(min_value=0, max_value=10**9)
_model_usages = model(
    ModelUsage,
    model_calls=_counts,
    input_tokens=_counts,
    cached_input_tokens=_counts,
    output_tokens=_counts,
)
turn_usages = model(
    TurnUsage,
    model_calls=_counts,
    input_tokens=_counts,
    cached_input_tokens=_counts,
    output_tokens=_counts,
    by_model=st.dictionaries(
        st.sampled_from(["openai/gpt-4o-mini", "anthropic/claude", "scripted/scripted"]),
        _model_usages,
        max_size=2,
    ),
)
model_outages = model(
    ModelOutage,
    provider=st.sampled_from(["openai", "anthropic"]),
    status=_optional(st.integers(min_value=400, max_value=599)),
    retry_at=utc_datetimes,
    outages=st.integers(min_value=1, max_value=100),
)
missing_secrets = model(
    MissingSecret,
    name=st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True),
    spec_version=st.integers(min_value=0, max_value=1000),
    retry_at=utc_datetimes,
    attempts=st.integers(min_value=1, max_value=100),
)
budgets_exhausted = model(
    BudgetExhausted,
    used=_counts,
    limit=st.integers(min_value=1, max_value=10**9),
    resets_at=utc_datetimes,
)


def _command(cls: type[c.Command], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return model(cls, **_command_fields, **fields)


def _tool(cls: type[c.ToolCommand], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return model(cls, **_tool_fields, **fields)


transcript_entries = model(
    c.TranscriptEntry,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=any_text,
    round=st.integers(min_value=0, max_value=50),
    tool_name=_optional(st.sampled_from(["CreateWorkItem", "WaitFor", "ReadFile"])),
    tool_call_id=_optional(trimmed_text),
)


@st.composite
def _create_work_item(draw: st.DrawFn) -> c.CreateWorkItem:
    """The sender mints the id and seeds the plan file, so the artifact names that id."""
    fields = draw(st.fixed_dictionaries(_tool_fields))
    item_id = draw(work_item_ids)
    return c.CreateWorkItem(
        **fields,
        args=draw(create_inputs()),
        work_item_id=item_id,
        plan_artifact=draw(plan_artifacts(agent_id=fields["agent_id"], work_item_id=item_id)),
    )


def agent_specs() -> st.SearchStrategy[AgentSpec]:
    """Small valid specs: the wire round trip, not the validation, is under test here."""
    return st.builds(
        AgentSpec,
        instructions=st.sampled_from(["", "Review pull requests.", "Answer in French."]),
        labels=st.dictionaries(st.sampled_from(["team", "tier"]), st.sampled_from(["a", "b"])),
        limits=st.builds(Limits, max_rounds_per_turn=st.integers(min_value=1, max_value=200)),
    )


COMMAND_STRATEGIES: dict[type[c.Command], st.SearchStrategy[Any]] = {
    c.CreateWorkItem: _create_work_item(),
    c.UpdateWorkItem: _tool(c.UpdateWorkItem, args=update_inputs()),
    c.PickWorkItem: _tool(c.PickWorkItem, args=pick_inputs()),
    c.GetWorkItem: _tool(c.GetWorkItem, args=get_inputs),
    c.ListWorkItems: _tool(c.ListWorkItems, args=list_inputs),
    c.CompleteWorkItem: _tool(c.CompleteWorkItem, args=complete_inputs, report_text=optional_text),
    c.CancelWorkItem: _tool(c.CancelWorkItem, args=cancel_inputs, by_operator=st.booleans()),
    c.RecordVerdict: _command(
        c.RecordVerdict,
        work_item_id=work_item_ids,
        attempt=_optional(st.integers(min_value=1, max_value=50)),
        check_index=_optional(st.integers(min_value=0, max_value=15)),
        source=st.sampled_from(["operator", "webhook", "reviewer"]),
        passed=st.booleans(),
        reason=any_text.map(lambda t: t[:4000]),
    ),
    c.PutDownWorkItem: _command(c.PutDownWorkItem, work_item_id=work_item_ids, reason=trimmed_text),
    c.WaitFor: _tool(
        c.WaitFor, args=wait_for_inputs(), capability_token_hash=_optional(sha256_hex)
    ),
    c.EnsureAgent: _command(
        c.EnsureAgent,
        loop=st.none() | st.sampled_from(AgentLoop),
        spec=st.none() | agent_specs(),
        agent_token_hash=sha256_hex,
        callback_token_hash=sha256_hex,
    ),
    c.AppendOperatorMessage: _command(
        c.AppendOperatorMessage,
        message_id=trimmed_text,
        text=trimmed_text,
        work_item_id=_optional(work_item_ids),
    ),
    c.RecordCallback: _command(
        c.RecordCallback,
        token_hash=sha256_hex,
        delivery_id=trimmed_text,
        content_type=st.sampled_from(["application/json", "text/plain", ""]),
        body=any_text,
        body_encoding=st.sampled_from(["utf-8", "base64"]),
        source=st.sampled_from(c.CallbackSource),
    ),
    c.RecordTaskResult: _command(
        c.RecordTaskResult,
        task_id=trimmed_text,
        status=st.sampled_from(c.TaskStatus),
        summary=any_text,
    ),
    c.FireTimer: _command(c.FireTimer, wait_id=wait_ids, due_at=utc_datetimes),
    c.ExpireDeadline: _command(
        c.ExpireDeadline,
        target=st.sampled_from(["wait", "delegation"]),
        target_id=trimmed_text,
        due_at=utc_datetimes,
    ),
    c.ConsumeRecheck: _command(
        c.ConsumeRecheck, work_item_ids=st.lists(work_item_ids, max_size=4).map(tuple)
    ),
    c.BeginTurn: _command(
        c.BeginTurn,
        turn_id=trimmed_text,
        fencing_token=fencing_tokens,
        tick_id=trimmed_text,
        tick_kind=st.sampled_from(TickKind),
        interrupted_turn_id=_optional(trimmed_text),
        reviewed_triggers=st.dictionaries(wait_ids, st.integers(0, 1000), max_size=3),
    ),
    c.FinishTurn: _command(
        c.FinishTurn,
        turn_id=trimmed_text,
        fencing_token=fencing_tokens,
        outcome=st.sampled_from(c.TurnOutcome),
        work_item_id=_optional(work_item_ids),
        error=optional_text,
        inbox_consumed=st.integers(min_value=0, max_value=1000),
        usage=_optional(turn_usages),
        model_outage=_optional(model_outages),
        rounds=st.integers(min_value=0, max_value=1000),
        tool_calls=st.integers(min_value=0, max_value=1000),
        tool_errors=st.lists(st.text(max_size=300), max_size=3).map(tuple),
    ),
    c.RefreshPlanArtifact: _command(
        c.RefreshPlanArtifact,
        work_item_id=work_item_ids,
        artifact=plan_artifacts(),
        fencing_token=_optional(fencing_tokens),
    ),
    c.BeginFileToolCall: _command(c.BeginFileToolCall, tool=trimmed_text),
    c.FinishFileToolCall: _command(
        c.FinishFileToolCall,
        started_command_id=trimmed_text,
        envelope=st.fixed_dictionaries({"tool_name": trimmed_text, "status": st.just("success")}),
    ),
    c.ParkAgent: _command(
        c.ParkAgent, reason=st.sampled_from(c.ParkReason), budget=_optional(budgets_exhausted)
    ),
    c.PauseAgent: _command(
        c.PauseAgent, reason=trimmed_text, interrupt=st.booleans(), by=trimmed_text
    ),
    c.ResumeAgent: _command(c.ResumeAgent, by=trimmed_text),
    c.RetireAgent: _command(
        c.RetireAgent,
        reason=trimmed_text,
        work_item_ids=st.lists(work_item_ids, max_size=3).map(tuple),
        by=trimmed_text,
    ),
    c.RecordTranscript: _command(
        c.RecordTranscript,
        turn_id=trimmed_text,
        fencing_token=_optional(fencing_tokens),
        work_item_id=_optional(work_item_ids),
        entries=st.lists(transcript_entries, max_size=4).map(tuple),
    ),
    c.CompactWorkItem: _command(
        c.CompactWorkItem,
        turn_id=trimmed_text,
        fencing_token=fencing_tokens,
        work_item_id=work_item_ids,
        notes=st.lists(process_notes, min_size=1, max_size=3).map(tuple),
        merged=st.lists(ulid_body.map(lambda s: "note_" + s), max_size=2).map(tuple),
    ),
    c.TrimTranscript: _command(
        c.TrimTranscript,
        turn_id=trimmed_text,
        fencing_token=fencing_tokens,
        entries=st.integers(1, 10_000),
        rounds=st.integers(0, 10_000),
    ),
    c.CommitArchive: _command(
        c.CommitArchive,
        upto_seq=st.integers(1, 10_000_000),
        segment_sha256=sha256_hex,
    ),
    c.CommitItemArchive: _command(
        c.CommitItemArchive,
        work_item_ids=st.lists(work_item_ids, min_size=1, max_size=5).map(tuple),
        batch_sha256=sha256_hex,
        written_at=utc_datetimes,
    ),
    c.RecordLivenessRepair: _command(
        c.RecordLivenessRepair,
        work_item_id=_optional(work_item_ids),
        kind=st.sampled_from(["orphaned_running", "stranded_tick", "lost_lease"]),
    ),
    c.RecordToolCallStart: _command(
        c.RecordToolCallStart,
        turn_id=trimmed_text,
        fencing_token=fencing_tokens,
        call_id=trimmed_text,
        server=trimmed_text,
        tool=trimmed_text,
        args_sha256=sha256_hex,
        arguments=st.text(max_size=100),
    ),
    c.RecordToolCallFinish: _command(
        c.RecordToolCallFinish,
        turn_id=trimmed_text,
        fencing_token=fencing_tokens,
        call_id=trimmed_text,
        outcome=st.sampled_from(["ok", "error", "timeout", "unknown"]),
        result_chars=st.integers(0, 10**6),
        truncated=st.booleans(),
    ),
    c.DelegateWorkItem: _tool(
        c.DelegateWorkItem,
        args=delegate_inputs,
        delegation_id=delegation_ids,
        child_work_item_id=work_item_ids,
        child_plan_artifact=plan_artifacts(),
    ),
    c.CancelDelegation: _tool(c.CancelDelegation, args=cancel_delegation_inputs),
    c.SpawnAgent: _tool(
        c.SpawnAgent,
        args=spawn_inputs(),
        child_agent_id=agent_ids,
        delegation_id=_optional(delegation_ids),
        child_spec=agent_specs(),
        agent_token_hash=sha256_hex,
        callback_token_hash=sha256_hex,
    ),
    c.CreateSpawnedAgent: _command(
        c.CreateSpawnedAgent,
        parent_agent_id=agent_ids,
        spec=agent_specs(),
        agent_token_hash=sha256_hex,
        callback_token_hash=sha256_hex,
        message=_optional(trimmed_text),
        spawned_by=_optional(spawned_bys),
    ),
    c.SendMessage: _tool(
        c.SendMessage,
        args=model(
            SendMessageInput, to_agent=agent_ids, text=trimmed_text, reply_to=_optional(message_ids)
        ),
        message_id=message_ids,
    ),
    c.DeliverPeerMessage: _command(
        c.DeliverPeerMessage,
        message_id=message_ids,
        sender=agent_ids,
        text=trimmed_text,
        in_reply_to=_optional(message_ids),
    ),
    c.RecordDelegationBound: _command(
        c.RecordDelegationBound,
        delegation_id=delegation_ids,
        child_agent_id=agent_ids,
        child_work_item_id=work_item_ids,
    ),
    c.SubmitVerdict: _tool(
        c.SubmitVerdict,
        args=model(
            SubmitVerdictInput,
            work_item_id=work_item_ids,
            passed=st.booleans(),
            reason=trimmed_text,
        ),
    ),
    c.CreateDelegatedWorkItem: _command(
        c.CreateDelegatedWorkItem,
        work_item_id=work_item_ids,
        plan_artifact=plan_artifacts(),
        objective=trimmed_text,
        plan_status=st.sampled_from(PlanStatus),
        todo_list=st.lists(todo_items, max_size=3).map(tuple),
        delegated_from=delegated_froms,
    ),
    c.RecordDelegationResult: _command(
        c.RecordDelegationResult,
        delegation_id=delegation_ids,
        status=st.sampled_from(DelegationStatus),
        report=_optional(trimmed_text),
        child_agent_id=agent_ids,
        child_work_item_id=_optional(work_item_ids),
    ),
    c.CancelDelegatedWorkItem: _command(
        c.CancelDelegatedWorkItem,
        delegation_id=delegation_ids,
        work_item_id=_optional(work_item_ids),
        reason=trimmed_text,
    ),
    c.SignHistoryHead: _command(c.SignHistoryHead),
    c.RecordMissingSecret: _command(
        c.RecordMissingSecret, fencing_token=fencing_tokens, hold=missing_secrets
    ),
}

# ---------------------------------------------------------------- events

_event_fields: dict[str, st.SearchStrategy[Any]] = {
    "agent_id": agent_ids,
    "work_item_id": _optional(work_item_ids),
}


def _event(cls: type[e.Event], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return model(cls, **_event_fields, **fields)


@st.composite
def _work_item_completed(draw: st.DrawFn) -> e.WorkItemCompleted:
    item = draw(work_items(state=WorkItemState.COMPLETED))
    pending = sum(t.state is TodoState.PENDING for t in item.todo_list)
    in_progress = sum(t.state is TodoState.IN_PROGRESS for t in item.todo_list)
    return e.WorkItemCompleted(
        agent_id=item.agent_id,
        work_item_id=item.id,
        work_item=item,
        report_promoted=item.result_summary is not None,
        completed_with_unfinished_todos=pending + in_progress > 0,
        unfinished_todo_count=pending + in_progress,
        pending_todo_count=pending,
        in_progress_todo_count=in_progress,
    )


@st.composite
def _work_item_cancelled(draw: st.DrawFn) -> e.WorkItemCancelled:
    item = draw(work_items(state=WorkItemState.COMPLETED))
    return e.WorkItemCancelled(
        agent_id=item.agent_id,
        work_item_id=item.id,
        work_item=item.model_copy(update={"outcome": WorkItemOutcome.CANCELLED}),
        reason=draw(trimmed_text),
        cancelled_by=draw(st.sampled_from(["agent", "operator", "delegator"])),
    )


@st.composite
def _wait_triggered(draw: st.DrawFn) -> e.WaitTriggered:
    return e.WaitTriggered(
        agent_id=draw(agent_ids),
        work_item_id=draw(_optional(work_item_ids)),
        wait_id=draw(wait_ids),
        trigger_count=draw(st.integers(min_value=1, max_value=1000)),
        source=draw(st.sampled_from(["callback", "timer", "operator_message", "task_result"])),
        delivery_id=draw(_optional(trimmed_text)),
        token_id=draw(_optional(trimmed_text)),
        content_type=draw(_optional(st.sampled_from(["application/json", "text/plain"]))),
    )


@st.composite
def _wake_budget_exhausted(draw: st.DrawFn) -> e.WakeBudgetExhausted:
    budget = draw(wake_budgets())
    return e.WakeBudgetExhausted(agent_id=draw(agent_ids), used=budget.used, limit=budget.limit)


_WORK_ITEM_FIELDS = ("objective", "plan_status", "todo_list", "blocked_by", "recheck_at")

EVENT_STRATEGIES: dict[type[e.Event], st.SearchStrategy[Any]] = {
    e.AgentCreated: _event(e.AgentCreated, loop=st.sampled_from(AgentLoop)),
    e.AgentSpecChanged: _event(
        e.AgentSpecChanged,
        spec_version=st.integers(min_value=1, max_value=10**6),
        changed=st.lists(st.sampled_from(SPEC_FIELDS), unique=True, min_size=1).map(tuple),
    ),
    e.WorkItemCreated: _event(e.WorkItemCreated, work_item=work_items()),
    e.WorkItemUpdated: _event(
        e.WorkItemUpdated,
        work_item=work_items(state=WorkItemState.OPEN),
        changed=st.lists(st.sampled_from(_WORK_ITEM_FIELDS), unique=True, max_size=5).map(tuple),
    ),
    e.WorkItemPicked: _event(
        e.WorkItemPicked,
        previous_work_item_id=_optional(work_item_ids),
        switch_kind=st.sampled_from(["initial", "switch", "same"]),
        reason=_optional(trimmed_text),
        reason_required=st.booleans(),
        reason_missing=st.booleans(),
        focus_mode=st.sampled_from(["runnable", "inspection"]),
        blocker_cleared=st.booleans(),
    ),
    e.WorkItemFocusReleased: _event(
        e.WorkItemFocusReleased, cause=st.sampled_from(["blocked", "needs_input", "completed"])
    ),
    e.WorkItemCompleted: _work_item_completed(),
    e.WorkItemCancelled: _work_item_cancelled(),
    e.WorkItemVerifying: _event(
        e.WorkItemVerifying,
        work_item=work_items(state=WorkItemState.OPEN),
        attempt=st.integers(min_value=1, max_value=50),
        awaited=st.lists(st.sampled_from(["operator_approval", "webhook http://x/"])).map(tuple),
    ),
    e.CheckVerdictRecorded: _event(
        e.CheckVerdictRecorded,
        attempt=st.integers(min_value=1, max_value=50),
        check_index=st.integers(min_value=0, max_value=15),
        kind=st.sampled_from(CheckKind),
        passed=st.booleans(),
        reason=any_text,
        source=st.sampled_from(["operator", "webhook"]),
    ),
    e.AcceptancePassed: _event(
        e.AcceptancePassed,
        work_item=work_items(state=WorkItemState.COMPLETED),
        attempt=st.integers(min_value=1, max_value=50),
    ),
    e.AcceptanceFailed: _event(
        e.AcceptanceFailed,
        work_item=work_items(state=WorkItemState.OPEN),
        attempt=st.integers(min_value=1, max_value=50),
        reasons=st.lists(trimmed_text, max_size=3).map(tuple),
    ),
    e.WaitCreated: _event(e.WaitCreated, wait=waiting_intents()),
    e.WaitCancelled: _event(
        e.WaitCancelled, wait_id=wait_ids, cause=st.sampled_from(["replaced", "completed"])
    ),
    e.WaitTriggered: _wait_triggered(),
    e.OperatorMessageReceived: _event(
        e.OperatorMessageReceived,
        message_id=trimmed_text,
        text=any_text,
        triggered_wait_id=_optional(wait_ids),
    ),
    e.CallbackDeliveredToInbox: _event(
        e.CallbackDeliveredToInbox,
        message_id=trimmed_text,
        delivery_id=trimmed_text,
        source=st.sampled_from(c.CallbackSource),
    ),
    e.RecheckConsumed: _event(
        e.RecheckConsumed, work_item_ids=st.lists(work_item_ids, max_size=4).map(tuple)
    ),
    e.TurnStarted: _event(
        e.TurnStarted,
        turn_id=trimmed_text,
        fencing_token=fencing_tokens,
        tick_kind=st.sampled_from(TickKind),
        turn_index=st.integers(min_value=1, max_value=10**6),
        interrupted_turn_id=_optional(trimmed_text),
        tick_id=_optional(trimmed_text),
    ),
    e.TurnFinished: _event(
        e.TurnFinished,
        turn_id=trimmed_text,
        outcome=st.sampled_from(c.TurnOutcome),
        error=optional_text,
        usage=_optional(turn_usages),
        rounds=st.integers(min_value=0, max_value=1000),
        tool_calls=st.integers(min_value=0, max_value=1000),
        tool_errors=st.lists(any_text, max_size=3).map(tuple),
    ),
    e.BriefRecorded: _event(e.BriefRecorded, brief=brief_records),
    e.DeliverySummaryRecorded: _event(e.DeliverySummaryRecorded, summary=delivery_summary_records),
    e.PlanArtifactRefreshed: _event(e.PlanArtifactRefreshed, artifact=plan_artifacts()),
    e.WakeBudgetExhausted: _wake_budget_exhausted(),
    e.WakeBudgetReset: _event(
        e.WakeBudgetReset, cause=st.sampled_from(["operator_message", "trigger", "recheck"])
    ),
    e.InboxUndeliverable: _event(
        e.InboxUndeliverable,
        message_ids=st.lists(trimmed_text, min_size=1, max_size=4).map(tuple),
        attempts=st.integers(1, 10),
        error=st.text(max_size=200),
    ),
    e.ModelRetriesExhausted: _event(
        e.ModelRetriesExhausted,
        provider=st.sampled_from(["openai", "anthropic"]),
        status=_optional(st.integers(min_value=400, max_value=599)),
        retry_at=utc_datetimes,
    ),
    e.TokenBudgetExhausted: _event(
        e.TokenBudgetExhausted,
        used=_counts,
        limit=st.integers(min_value=1, max_value=10**9),
        resets_at=utc_datetimes,
    ),
    e.AgentParked: _event(
        e.AgentParked,
        posture=st.sampled_from([Posture.IDLE, Posture.DORMANT]),
        reason=st.sampled_from(c.ParkReason).map(str),
        name=_optional(st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True)),
    ),
    e.TranscriptRecorded: _event(
        e.TranscriptRecorded, turn_id=trimmed_text, entries=st.integers(0, 200)
    ),
    e.AgentPaused: _event(
        e.AgentPaused, reason=trimmed_text, by=trimmed_text, interrupt=st.booleans()
    ),
    e.AgentResumed: _event(e.AgentResumed, by=trimmed_text),
    e.AgentRetired: _event(
        e.AgentRetired,
        reason=trimmed_text,
        by=trimmed_text,
        cancelled_work_items=st.lists(work_item_ids, max_size=3).map(tuple),
    ),
    e.LivenessRepaired: _event(e.LivenessRepaired, kind=trimmed_text),
    e.WorkItemCompacted: _event(
        e.WorkItemCompacted,
        note=process_notes,
        merged=st.lists(ulid_body.map(lambda s: "note_" + s), max_size=2).map(tuple),
        notes=st.integers(1, 64),
        turn_id=trimmed_text,
    ),
    e.TranscriptTrimmed: _event(
        e.TranscriptTrimmed,
        entries=st.integers(1, 10_000),
        rounds=st.integers(0, 10_000),
        turn_id=trimmed_text,
    ),
    e.HistoryArchived: _event(
        e.HistoryArchived,
        upto_seq=st.integers(1, 10_000_000),
        segment=st.integers(1, 10_000).map(lambda n: f"history/{n:012d}-{n + 9:012d}.jsonl"),
    ),
    e.WorkItemsArchived: _event(
        e.WorkItemsArchived,
        batch=st.integers(0, 2**40).map(lambda n: f"items/batches/{n:013d}-{n:016x}.json"),
        work_item_ids=st.lists(work_item_ids, min_size=1, max_size=5).map(tuple),
    ),
    e.TimerScheduled: _event(e.TimerScheduled, due_at=utc_datetimes, wait_id=_optional(wait_ids)),
    e.DeadlineScheduled: _event(
        e.DeadlineScheduled,
        target=st.sampled_from(["wait", "delegation"]),
        target_id=trimmed_text,
        due_at=utc_datetimes,
    ),
    e.WaitExpired: _event(
        e.WaitExpired, wait_id=wait_ids, reason=trimmed_text, deadline_at=utc_datetimes
    ),
    e.ToolCallStarted: _event(
        e.ToolCallStarted,
        call_id=trimmed_text,
        server=trimmed_text,
        tool=trimmed_text,
        args_sha256=sha256_hex,
        arguments=st.text(max_size=100),
        turn_id=trimmed_text,
    ),
    e.ToolCallFinished: _event(
        e.ToolCallFinished,
        call_id=trimmed_text,
        outcome=st.sampled_from(["ok", "error", "timeout", "unknown"]),
        result_chars=st.integers(0, 10**6),
        truncated=st.booleans(),
    ),
    e.DelegationCreated: _event(e.DelegationCreated, delegation=delegation_records()),
    e.DelegationReceived: _event(e.DelegationReceived, delegation=delegation_records()),
    e.DelegationFinished: _event(
        e.DelegationFinished,
        delegation_id=delegation_ids,
        status=st.sampled_from(DelegationStatus),
        report=_optional(trimmed_text),
        cause=st.sampled_from(["child_result", "cancelled_by_parent", "parent_ended"]),
    ),
    e.AgentSpawned: _event(
        e.AgentSpawned,
        child_agent_id=agent_ids,
        kind=st.sampled_from(["private_child", "public_named"]),
        workspace_mode=st.sampled_from(["isolated", "shared"]),
        delegation=_optional(delegation_records()),
    ),
    e.MessageSent: _event(
        e.MessageSent, message_id=message_ids, to_agent=agent_ids, reply_to=_optional(message_ids)
    ),
    e.PeerMessageReceived: _event(
        e.PeerMessageReceived,
        message_id=message_ids,
        from_agent=agent_ids,
        text=trimmed_text,
        reply_to=_optional(message_ids),
    ),
    e.DelegationBound: _event(
        e.DelegationBound,
        delegation_id=delegation_ids,
        child_agent_id=agent_ids,
        child_work_item_id=work_item_ids,
    ),
}

events: st.SearchStrategy[e.Event] = st.one_of(*EVENT_STRATEGIES.values())

# ---------------------------------------------------------------- ticks and replies

candidates = model(
    Candidate,
    work_item_id=work_item_ids,
    candidate_class=st.sampled_from(CandidateClass),
    rank=st.integers(min_value=1, max_value=100),
)
ticks = model(
    Tick,
    tick_id=trimmed_text,
    agent_id=agent_ids,
    kind=st.sampled_from(TickKind),
    work_item_id=_optional(work_item_ids),
    candidates=st.lists(candidates, max_size=4).map(tuple),
    recheck_work_item_ids=st.lists(work_item_ids, max_size=3).map(tuple),
    issued_at=utc_datetimes,
)
timers_fired = model(
    TimerFired,
    agent_id=agent_ids,
    wait_id=_optional(wait_ids),
    work_item_id=_optional(work_item_ids),
    due_at=utc_datetimes,
)
tool_warnings = model(
    ToolWarning,
    kind=st.sampled_from(WarningKind),
    message=any_text,
    pending_count=_optional(small_counts),
    in_progress_count=_optional(small_counts),
    sample=_optional(st.lists(trimmed_text, max_size=5).map(tuple)),
    requested=_optional(st.integers(-1000, 1000)),
    applied=_optional(st.integers(1, 100)),
)
tool_error_bodies = model(
    ToolErrorBody,
    kind=st.sampled_from(ErrorKind),
    message=any_text,
    details=_optional(json_objects),
    recovery_hint=optional_text,
)


@st.composite
def command_replies(draw: st.DrawFn) -> CommandReply:
    """Applied and duplicate replies carry a result; rejected ones carry an error."""
    outcome = draw(st.sampled_from(CommandOutcome))
    rejected = outcome is CommandOutcome.REJECTED
    return CommandReply(
        command_id=draw(command_ids),
        outcome=outcome,
        result=None if rejected else draw(json_objects),
        warnings=() if rejected else tuple(draw(st.lists(tool_warnings, max_size=2))),
        error=draw(tool_error_bodies) if rejected else None,
    )


def seal(**parts: Any) -> dict[str, Any]:
    """The next history event as the plain JSON document the ledger stores, hash included."""
    doc: dict[str, Any] = orjson.loads(seal_encoded(**parts)[1])
    return doc


@st.composite
def history_events(draw: st.DrawFn, max_size: int = 4) -> tuple[HistoryEvent, ...]:
    """A sealed, verifiable run of one agent's history, as typed HistoryEvents."""
    agent = draw(agent_ids)
    prev = GENESIS_HASH
    docs = []
    for seq, event in enumerate(draw(st.lists(events, max_size=max_size)), start=1):
        doc = seal(
            seq=seq,
            event_type=event.message_type,
            at=draw(utc_datetimes),
            agent_id=agent,
            work_item_id=event.work_item_id,
            data=event.data(),
            prev_hash=prev,
        )
        prev = doc["hash"]
        docs.append(HistoryEvent.model_validate(doc))
    return tuple(docs)


@st.composite
def ledger_events(draw: st.DrawFn) -> e.LedgerEvents:
    batch = draw(history_events())
    agent = batch[0].agent_id if batch else draw(agent_ids)
    return e.LedgerEvents(agent_id=agent, command_id=draw(command_ids), events=batch)


# ---------------------------------------------------------------- every message

MESSAGE_STRATEGIES: dict[type[Message], st.SearchStrategy[Any]] = {
    **{cls: strategy for cls, strategy in COMMAND_STRATEGIES.items()},
    **{cls: strategy for cls, strategy in EVENT_STRATEGIES.items()},
    e.LedgerEvents: ledger_events(),
    Tick: ticks,
    TimerFired: timers_fired,
    CommandReply: command_replies(),
}


def messages_of(cls: type[Message]) -> st.SearchStrategy[Any]:
    return MESSAGE_STRATEGIES[cls]


messages: st.SearchStrategy[Message] = st.one_of(*MESSAGE_STRATEGIES.values())


def envelopes(body: st.SearchStrategy[Message] = messages) -> st.SearchStrategy[Envelope]:
    return model(
        Envelope,
        id=trimmed_text,
        at=utc_datetimes,
        correlation_id=optional_text,
        causation_id=optional_text,
        body=body,
    )
