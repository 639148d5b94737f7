"""The ledger's pure rules: `decide(state, command, ctx)` returns the next state, the events that
happened and the answer, or raises DomainError for a final rejection. No I/O, no clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.ledger.rules.acceptance import record_verdict
from services.ledger.rules.agents import ensure_agent
from services.ledger.rules.archive import commit_archive, commit_item_archive
from services.ledger.rules.control import guard, pause_agent, resume_agent, retire_agent
from services.ledger.rules.deadlines import expire_deadline
from services.ledger.rules.delegated import cancel_delegated_work_item, create_delegated_work_item
from services.ledger.rules.delegation_effects import delegation_effects
from services.ledger.rules.delegations import (
    cancel_delegation,
    delegate_work_item,
    record_delegation_result,
)
from services.ledger.rules.external_calls import (
    begin_file_tool_call,
    finish_file_tool_call,
    record_tool_call_finish,
    record_tool_call_start,
)
from services.ledger.rules.focus import put_down_work_item
from services.ledger.rules.history_head import sign_history_head
from services.ledger.rules.memory import compact_work_item, trim_transcript
from services.ledger.rules.missing_secrets import record_missing_secret
from services.ledger.rules.outcomes import cancel_work_item
from services.ledger.rules.peers import deliver_peer_message, send_message
from services.ledger.rules.posture import park_agent
from services.ledger.rules.reviews import submit_verdict
from services.ledger.rules.spawn import (
    bind_spawned,
    create_spawned_agent,
    record_delegation_bound,
    spawn_agent,
)
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from services.ledger.rules.turns import (
    begin_turn,
    check_fence,
    finish_turn,
    record_liveness_repair,
    record_transcript,
    refresh_plan_artifact,
)
from services.ledger.rules.waits import (
    append_operator_message,
    consume_recheck,
    fire_timer,
    record_callback,
    record_task_result,
    wait_for,
)
from services.ledger.rules.work_items import (
    complete_work_item,
    create_work_item,
    pick_work_item,
    update_work_item,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.wire import commands as c

__all__ = ["Context", "Decision", "LedgerState", "SideWrites", "decide"]

Rule = Callable[[LedgerState, Any, Context], Decision]

RULES: dict[type[c.Command], Rule] = {
    c.CreateWorkItem: create_work_item,
    c.UpdateWorkItem: update_work_item,
    c.PickWorkItem: pick_work_item,
    c.CompleteWorkItem: complete_work_item,
    c.CancelWorkItem: cancel_work_item,
    c.RecordVerdict: record_verdict,
    c.PutDownWorkItem: put_down_work_item,
    c.WaitFor: wait_for,
    c.EnsureAgent: ensure_agent,
    c.AppendOperatorMessage: append_operator_message,
    c.RecordCallback: record_callback,
    c.RecordTaskResult: record_task_result,
    c.FireTimer: fire_timer,
    c.ConsumeRecheck: consume_recheck,
    c.BeginTurn: begin_turn,
    c.FinishTurn: finish_turn,
    c.RefreshPlanArtifact: refresh_plan_artifact,
    c.ParkAgent: park_agent,
    c.RecordLivenessRepair: record_liveness_repair,
    c.RecordTranscript: record_transcript,
    c.RecordToolCallStart: record_tool_call_start,
    c.RecordToolCallFinish: record_tool_call_finish,
    c.BeginFileToolCall: begin_file_tool_call,
    c.FinishFileToolCall: finish_file_tool_call,
    c.DelegateWorkItem: delegate_work_item,
    c.CancelDelegation: cancel_delegation,
    c.CreateDelegatedWorkItem: create_delegated_work_item,
    c.RecordDelegationResult: record_delegation_result,
    c.CancelDelegatedWorkItem: cancel_delegated_work_item,
    c.SpawnAgent: spawn_agent,
    c.CreateSpawnedAgent: create_spawned_agent,
    c.RecordDelegationBound: record_delegation_bound,
    c.SendMessage: send_message,
    c.DeliverPeerMessage: deliver_peer_message,
    c.SignHistoryHead: sign_history_head,
    c.RecordMissingSecret: record_missing_secret,
    c.SubmitVerdict: submit_verdict,
    c.CompactWorkItem: compact_work_item,
    c.TrimTranscript: trim_transcript,
    c.CommitArchive: commit_archive,
    c.ExpireDeadline: expire_deadline,
    c.PauseAgent: pause_agent,
    c.ResumeAgent: resume_agent,
    c.RetireAgent: retire_agent,
    c.CommitItemArchive: commit_item_archive,
}


def decide(state: LedgerState, command: c.Command, ctx: Context) -> Decision:
    """Decide one write command. Reads (GetWorkItem, ListWorkItems) are answered from the read
    model by whoever asks, never by the ledger: sent here, one is rejected as unknown."""
    rule = RULES.get(type(command))
    if rule is None:
        raise DomainError(
            ErrorKind.UNKNOWN_TOOL, f"the ledger does not apply {command.message_type}"
        )
    if isinstance(command, c.ToolCommand):
        check_fence(state, command.fencing_token)
    guard(state, command)
    decision = bind_spawned(state, command, rule(state, command, ctx), ctx)
    return delegation_effects(state, command, decision, ctx)
