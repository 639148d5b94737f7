"""One typed method per tool (snake case), written once: `Agent` answers each with the
envelope, `AsyncAgent` with a coroutine of it. Leave an argument out to leave it unset; where a
tool reads `null` as "clear" (UpdateWorkItem's `blocked_by`), pass None."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, Literal, TypeVar

from longrun.client._calls import UNSET, args

T = TypeVar("T")
Filter = Literal[
    "all", "open", "completed", "current", "queued", "blocked", "waiting_for_operator", "runnable"
]
WakeKind = Literal["operator_input", "task_result", "external", "timer", "system"]
PlanStatus = Literal["draft", "ready", "needs_input"]


class ToolMethods(ABC, Generic[T]):
    @abstractmethod
    def call_tool(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        *,
        assistant_text: str | None = None,
        command_id: str | None = None,
    ) -> T:
        """Any tool by name (what a model's tool call names): the envelope on success, a
        `ToolError` (with the error's `kind`) otherwise. `command_id` makes a retry of the
        same call (after a crash of the caller, say) apply once; a fresh one is sent if none
        is given, so the client's own retries are safe either way."""
        raise NotImplementedError

    # ---- WorkItems
    def create_work_item(
        self,
        objective: str,
        *,
        plan_status: PlanStatus = UNSET,
        plan: str = UNSET,
        todo_list: Sequence[dict[str, Any]] = UNSET,
        acceptance: Sequence[dict[str, Any]] = UNSET,
        command_id: str | None = None,
    ) -> T:
        """CreateWorkItem: a new open WorkItem (never changes focus) → `{work_item}`."""
        given = args(
            objective=objective,
            plan_status=plan_status,
            plan=plan,
            todo_list=todo_list,
            acceptance=acceptance,
        )
        return self.call_tool("CreateWorkItem", given, command_id=command_id)

    def update_work_item(
        self,
        work_item_id: str,
        *,
        objective: str = UNSET,
        plan_status: PlanStatus = UNSET,
        todo_list: Sequence[dict[str, Any]] = UNSET,
        blocked_by: str | None = UNSET,
        recheck_after_ms: int = UNSET,
        acceptance: Sequence[dict[str, Any]] = UNSET,
        command_id: str | None = None,
    ) -> T:
        """UpdateWorkItem: `todo_list` replaces the list; `blocked_by=None` clears the blocker."""
        given = args(
            work_item_id=work_item_id,
            objective=objective,
            plan_status=plan_status,
            todo_list=todo_list,
            blocked_by=blocked_by,
            recheck_after_ms=recheck_after_ms,
            acceptance=acceptance,
        )
        return self.call_tool("UpdateWorkItem", given, command_id=command_id)

    def pick_work_item(
        self,
        work_item_id: str,
        *,
        reason: str = UNSET,
        clear_blocker: bool = UNSET,
        command_id: str | None = None,
    ) -> T:
        """PickWorkItem: focus an open WorkItem (a blocked one for inspection)."""
        given = args(work_item_id=work_item_id, reason=reason, clear_blocker=clear_blocker)
        return self.call_tool("PickWorkItem", given, command_id=command_id)

    def get_work_item(
        self,
        work_item_id: str,
        *,
        include_todo_list: bool = UNSET,
        include_process_notes: bool = UNSET,
    ) -> T:
        """GetWorkItem → `{current_work_item_id, work_item}`."""
        given = args(
            work_item_id=work_item_id,
            include_todo_list=include_todo_list,
            include_process_notes=include_process_notes,
        )
        return self.call_tool("GetWorkItem", given)

    def list_work_items(
        self,
        *,
        filter: Filter = UNSET,
        limit: int = UNSET,
        include_todo_list: bool = UNSET,
    ) -> T:
        """ListWorkItems → `{filter, returned, total_matching, work_items}` in ranking order."""
        given = args(filter=filter, limit=limit, include_todo_list=include_todo_list)
        return self.call_tool("ListWorkItems", given)

    def complete_work_item(
        self, work_item_id: str, *, report: str | None = None, command_id: str | None = None
    ) -> T:
        """CompleteWorkItem; `report` is the operator-facing completion report (the route's
        `assistant_text`): without one, completion warns `missing_completion_report`."""
        return self.call_tool(
            "CompleteWorkItem",
            {"work_item_id": work_item_id},
            assistant_text=report,
            command_id=command_id,
        )

    def cancel_work_item(
        self, work_item_id: str, reason: str, *, command_id: str | None = None
    ) -> T:
        """CancelWorkItem: drop an open WorkItem on purpose (outcome cancelled)."""
        given = {"work_item_id": work_item_id, "reason": reason}
        return self.call_tool("CancelWorkItem", given, command_id=command_id)

    def wait_for(
        self,
        reason: str,
        wake: WakeKind,
        *,
        work_item_id: str = UNSET,
        resource: str = UNSET,
        recheck_after_ms: int = UNSET,
        wake_after_ms: int = UNSET,
        command_id: str | None = None,
    ) -> T:
        """WaitFor → `{wait, work_item?}`; an `external` wait's `wait.callback_url` is the
        capability URL a callback (`callback()`) triggers it with."""
        given = args(
            reason=reason,
            wake=wake,
            work_item_id=work_item_id,
            resource=resource,
            recheck_after_ms=recheck_after_ms,
            wake_after_ms=wake_after_ms,
        )
        return self.call_tool("WaitFor", given, command_id=command_id)

    def delegate_work_item(
        self,
        to_agent: str,
        objective: str,
        reason: str,
        *,
        plan: str = UNSET,
        todo_list: Sequence[dict[str, Any]] = UNSET,
        acceptance: Sequence[dict[str, Any]] = UNSET,
        command_id: str | None = None,
    ) -> T:
        """DelegateWorkItem: hand work to another agent; the current WorkItem waits for it."""
        given = args(
            to_agent=to_agent,
            objective=objective,
            reason=reason,
            plan=plan,
            todo_list=todo_list,
            acceptance=acceptance,
        )
        return self.call_tool("DelegateWorkItem", given, command_id=command_id)

    def cancel_delegation(
        self, delegation_id: str, reason: str, *, command_id: str | None = None
    ) -> T:
        """CancelDelegation: cancel a running delegation of this agent."""
        given = {"delegation_id": delegation_id, "reason": reason}
        return self.call_tool("CancelDelegation", given, command_id=command_id)

    def submit_verdict(
        self, work_item_id: str, passed: bool, reason: str, *, command_id: str | None = None
    ) -> T:
        """SubmitVerdict: on a review item, pass or fail the reviewed report."""
        given = {"work_item_id": work_item_id, "passed": passed, "reason": reason}
        return self.call_tool("SubmitVerdict", given, command_id=command_id)

    # ---- files in the agent's home
    def read_file(self, path: str, *, offset: int = UNSET, limit: int = UNSET) -> T:
        return self.call_tool("ReadFile", args(path=path, offset=offset, limit=limit))

    def write_file(self, path: str, content: str, *, command_id: str | None = None) -> T:
        given = {"path": path, "content": content}
        return self.call_tool("WriteFile", given, command_id=command_id)

    def edit_file(
        self, path: str, old_text: str, new_text: str, *, command_id: str | None = None
    ) -> T:
        given = {"path": path, "old_text": old_text, "new_text": new_text}
        return self.call_tool("EditFile", given, command_id=command_id)

    def list_files(self, path: str = UNSET, *, recursive: bool = UNSET) -> T:
        return self.call_tool("ListFiles", args(path=path, recursive=recursive))

    def search_files(self, pattern: str, *, path: str = UNSET, max_results: int = UNSET) -> T:
        given = args(pattern=pattern, path=path, max_results=max_results)
        return self.call_tool("SearchFiles", given)

    def apply_patch(self, patch: str, *, command_id: str | None = None) -> T:
        return self.call_tool("ApplyPatch", {"patch": patch}, command_id=command_id)
