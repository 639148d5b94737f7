"""What reads return: the WorkItemView and the results of GetWorkItem and ListWorkItems."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.domain.base import Record
from shared.domain.records import TodoItem, WaitingIntent, WorkItem
from shared.domain.views import (
    CandidateClass,
    ListFilter,
    Readiness,
    SchedulingState,
    active_waits_of,
    candidate_class,
    current_todo,
    matches_filter,
    rank,
    readiness_of,
    scheduling_state,
)


class WorkItemView(Record):
    """The record plus its derived facts; `todo_list` is present only when asked for."""

    work_item: WorkItem
    scheduling_state: SchedulingState
    readiness: Readiness
    candidate_class: CandidateClass
    is_current: bool
    current_todo: TodoItem | None
    active_waits: tuple[WaitingIntent, ...]
    include_todo_list: bool = False

    def to_json(self) -> dict[str, Any]:
        current = self.work_item.id if self.is_current else None
        return work_item_view_json(
            self.work_item, self.active_waits, current, include_todo_list=self.include_todo_list
        )


def work_item_view(
    item: WorkItem,
    waits: Sequence[WaitingIntent],
    current_work_item_id: str | None,
    *,
    include_todo_list: bool = False,
) -> WorkItemView:
    mine = active_waits_of(item, waits)
    state = scheduling_state(item, mine)
    return WorkItemView(
        work_item=item,
        scheduling_state=state,
        readiness=readiness_of(state),
        candidate_class=candidate_class(item, mine, current_work_item_id),
        is_current=item.id == current_work_item_id,
        current_todo=current_todo(item),
        active_waits=mine,
        include_todo_list=include_todo_list,
    )


_DUMPED: dict[int, tuple[WorkItem, dict[str, Any]]] = {}
_DUMPED_MAX = 1024


def work_item_json(item: WorkItem) -> dict[str, Any]:
    """`item.model_dump(mode="json")` as a fresh top-level dict (nested values are shared: do
    not mutate them). The last dumps are remembered by identity, which is safe because records
    are frozen: the ledger dumps a written item for its reply and again for its record."""
    hit = _DUMPED.get(id(item))
    if hit is not None and hit[0] is item:
        return dict(hit[1])
    body = item.model_dump(mode="json")
    if len(_DUMPED) >= _DUMPED_MAX:
        _DUMPED.clear()
    _DUMPED[id(item)] = (item, body)
    return dict(body)


def work_item_view_json(
    item: WorkItem,
    waits: Sequence[WaitingIntent],
    current_work_item_id: str | None,
    *,
    include_todo_list: bool = False,
    include_process_notes: bool = False,
) -> dict[str, Any]:
    """`work_item_view(...).to_json()` without building the view model (the ledger answers
    every WorkItem tool with one; its parts are already validated records). Process notes are
    left out unless asked for: they are the largest part of a WorkItem and every tool answer
    carries a view."""
    mine = active_waits_of(item, waits)
    state = scheduling_state(item, mine)
    todo = current_todo(item)
    body = work_item_json(item)
    if not include_todo_list:
        body.pop("todo_list")
    if not include_process_notes:
        body.pop("process_notes", None)
    body.update(
        scheduling_state=state.value,
        readiness=readiness_of(state).value,
        candidate_class=candidate_class(item, mine, current_work_item_id).value,
        is_current=item.id == current_work_item_id,
        current_todo=todo.model_dump(mode="json") if todo else None,
        active_waits=[w.model_dump(mode="json") for w in mine],
    )
    return body


def get_result(
    item: WorkItem,
    waits: Sequence[WaitingIntent],
    current_work_item_id: str | None,
    *,
    include_todo_list: bool,
    include_process_notes: bool = False,
) -> dict[str, Any]:
    view = work_item_view_json(
        item,
        waits,
        current_work_item_id,
        include_todo_list=include_todo_list,
        include_process_notes=include_process_notes,
    )
    return {"current_work_item_id": current_work_item_id, "work_item": view}


def list_result(
    items: Sequence[WorkItem],
    waits: Sequence[WaitingIntent],
    current_work_item_id: str | None,
    *,
    wanted: ListFilter,
    limit: int,
    include_todo_list: bool,
) -> dict[str, Any]:
    """ListWorkItems over a full set of items (the read model narrows the set through indexes)."""
    matching = [
        e
        for e in rank(items, waits, current_work_item_id)
        if matches_filter(e, wanted, current_work_item_id)
    ]
    views = [
        work_item_view_json(
            e.item, waits, current_work_item_id, include_todo_list=include_todo_list
        )
        for e in matching[:limit]
    ]
    return {
        "filter": wanted.value,
        "returned": len(views),
        "total_matching": len(matching),
        "work_items": views,
    }
