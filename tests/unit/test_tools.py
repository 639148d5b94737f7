"""Rules of tool input validation, errors, warnings and the answer envelope (docs/contract.md
§3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from shared.domain.errors import (
    HTTP_STATUS,
    DomainError,
    ErrorKind,
    ToolWarning,
    WarningKind,
    missing_completion_report_warning,
    missing_pick_reason_warning,
    unfinished_todos_warning,
)
from shared.domain.tools import (
    CreateWorkItemInput,
    ListWorkItemsInput,
    PickWorkItemInput,
    ToolEnvelope,
    ToolName,
    UpdateWorkItemInput,
    WaitForInput,
    parse_tool_input,
    tool_schema,
)
from shared.domain.views import ListFilter
from tests.builders import work_item_id

WI = work_item_id(1)

MINIMAL_ARGS: dict[ToolName, dict[str, Any]] = {
    ToolName.CREATE_WORK_ITEM: {"objective": "Ship the release notes"},
    ToolName.UPDATE_WORK_ITEM: {"work_item_id": WI},
    ToolName.PICK_WORK_ITEM: {"work_item_id": WI},
    ToolName.GET_WORK_ITEM: {"work_item_id": WI},
    ToolName.LIST_WORK_ITEMS: {},
    ToolName.COMPLETE_WORK_ITEM: {"work_item_id": WI},
    ToolName.CANCEL_WORK_ITEM: {"work_item_id": WI, "reason": "No longer needed"},
    ToolName.WAIT_FOR: {"reason": "Waiting for the build", "wake": "external"},
    ToolName.DELEGATE_WORK_ITEM: {"to_agent": "b", "objective": "Check", "reason": "Expert"},
    ToolName.CANCEL_DELEGATION: {"delegation_id": "dlg_1", "reason": "Not needed"},
    ToolName.SUBMIT_VERDICT: {"work_item_id": WI, "passed": True, "reason": "Looks right"},
    ToolName.SPAWN_AGENT: {"kind": "private_child", "initial_message": "Find the flaky test"},
    ToolName.SEND_MESSAGE: {"to_agent": "b", "text": "Are you done?"},
}


def rejected(tool: str, args: object) -> DomainError:
    with pytest.raises(DomainError) as caught:
        parse_tool_input(tool, args)
    return caught.value


def invalid_fields(error: DomainError) -> list[str]:
    assert error.kind is ErrorKind.INVALID_TOOL_INPUT
    assert error.recovery_hint
    assert error.details is not None
    return [problem["field"] for problem in error.details["errors"]]


def names_field(error: DomainError, field: str) -> bool:
    """Whether the error's details name `field`, as the failing field or in the problem text
    (a rule that spans two fields is reported on the whole input)."""
    assert error.details is not None
    return any(
        p["field"] == field or p["field"].endswith(f".{field}") or field in p["problem"]
        for p in error.details["errors"]
    )


# ------------------------------------------------------------------ valid input


@pytest.mark.parametrize("tool", list(ToolName))
def test_minimal_arguments_parse_without_warnings(tool: ToolName) -> None:
    _, warnings = parse_tool_input(tool.value, MINIMAL_ARGS[tool])
    assert warnings == []


def test_tools_cover_the_contract() -> None:
    assert {t.value for t in ToolName} == {
        "CreateWorkItem",
        "UpdateWorkItem",
        "PickWorkItem",
        "GetWorkItem",
        "ListWorkItems",
        "CompleteWorkItem",
        "CancelWorkItem",
        "WaitFor",
        "DelegateWorkItem",
        "CancelDelegation",
        "SubmitVerdict",
        "SpawnAgent",
        "SendMessage",
    }


def test_create_trims_objective_and_todo_text() -> None:
    parsed, _ = parse_tool_input(
        "CreateWorkItem",
        {
            "objective": "  Ship the notes \n",
            "plan_status": "ready",
            "todo_list": [{"text": "\tDraft  "}, {"text": " Review", "state": "in_progress"}],
        },
    )
    assert isinstance(parsed, CreateWorkItemInput)
    assert parsed.objective == "Ship the notes"
    assert [(t.text, t.state.value) for t in parsed.todo_list] == [
        ("Draft", "pending"),
        ("Review", "in_progress"),
    ]


def test_update_trims_blocked_by_and_objective() -> None:
    parsed, _ = parse_tool_input(
        "UpdateWorkItem",
        {"work_item_id": f" {WI} ", "objective": " New aim ", "blocked_by": "  Needs a key "},
    )
    assert isinstance(parsed, UpdateWorkItemInput)
    assert (parsed.work_item_id, parsed.objective, parsed.blocked_by) == (
        WI,
        "New aim",
        "Needs a key",
    )
    assert parsed.sets_blocker
    assert not parsed.clears_blocker


def test_update_with_null_blocked_by_clears_the_blocker() -> None:
    parsed, _ = parse_tool_input("UpdateWorkItem", {"work_item_id": WI, "blocked_by": None})
    assert isinstance(parsed, UpdateWorkItemInput)
    assert parsed.clears_blocker
    assert not parsed.sets_blocker


def test_update_without_blocked_by_leaves_the_blocker_alone() -> None:
    parsed, _ = parse_tool_input("UpdateWorkItem", {"work_item_id": WI, "objective": "x"})
    assert isinstance(parsed, UpdateWorkItemInput)
    assert not parsed.clears_blocker
    assert not parsed.sets_blocker


def test_pick_trims_reason() -> None:
    parsed, _ = parse_tool_input(
        "PickWorkItem", {"work_item_id": WI, "reason": "  key arrived ", "clear_blocker": True}
    )
    assert isinstance(parsed, PickWorkItemInput)
    assert parsed.reason == "key arrived"
    assert parsed.clear_blocker


def test_wait_for_trims_reason_and_resource() -> None:
    parsed, _ = parse_tool_input(
        "WaitFor", {"reason": " build ", "wake": "task_result", "resource": " task-42 "}
    )
    assert isinstance(parsed, WaitForInput)
    assert (parsed.reason, parsed.resource) == ("build", "task-42")


def test_timer_wait_with_positive_delay_is_valid() -> None:
    parsed, _ = parse_tool_input("WaitFor", {"reason": "r", "wake": "timer", "wake_after_ms": 1})
    assert isinstance(parsed, WaitForInput)
    assert parsed.wake_after_ms == 1


def test_list_defaults_to_all_with_limit_20() -> None:
    parsed, _ = parse_tool_input("ListWorkItems", {})
    assert isinstance(parsed, ListWorkItemsInput)
    assert (parsed.filter, parsed.limit, parsed.include_todo_list) == (ListFilter.ALL, 20, False)


@pytest.mark.parametrize("wanted", list(ListFilter))
def test_list_accepts_every_filter(wanted: ListFilter) -> None:
    parsed, _ = parse_tool_input("ListWorkItems", {"filter": wanted.value})
    assert isinstance(parsed, ListWorkItemsInput)
    assert parsed.filter is wanted


# ------------------------------------------------------------------ unknown fields


@pytest.mark.parametrize("tool", list(ToolName))
def test_unknown_top_level_field_is_rejected(tool: ToolName) -> None:
    error = rejected(tool.value, {**MINIMAL_ARGS[tool], "priority": "high"})
    assert invalid_fields(error) == ["priority"]


@pytest.mark.parametrize("tool", ["CreateWorkItem", "UpdateWorkItem"])
def test_unknown_field_inside_a_todo_item_is_rejected(tool: str) -> None:
    args = {**MINIMAL_ARGS[ToolName(tool)], "todo_list": [{"text": "Draft", "id": 1}]}
    assert invalid_fields(rejected(tool, args)) == ["todo_list.0.id"]


def test_item_level_blocked_state_is_not_a_todo_state() -> None:
    args = {"objective": "x", "todo_list": [{"text": "Draft", "state": "blocked"}]}
    assert invalid_fields(rejected("CreateWorkItem", args)) == ["todo_list.0.state"]


def test_include_plan_on_get_work_item_points_at_the_plan_file() -> None:
    error = rejected("GetWorkItem", {"work_item_id": WI, "include_plan": True})
    assert invalid_fields(error) == ["include_plan"]
    assert error.recovery_hint is not None
    assert "plan_artifact.path" in error.recovery_hint


# ------------------------------------------------------------------ empty strings

EMPTY_ROWS: list[tuple[str, dict[str, Any], str]] = [
    ("CreateWorkItem", {"objective": ""}, "objective"),
    ("CreateWorkItem", {"objective": "   "}, "objective"),
    ("CreateWorkItem", {"objective": "x", "todo_list": [{"text": " \t"}]}, "todo_list.0.text"),
    (
        "CreateWorkItem",
        {"objective": "x", "todo_list": [{"text": "ok"}, {"text": ""}]},
        "todo_list.1.text",
    ),
    ("UpdateWorkItem", {"work_item_id": WI, "objective": "  "}, "objective"),
    ("UpdateWorkItem", {"work_item_id": WI, "todo_list": [{"text": "\n"}]}, "todo_list.0.text"),
    ("UpdateWorkItem", {"work_item_id": WI, "blocked_by": ""}, "blocked_by"),
    ("UpdateWorkItem", {"work_item_id": WI, "blocked_by": "   "}, "blocked_by"),
    ("UpdateWorkItem", {"work_item_id": "  "}, "work_item_id"),
    ("GetWorkItem", {"work_item_id": ""}, "work_item_id"),
    ("CompleteWorkItem", {"work_item_id": " "}, "work_item_id"),
    ("WaitFor", {"reason": "", "wake": "external"}, "reason"),
    ("WaitFor", {"reason": " \t ", "wake": "system"}, "reason"),
    ("WaitFor", {"reason": "r", "wake": "task_result", "resource": "  "}, "resource"),
]


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    EMPTY_ROWS,
    ids=[f"{tool}-{field}" for tool, _, field in EMPTY_ROWS],
)
def test_empty_or_whitespace_string_is_invalid(tool: str, args: dict[str, Any], field: str) -> None:
    assert field in invalid_fields(rejected(tool, args))


# ------------------------------------------------------------------ required fields and pairs

MISSING_ROWS: list[tuple[str, dict[str, Any], str]] = [
    ("CreateWorkItem", {}, "objective"),
    ("UpdateWorkItem", {"objective": "x"}, "work_item_id"),
    ("PickWorkItem", {}, "work_item_id"),
    ("GetWorkItem", {}, "work_item_id"),
    ("CompleteWorkItem", {}, "work_item_id"),
    ("WaitFor", {"wake": "external"}, "reason"),
    ("WaitFor", {"reason": "r"}, "wake"),
    ("CreateWorkItem", {"objective": "x", "todo_list": [{"state": "pending"}]}, "todo_list.0.text"),
]


@pytest.mark.parametrize(
    ("tool", "args", "field"), MISSING_ROWS, ids=[f"{t}-{f}" for t, _, f in MISSING_ROWS]
)
def test_missing_required_field_is_invalid(tool: str, args: dict[str, Any], field: str) -> None:
    assert field in invalid_fields(rejected(tool, args))


PAIR_ROWS: list[tuple[str, dict[str, Any], str]] = [
    ("PickWorkItem", {"work_item_id": WI, "clear_blocker": True}, "reason"),
    ("PickWorkItem", {"work_item_id": WI, "reason": " ", "clear_blocker": True}, "reason"),
    ("WaitFor", {"reason": "r", "wake": "task_result"}, "resource"),
    ("WaitFor", {"reason": "r", "wake": "task_result", "resource": None}, "resource"),
    ("WaitFor", {"reason": "r", "wake": "timer"}, "wake_after_ms"),
    ("WaitFor", {"reason": "r", "wake": "timer", "wake_after_ms": 0}, "wake_after_ms"),
    ("WaitFor", {"reason": "r", "wake": "timer", "wake_after_ms": -1}, "wake_after_ms"),
    ("WaitFor", {"reason": "r", "wake": "external", "deadline_s": 0}, "deadline_s"),
    ("WaitFor", {"reason": "r", "wake": "external", "deadline_s": 10**9}, "deadline_s"),
]


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    PAIR_ROWS,
    ids=[
        "clear_blocker_without_reason",
        "clear_blocker_with_blank_reason",
        "task_result_without_resource",
        "task_result_with_null_resource",
        "timer_without_wake_after_ms",
        "timer_with_zero_delay",
        "timer_with_negative_delay",
        "zero_deadline",
        "deadline_over_a_year",
    ],
)
def test_rule_between_fields_is_invalid_and_names_the_field(
    tool: str, args: dict[str, Any], field: str
) -> None:
    error = rejected(tool, args)
    invalid_fields(error)
    assert names_field(error, field)


def test_clear_blocker_false_needs_no_reason() -> None:
    parsed, _ = parse_tool_input("PickWorkItem", {"work_item_id": WI, "clear_blocker": False})
    assert isinstance(parsed, PickWorkItemInput)
    assert parsed.reason is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("filter", "everything"), ("limit", "many"), ("limit", 2.5), ("include_todo_list", "maybe")],
)
def test_list_rejects_values_of_the_wrong_type(field: str, value: object) -> None:
    assert invalid_fields(rejected("ListWorkItems", {field: value})) == [field]


def test_invalid_wake_kind_is_rejected() -> None:
    assert invalid_fields(rejected("WaitFor", {"reason": "r", "wake": "webhook"})) == ["wake"]


def test_error_message_names_the_tool_and_the_fields() -> None:
    error = rejected("CreateWorkItem", {"objective": " ", "colour": "red"})
    assert error.message.startswith("CreateWorkItem")
    assert "objective" in error.message
    assert "colour" in error.message


# ------------------------------------------------------------------ limit clamping


@pytest.mark.parametrize(("requested", "applied"), [(0, 1), (-5, 1), (101, 100), (500, 100)])
def test_out_of_range_limit_is_clamped_with_a_warning(requested: int, applied: int) -> None:
    parsed, warnings = parse_tool_input("ListWorkItems", {"limit": requested})
    assert isinstance(parsed, ListWorkItemsInput)
    assert parsed.limit == applied
    assert len(warnings) == 1
    assert warnings[0].kind is WarningKind.LIMIT_CLAMPED
    assert (warnings[0].requested, warnings[0].applied) == (requested, applied)
    assert warnings[0].message


@pytest.mark.parametrize("limit", [1, 20, 100])
def test_in_range_limit_is_untouched(limit: int) -> None:
    parsed, warnings = parse_tool_input("ListWorkItems", {"limit": limit})
    assert isinstance(parsed, ListWorkItemsInput)
    assert parsed.limit == limit
    assert warnings == []


def test_clamping_keeps_the_other_list_arguments() -> None:
    parsed, _ = parse_tool_input(
        "ListWorkItems", {"filter": "blocked", "limit": 0, "include_todo_list": True}
    )
    assert isinstance(parsed, ListWorkItemsInput)
    assert (parsed.filter, parsed.limit, parsed.include_todo_list) == (ListFilter.BLOCKED, 1, True)


# ------------------------------------------------------------------ tool name and argument shape


@pytest.mark.parametrize("name", ["DeleteWorkItem", "createworkitem", "", "ReadFile"])
def test_unknown_tool_is_unknown_tool(name: str) -> None:
    error = rejected(name, {})
    assert error.kind is ErrorKind.UNKNOWN_TOOL
    assert error.recovery_hint
    assert error.details is not None
    assert set(error.details["known_tools"]) == {t.value for t in ToolName}
    assert HTTP_STATUS[error.kind] == 404


@pytest.mark.parametrize("raw", [None, [], ["objective"], "objective", 3, True])
def test_non_object_arguments_are_invalid_tool_input(raw: object) -> None:
    error = rejected("CreateWorkItem", raw)
    assert error.kind is ErrorKind.INVALID_TOOL_INPUT
    assert error.recovery_hint
    assert "JSON object" in error.message


# ------------------------------------------------------------------ error kinds and HTTP status

STATUS_ROWS = [
    (ErrorKind.INVALID_TOOL_INPUT, 400),
    (ErrorKind.WORK_ITEM_ACCESS_DENIED, 403),
    (ErrorKind.ACCESS_DENIED, 403),
    (ErrorKind.WORK_ITEM_NOT_FOUND, 404),
    (ErrorKind.WAIT_NOT_FOUND, 404),
    (ErrorKind.UNKNOWN_TOOL, 404),
    (ErrorKind.WORK_ITEM_NOT_OPEN, 409),
    (ErrorKind.NO_CURRENT_WORK_ITEM, 409),
    (ErrorKind.STALE_TURN, 409),
    (ErrorKind.LOOP_CHANGE_REFUSED, 409),
    (ErrorKind.ACCEPTANCE_FAILED, 409),
    (ErrorKind.WORK_ITEM_VERIFYING, 409),
    (ErrorKind.WORK_ITEM_NOT_VERIFYING, 409),
    (ErrorKind.AGENT_NOT_FOUND, 404),
    (ErrorKind.DELEGATION_NOT_FOUND, 404),
    (ErrorKind.DELEGATION_CYCLE, 409),
    (ErrorKind.DELEGATION_TOO_DEEP, 409),
    (ErrorKind.OUTCOME_UNKNOWN, 409),
    (ErrorKind.PATTERN_TOO_SLOW, 400),
    (ErrorKind.ARCHIVE_MISMATCH, 409),
    (ErrorKind.AGENT_PAUSED, 409),
    (ErrorKind.AGENT_RETIRED, 409),
    (ErrorKind.WEBHOOK_NOT_ALLOWED, 400),
    (ErrorKind.PRESET_NOT_FOUND, 404),
    (ErrorKind.AGENT_EXISTS, 409),
    (ErrorKind.TOO_MANY_CHILDREN, 409),
    (ErrorKind.PEER_NOT_ALLOWED, 403),
]


def test_error_kinds_are_the_contract_names() -> None:
    assert {kind.value for kind in ErrorKind} == {
        "invalid_tool_input",
        "work_item_not_found",
        "work_item_access_denied",
        "work_item_not_open",
        "no_current_work_item",
        "wait_not_found",
        "access_denied",
        "stale_turn",
        "unknown_tool",
        "loop_change_refused",
        "acceptance_failed",
        "work_item_verifying",
        "work_item_not_verifying",
        "agent_not_found",
        "delegation_cycle",
        "delegation_too_deep",
        "delegation_not_found",
        "outcome_unknown",
        "pattern_too_slow",
        "archive_mismatch",
        "agent_paused",
        "agent_retired",
        "webhook_not_allowed",
        "preset_not_found",
        "agent_exists",
        "too_many_children",
        "peer_not_allowed",
    }


def test_every_error_kind_has_an_http_status() -> None:
    assert set(HTTP_STATUS) == set(ErrorKind)
    assert {kind for kind, _ in STATUS_ROWS} == set(ErrorKind)


@pytest.mark.parametrize(("kind", "status"), STATUS_ROWS)
def test_http_status_by_error_kind(kind: ErrorKind, status: int) -> None:
    assert HTTP_STATUS[kind] == status


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_every_domain_error_carries_a_recovery_hint(kind: ErrorKind) -> None:
    assert DomainError(kind, "it failed").body().recovery_hint


def test_explicit_recovery_hint_wins_over_the_default() -> None:
    error = DomainError(ErrorKind.WORK_ITEM_NOT_FOUND, "no such item", recovery_hint="List first.")
    assert error.recovery_hint == "List first."


# ------------------------------------------------------------------ envelope


def test_success_envelope_shape() -> None:
    warning = missing_completion_report_warning()
    envelope = ToolEnvelope.success("CompleteWorkItem", {"report_promoted": False}, [warning])
    body = envelope.model_dump(mode="json")
    assert body["tool_name"] == "CompleteWorkItem"
    assert body["status"] == "success"
    assert body["result"] == {"report_promoted": False}
    assert [w["kind"] for w in body["warnings"]] == ["missing_completion_report"]
    assert body["error"] is None


def test_success_envelope_has_an_empty_warning_list_by_default() -> None:
    body = ToolEnvelope.success("ListWorkItems", {}).model_dump(mode="json")
    assert body["warnings"] == []


def test_failure_envelope_shape() -> None:
    error = DomainError(ErrorKind.WORK_ITEM_NOT_OPEN, "already completed", details={"id": WI})
    body = ToolEnvelope.failure("CompleteWorkItem", error).model_dump(mode="json")
    assert body["tool_name"] == "CompleteWorkItem"
    assert body["status"] == "error"
    assert body["result"] is None
    assert body["warnings"] == []
    assert body["error"] == {
        "kind": "work_item_not_open",
        "message": "already completed",
        "details": {"id": WI},
        "recovery_hint": error.recovery_hint,
    }


def test_failure_envelope_of_a_validation_error_is_plain_json() -> None:
    error = rejected("WaitFor", {"reason": "r", "wake": "timer", "extra": 1})
    body = ToolEnvelope.failure("WaitFor", error).model_dump(mode="json")
    assert json.loads(json.dumps(body)) == body
    assert body["error"]["kind"] == "invalid_tool_input"
    assert body["error"]["recovery_hint"]


# ------------------------------------------------------------------ schemas

SCHEMA_FIELDS: dict[ToolName, tuple[set[str], set[str]]] = {
    ToolName.CREATE_WORK_ITEM: (
        {"objective", "plan_status", "plan", "todo_list", "acceptance"},
        {"objective"},
    ),
    ToolName.UPDATE_WORK_ITEM: (
        {
            "work_item_id",
            "objective",
            "plan_status",
            "todo_list",
            "blocked_by",
            "recheck_after_ms",
            "acceptance",
        },
        {"work_item_id"},
    ),
    ToolName.PICK_WORK_ITEM: ({"work_item_id", "reason", "clear_blocker"}, {"work_item_id"}),
    ToolName.GET_WORK_ITEM: (
        {"work_item_id", "include_todo_list", "include_process_notes"},
        {"work_item_id"},
    ),
    ToolName.LIST_WORK_ITEMS: ({"filter", "limit", "include_todo_list"}, set()),
    ToolName.COMPLETE_WORK_ITEM: ({"work_item_id"}, {"work_item_id"}),
    ToolName.CANCEL_WORK_ITEM: ({"work_item_id", "reason"}, {"work_item_id", "reason"}),
    ToolName.WAIT_FOR: (
        {
            "reason",
            "wake",
            "work_item_id",
            "resource",
            "recheck_after_ms",
            "wake_after_ms",
            "deadline_s",
        },
        {"reason", "wake"},
    ),
    ToolName.DELEGATE_WORK_ITEM: (
        {"to_agent", "objective", "reason", "plan", "todo_list", "acceptance", "deadline_s"},
        {"to_agent", "objective", "reason"},
    ),
    ToolName.CANCEL_DELEGATION: ({"delegation_id", "reason"}, {"delegation_id", "reason"}),
    ToolName.SUBMIT_VERDICT: (
        {"work_item_id", "passed", "reason"},
        {"work_item_id", "passed", "reason"},
    ),
    ToolName.SPAWN_AGENT: (
        {
            "kind",
            "initial_message",
            "agent_id",
            "preset",
            "template",
            "workspace_mode",
            "keep",
        },
        {"kind"},
    ),
    ToolName.SEND_MESSAGE: ({"to_agent", "text", "reply_to"}, {"to_agent", "text"}),
}


@pytest.mark.parametrize("tool", list(ToolName))
def test_tool_schema_is_a_closed_json_object(tool: ToolName) -> None:
    schema = tool_schema(tool)
    assert json.loads(json.dumps(schema)) == schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    for name, definition in schema.get("$defs", {}).items():
        if definition.get("type") == "object":
            assert definition["additionalProperties"] is False, name


@pytest.mark.parametrize("tool", list(ToolName))
def test_tool_schema_lists_the_contract_fields(tool: ToolName) -> None:
    schema = tool_schema(tool)
    fields, required = SCHEMA_FIELDS[tool]
    assert set(schema["properties"]) == fields
    assert set(schema.get("required", [])) == required


def test_todo_items_in_the_schema_reject_unknown_fields() -> None:
    schema = tool_schema(ToolName.CREATE_WORK_ITEM)
    assert schema["$defs"]["TodoInput"]["additionalProperties"] is False


# ------------------------------------------------------------------ warnings


def test_unfinished_todos_warning_counts_both_kinds() -> None:
    warning = unfinished_todos_warning(["Review", "Publish"], ["Draft"])
    assert warning.kind is WarningKind.UNFINISHED_TODOS
    assert (warning.pending_count, warning.in_progress_count) == (2, 1)
    assert warning.sample is not None
    assert sorted(warning.sample) == ["Draft", "Publish", "Review"]


def test_unfinished_todos_sample_holds_at_most_five() -> None:
    pending = [f"pending {i}" for i in range(6)]
    in_progress = [f"in progress {i}" for i in range(4)]
    warning = unfinished_todos_warning(pending, in_progress)
    assert (warning.pending_count, warning.in_progress_count) == (6, 4)
    assert warning.sample is not None
    assert len(warning.sample) == 5
    assert set(warning.sample) <= set(pending + in_progress)


def test_unfinished_todos_warning_is_plain_json_with_contract_keys() -> None:
    body = unfinished_todos_warning(["a"], []).model_dump(mode="json", exclude_none=True)
    assert body["kind"] == "unfinished_todos"
    assert {"pending_count", "in_progress_count", "sample"} <= set(body)
    assert body["sample"] == ["a"]


@pytest.mark.parametrize(
    ("build", "kind"),
    [
        (missing_completion_report_warning, "missing_completion_report"),
        (missing_pick_reason_warning, "missing_pick_reason_for_runnable_focus_switch"),
    ],
)
def test_warning_builders_use_the_contract_kinds(
    build: Callable[[], ToolWarning], kind: str
) -> None:
    warning = build()
    assert warning.kind.value == kind
    assert warning.message
