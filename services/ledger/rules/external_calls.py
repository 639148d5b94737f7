"""External (MCP) tool calls in the history: recorded before and after each call, fenced by
the turn's token, so a call whose turn died in between is visible and never silently lost. And
file tool calls from outside a turn: claimed by command id before they run and their answer
kept after, so a repeated call is answered again, never run again."""

from __future__ import annotations

from services.ledger.rules.state import Context, Decision, LedgerState
from services.ledger.rules.turns import check_fence
from shared.wire.commands import (
    BeginFileToolCall,
    FinishFileToolCall,
    RecordToolCallFinish,
    RecordToolCallStart,
)
from shared.wire.events import ToolCallFinished, ToolCallStarted


def record_tool_call_start(state: LedgerState, cmd: RecordToolCallStart, ctx: Context) -> Decision:
    record = state.require_agent()
    check_fence(state, cmd.fencing_token)
    event = ToolCallStarted(
        agent_id=state.agent_id,
        work_item_id=record.state.current_work_item_id,
        call_id=cmd.call_id,
        server=cmd.server,
        tool=cmd.tool,
        args_sha256=cmd.args_sha256,
        arguments=cmd.arguments,
        turn_id=cmd.turn_id,
    )
    return Decision(state, (event,), {"recorded": True})


def record_tool_call_finish(
    state: LedgerState, cmd: RecordToolCallFinish, ctx: Context
) -> Decision:
    record = state.require_agent()
    check_fence(state, cmd.fencing_token)
    event = ToolCallFinished(
        agent_id=state.agent_id,
        work_item_id=record.state.current_work_item_id,
        call_id=cmd.call_id,
        outcome=cmd.outcome,
        result_chars=cmd.result_chars,
        truncated=cmd.truncated,
    )
    return Decision(state, (event,), {"recorded": True})


def begin_file_tool_call(state: LedgerState, cmd: BeginFileToolCall, ctx: Context) -> Decision:
    """The claim is the stored reply itself: a repeat of the command id is answered `duplicate`
    before this rule runs. No history event: file tool calls have none on any surface."""
    state.require_agent()
    return Decision(state, (), {"started": True})


def finish_file_tool_call(state: LedgerState, cmd: FinishFileToolCall, ctx: Context) -> Decision:
    state.require_agent()
    return Decision(state, (), {"envelope": cmd.envelope})
