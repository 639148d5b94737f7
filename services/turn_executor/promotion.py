"""Per-round rules of a turn: completion-report promotion (docs/contract.md §5), round caps,
tool-call arguments, focus tracking and the messages a round adds to the conversation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

import orjson

from shared.domain.base import Record
from shared.domain.errors import (
    DomainError,
    ErrorKind,
    ToolWarning,
    WarningKind,
    missing_completion_report_warning,
)
from shared.domain.tools import TURN_ENDING_TOOLS, ToolEnvelope, ToolName
from shared.wire.commands import TurnOutcome

MAX_ARGUMENT_BYTES = 262_144
"""A tool call's arguments at most (LONGRUN_MAX_BODY_BYTES, the HTTP tools route's bound)."""

RoundCall = tuple[str, Mapping[str, object]]
"""One tool call of a round as the model emitted it: (tool name, parsed arguments)."""


class PromotionOutcome(StrEnum):
    PROMOTED = "promoted"
    NO_COMPLETION = "no_completion"
    MULTIPLE_COMPLETIONS = "multiple_completions"
    NOT_FOCUSED = "not_focused"
    MISSING_REPORT = "missing_report"


class Promotion(Record):
    """What the round's text became: the WorkItem's report, or nothing (and why)."""

    outcome: PromotionOutcome
    work_item_id: str | None = None
    text: str | None = None
    warnings: tuple[ToolWarning, ...] = ()
    """The completion's own warnings (unfinished todos) travel with the report they qualify."""

    @property
    def promoted(self) -> bool:
        return self.outcome is PromotionOutcome.PROMOTED


def completed_work_item_id(envelope: ToolEnvelope) -> str | None:
    """The id a successful CompleteWorkItem completed; None for anything else."""
    if envelope.tool_name != ToolName.COMPLETE_WORK_ITEM or envelope.status != "success":
        return None
    work_item = (envelope.result or {}).get("work_item")
    item_id = work_item.get("id") if isinstance(work_item, dict) else None
    return item_id if isinstance(item_id, str) else None


def promotion(
    round_text: str, tool_results: Sequence[ToolEnvelope], focused_work_item_id: str | None
) -> Promotion:
    """Promote only non-empty text with exactly one successful completion of the focused item.

    Several completions in one round promote nothing: the text's owner would be a guess.
    """
    done = [(e, i) for e in tool_results if (i := completed_work_item_id(e)) is not None]
    if not done:
        return Promotion(outcome=PromotionOutcome.NO_COMPLETION)
    if len(done) > 1:
        return Promotion(outcome=PromotionOutcome.MULTIPLE_COMPLETIONS)
    envelope, item_id = done[0]
    text = round_text.strip()
    if not text:
        warnings = envelope.warnings
        if all(w.kind is not WarningKind.MISSING_COMPLETION_REPORT for w in warnings):
            warnings = (*warnings, missing_completion_report_warning())
        return Promotion(
            outcome=PromotionOutcome.MISSING_REPORT, work_item_id=item_id, warnings=warnings
        )
    if item_id != focused_work_item_id:
        return Promotion(outcome=PromotionOutcome.NOT_FOCUSED, work_item_id=item_id)
    return Promotion(
        outcome=PromotionOutcome.PROMOTED,
        work_item_id=item_id,
        text=text,
        warnings=envelope.warnings,
    )


def report_text_for(
    round_text: str, calls: Sequence[RoundCall], focused_work_item_id: str | None
) -> str | None:
    """The report text to send with the round's CompleteWorkItem command, before it runs.

    The ledger promotes it atomically with the completion, only if the completion succeeds;
    so the text is offered only when the round holds exactly one CompleteWorkItem call, for
    the focused item, and the text is non-empty after trimming.
    """
    completes = [args for name, args in calls if name == ToolName.COMPLETE_WORK_ITEM]
    text = round_text.strip()
    if len(completes) != 1 or not text or focused_work_item_id is None:
        return None
    target = completes[0].get("work_item_id")
    if not isinstance(target, str) or target.strip() != focused_work_item_id:
        return None
    return text


def promoted(report: str | None, tool_results: Sequence[ToolEnvelope]) -> bool:
    """Whether the round's text became a report: it was offered (`report_text_for`) with the
    round's one CompleteWorkItem call, and that call succeeded."""
    return report is not None and any(completed_work_item_id(e) for e in tool_results)


class RoundEnd(StrEnum):
    CONTINUE = "continue"
    TOOL = "tool"
    """A turn-ending tool (WaitFor, CompleteWorkItem) succeeded."""
    NO_TOOL_CALLS = "no_tool_calls"
    """The model answered without calling a tool: it has nothing more to do this turn."""
    ROUND_CAP = "round_cap"


class RoundAccount(Record):
    end: RoundEnd
    ending_tool: ToolName | None = None
    rounds_used: int

    @property
    def ends_turn(self) -> bool:
        return self.end is not RoundEnd.CONTINUE


def turn_ending_call(names: Sequence[str]) -> ToolName | None:
    """The first call in the round that would end the turn if it succeeds."""
    for name in names:
        if name in TURN_ENDING_TOOLS:
            return ToolName(name)
    return None


def account_round(
    tool_results: Sequence[ToolEnvelope],
    rounds_used: int,
    *,
    max_rounds: int,
) -> RoundAccount:
    """Whether the turn goes on after a round (`rounds_used` counts this one); `max_rounds` is
    the agent spec's `limits.max_rounds_per_turn` under the executor's ceiling.

    A turn-ending tool ends the turn only if it succeeded: a rejected WaitFor did not wait,
    so the model gets another round to fix its input, within the cap.
    """
    succeeded = [e.tool_name for e in tool_results if e.status == "success"]
    ending = turn_ending_call(succeeded)
    if ending is not None:
        return RoundAccount(end=RoundEnd.TOOL, ending_tool=ending, rounds_used=rounds_used)
    if not tool_results:
        return RoundAccount(end=RoundEnd.NO_TOOL_CALLS, rounds_used=rounds_used)
    if rounds_used >= max_rounds:
        return RoundAccount(end=RoundEnd.ROUND_CAP, rounds_used=rounds_used)
    return RoundAccount(end=RoundEnd.CONTINUE, rounds_used=rounds_used)


def turn_outcome(account: RoundAccount) -> TurnOutcome:
    """What the turn's end says: completed or waiting by tool, else it yielded. SubmitVerdict
    completes the review item it decides."""
    if account.ending_tool in (ToolName.COMPLETE_WORK_ITEM, ToolName.SUBMIT_VERDICT):
        return TurnOutcome.COMPLETED
    if account.ending_tool in (ToolName.WAIT_FOR, ToolName.DELEGATE_WORK_ITEM):
        return TurnOutcome.WAITING
    return TurnOutcome.YIELDED


def parse_arguments(
    tool_name: str, raw: str, max_bytes: int = MAX_ARGUMENT_BYTES
) -> dict[str, Any]:
    """The call's arguments as a JSON object; malformed JSON, or more than `max_bytes` of it
    (what the HTTP tools route takes in a body), is the model's input error, which goes back
    to it as `invalid_tool_input` rather than failing the turn."""
    size = len(raw.encode()) if len(raw) * 4 > max_bytes else len(raw)
    if size > max_bytes:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"{tool_name}: arguments of {size} bytes are more than a tool call takes ({max_bytes})",
            details={"bytes": size, "max_bytes": max_bytes},
            recovery_hint="Send less in one call: split the content over several calls.",
        )
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError as exc:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"{tool_name}: arguments are not valid JSON ({exc})",
            details={"arguments": raw[:500]},
            recovery_hint="Send the arguments as one JSON object matching the tool's schema.",
        ) from None
    if not isinstance(value, dict):
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"{tool_name}: arguments must be a JSON object, got {type(value).__name__}",
        )
    return value


def focus_after(envelope: ToolEnvelope, focused: str | None) -> str | None:
    """The current WorkItem after a call, read from the views its result carries."""
    result = envelope.result or {}
    view = result.get("current_work_item") or result.get("work_item")
    if envelope.status != "success" or not isinstance(view, dict) or "is_current" not in view:
        return focused
    if view["is_current"]:
        return str(view["id"])
    return None if view.get("id") == focused else focused


def assistant_message(text: str, calls: Sequence[tuple[str, str, str]]) -> dict[str, Any]:
    """The model's round as it goes back into the conversation: text and (id, name, args)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in calls
        ]
    return message


def tool_message(call_id: str, envelope: ToolEnvelope) -> dict[str, Any]:
    content = orjson.dumps(envelope.model_dump(mode="json", exclude_none=True)).decode()
    return {"role": "tool", "tool_call_id": call_id, "content": content}
