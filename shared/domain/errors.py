"""Tool error kinds, warnings and the domain error the ledger raises on a rejected command."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from shared.domain.base import Record


class ErrorKind(StrEnum):
    INVALID_TOOL_INPUT = "invalid_tool_input"
    WORK_ITEM_NOT_FOUND = "work_item_not_found"
    WORK_ITEM_ACCESS_DENIED = "work_item_access_denied"
    WORK_ITEM_NOT_OPEN = "work_item_not_open"
    AGENT_PAUSED = "agent_paused"
    AGENT_RETIRED = "agent_retired"
    NO_CURRENT_WORK_ITEM = "no_current_work_item"
    WAIT_NOT_FOUND = "wait_not_found"
    ACCESS_DENIED = "access_denied"
    STALE_TURN = "stale_turn"
    UNKNOWN_TOOL = "unknown_tool"
    LOOP_CHANGE_REFUSED = "loop_change_refused"
    ACCEPTANCE_FAILED = "acceptance_failed"
    WORK_ITEM_VERIFYING = "work_item_verifying"
    WORK_ITEM_NOT_VERIFYING = "work_item_not_verifying"
    AGENT_NOT_FOUND = "agent_not_found"
    DELEGATION_CYCLE = "delegation_cycle"
    DELEGATION_TOO_DEEP = "delegation_too_deep"
    DELEGATION_NOT_FOUND = "delegation_not_found"
    OUTCOME_UNKNOWN = "outcome_unknown"
    PATTERN_TOO_SLOW = "pattern_too_slow"
    ARCHIVE_MISMATCH = "archive_mismatch"
    WEBHOOK_NOT_ALLOWED = "webhook_not_allowed"
    PRESET_NOT_FOUND = "preset_not_found"
    AGENT_EXISTS = "agent_exists"
    TOO_MANY_CHILDREN = "too_many_children"
    PEER_NOT_ALLOWED = "peer_not_allowed"


HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_TOOL_INPUT: 400,
    ErrorKind.WORK_ITEM_ACCESS_DENIED: 403,
    ErrorKind.ACCESS_DENIED: 403,
    ErrorKind.WORK_ITEM_NOT_FOUND: 404,
    ErrorKind.WAIT_NOT_FOUND: 404,
    ErrorKind.UNKNOWN_TOOL: 404,
    ErrorKind.WORK_ITEM_NOT_OPEN: 409,
    ErrorKind.AGENT_PAUSED: 409,
    ErrorKind.AGENT_RETIRED: 409,
    ErrorKind.NO_CURRENT_WORK_ITEM: 409,
    ErrorKind.STALE_TURN: 409,
    ErrorKind.LOOP_CHANGE_REFUSED: 409,
    ErrorKind.ACCEPTANCE_FAILED: 409,
    ErrorKind.WORK_ITEM_VERIFYING: 409,
    ErrorKind.WORK_ITEM_NOT_VERIFYING: 409,
    ErrorKind.AGENT_NOT_FOUND: 404,
    ErrorKind.DELEGATION_NOT_FOUND: 404,
    ErrorKind.DELEGATION_CYCLE: 409,
    ErrorKind.DELEGATION_TOO_DEEP: 409,
    ErrorKind.OUTCOME_UNKNOWN: 409,
    ErrorKind.PATTERN_TOO_SLOW: 400,
    ErrorKind.ARCHIVE_MISMATCH: 409,
    ErrorKind.WEBHOOK_NOT_ALLOWED: 400,
    ErrorKind.PRESET_NOT_FOUND: 404,
    ErrorKind.AGENT_EXISTS: 409,
    ErrorKind.TOO_MANY_CHILDREN: 409,
    ErrorKind.PEER_NOT_ALLOWED: 403,
}

_DEFAULT_HINTS: dict[ErrorKind, str] = {
    ErrorKind.INVALID_TOOL_INPUT: "Fix the listed fields and call the tool again.",
    ErrorKind.WORK_ITEM_NOT_FOUND: "Call ListWorkItems to see the ids that exist.",
    ErrorKind.WORK_ITEM_ACCESS_DENIED: "Use a WorkItem owned by this agent (ListWorkItems).",
    ErrorKind.WORK_ITEM_NOT_OPEN: "The item is completed; create a new WorkItem for new work.",
    ErrorKind.AGENT_PAUSED: "The operator paused this agent; wait until it is resumed.",
    ErrorKind.AGENT_RETIRED: "This agent was retired; create an agent with another id.",
    ErrorKind.NO_CURRENT_WORK_ITEM: "Pick a WorkItem first (PickWorkItem) or name one.",
    ErrorKind.WAIT_NOT_FOUND: "No active wait matches; check the id or the task id.",
    ErrorKind.ACCESS_DENIED: "Use a path inside the agent's home, such as the plan file path.",
    ErrorKind.STALE_TURN: "This turn was superseded; stop and let the newer turn continue.",
    ErrorKind.UNKNOWN_TOOL: "Use one of the tools listed in the system prompt.",
    ErrorKind.LOOP_CHANGE_REFUSED: "Leave `loop` out, or create a new agent with the other loop.",
    ErrorKind.ACCEPTANCE_FAILED: "Fix what the reasons name, then call CompleteWorkItem again.",
    ErrorKind.WORK_ITEM_VERIFYING: "Its acceptance checks are running: wait for the verdict "
    "(a failure comes back as an inbox message), or cancel the item.",
    ErrorKind.WORK_ITEM_NOT_VERIFYING: "Only an item whose checks are running takes a verdict; "
    "read the item's verification to see its state.",
    ErrorKind.AGENT_NOT_FOUND: "Delegate to an agent that exists (GET /v1/agents lists them).",
    ErrorKind.DELEGATION_NOT_FOUND: "Name a running delegation of this agent (its dlg_ id).",
    ErrorKind.DELEGATION_CYCLE: "Delegate to an agent outside this chain, or do the work here.",
    ErrorKind.DELEGATION_TOO_DEEP: "The chain is at its depth limit: do this part yourself.",
    ErrorKind.OUTCOME_UNKNOWN: "A call with this command id started but its answer was never "
    "recorded: read the file to see whether the change is there, then, if it is not, call "
    "again with a new command id.",
    ErrorKind.PATTERN_TOO_SLOW: "Simplify the pattern or search a narrower path.",
    ErrorKind.ARCHIVE_MISMATCH: "Read what is still hot and write the segment again from it.",
    ErrorKind.WEBHOOK_NOT_ALLOWED: "Use a webhook URL on the deployment's allow list "
    "(LONGRUN_WEBHOOK_ALLOW), or ask the operator to set the check.",
    ErrorKind.PRESET_NOT_FOUND: "Name a preset the operator stored (GET /v1/presets), a "
    "template agent, or neither (the child gets your spec).",
    ErrorKind.AGENT_EXISTS: "Choose another agent_id, or leave it out for a private child.",
    ErrorKind.TOO_MANY_CHILDREN: "Wait for a running child's result before spawning another.",
    ErrorKind.PEER_NOT_ALLOWED: "Message your parent, your children or the peers your spec lists.",
}


class ToolErrorBody(Record):
    kind: ErrorKind
    message: str
    details: dict[str, Any] | None = None
    recovery_hint: str | None = None


class DomainError(Exception):
    """A command or tool call that is final and rejected: acknowledge it and report why."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        recovery_hint: str | None = None,
    ) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.details = details
        self.recovery_hint = recovery_hint if recovery_hint is not None else _DEFAULT_HINTS[kind]

    def body(self) -> ToolErrorBody:
        return ToolErrorBody(
            kind=self.kind,
            message=self.message,
            details=self.details,
            recovery_hint=self.recovery_hint,
        )


class WarningKind(StrEnum):
    MISSING_PICK_REASON = "missing_pick_reason_for_runnable_focus_switch"
    MISSING_COMPLETION_REPORT = "missing_completion_report"
    UNFINISHED_TODOS = "unfinished_todos"
    LIMIT_CLAMPED = "limit_clamped"


class ToolWarning(Record):
    """A warning on a successful call. Extra facts (counts, samples) ride in typed fields."""

    kind: WarningKind
    message: str
    pending_count: int | None = None
    in_progress_count: int | None = None
    sample: tuple[str, ...] | None = None
    requested: int | None = None
    applied: int | None = None


def unfinished_todos_warning(pending: list[str], in_progress: list[str]) -> ToolWarning:
    return ToolWarning(
        kind=WarningKind.UNFINISHED_TODOS,
        message=(
            f"Completed with {len(pending)} pending and {len(in_progress)} in-progress todos."
        ),
        pending_count=len(pending),
        in_progress_count=len(in_progress),
        sample=tuple((in_progress + pending)[:5]),
    )


def missing_completion_report_warning() -> ToolWarning:
    return ToolWarning(
        kind=WarningKind.MISSING_COMPLETION_REPORT,
        message=(
            "Completed without a report: write the operator-facing report as text in the same "
            "round as CompleteWorkItem."
        ),
    )


def missing_pick_reason_warning() -> ToolWarning:
    return ToolWarning(
        kind=WarningKind.MISSING_PICK_REASON,
        message="Switched away from a runnable current WorkItem without a reason; give one.",
    )
