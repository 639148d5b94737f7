"""One round's tool calls, in order: arguments parsed, WorkItem tools sent to the ledger with the
turn's fencing token (consecutive ones in one round trip), file tools run in the agent's home,
MCP tools called between two fenced records; focus is followed from the views each result
carries, and the plan refreshes and transcript the turn owes are sent when due."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from services.turn_executor.command_calls import CommandCalls
from services.turn_executor.external_calls import ARGUMENTS_SHOWN, canonical_arguments
from services.turn_executor.mcp_client import McpClients, McpTool, envelope_of
from services.turn_executor.promotion import (
    MAX_ARGUMENT_BYTES,
    assistant_message,
    focus_after,
    parse_arguments,
    promoted,
    report_text_for,
    tool_message,
)
from services.turn_executor.providers import ProviderRound, ToolCall
from services.turn_executor.run_command import RUN_COMMAND, RUN_COMMAND_ARGUMENT_BYTES
from services.turn_executor.sandbox import Unavailable
from services.turn_executor.turn import Turn, TurnSuperseded
from services.turn_executor.turn_writes import plan_refreshes, refreshed, transcript
from shared.agent_home import plan_work_item_id
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.tools import ToolEnvelope, ToolName
from shared.file_runner import FileTools
from shared.file_tools import FileToolName, changed_paths
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.tool_gateway import Call, ToolGateway
from shared.wire import commands as c

log = structlog.get_logger("longrun.executor")

FILE_TOOLS = frozenset(FileToolName)
LOCAL_TOOLS = frozenset({*FileToolName, RUN_COMMAND})
"""Tools the executor runs itself (in the agent's home, or its sandbox), not the ledger."""
KNOWN_TOOLS = frozenset({*ToolName, *FileToolName, RUN_COMMAND})
TOOL_ERROR_CHARS = 300
"""A tool error named in FinishTurn is cut to this many characters."""


def shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ToolRunner:
    """Runs a turn's tool calls with the executor's ledger client, tool gateway, MCP clients
    and agent home."""

    def __init__(
        self,
        *,
        client: LedgerClient,
        gateway: ToolGateway,
        metrics: Metrics,
        agent_home: Path,
        clock: Callable[[], datetime],
        mcp: McpClients | None = None,
        files: FileTools | None = None,
        commands: CommandCalls | None = None,
        max_argument_bytes: int = MAX_ARGUMENT_BYTES,
    ) -> None:
        self.commands = commands or CommandCalls(
            Unavailable("no sandbox configured"), agent_home, max_timeout_s=600
        )
        """RunCommand calls, in the sandbox (if one works)."""
        self.mcp = mcp or McpClients(metrics, ttl_s=300.0)
        self.files = files or FileTools(agent_home)
        """Runs the file tools off the event loop (SearchFiles within its time limit)."""
        self.max_argument_bytes = max_argument_bytes
        self.client = client
        self.gateway = gateway
        self.metrics = metrics
        self.agent_home = agent_home
        self.clock = clock

    async def execute(self, turn: Turn, answer: ProviderRound) -> list[ToolEnvelope]:
        calls = answer.tool_calls
        turn.messages.append(
            assistant_message(answer.text, [(x.id, x.name, x.arguments) for x in calls])
        )
        if answer.text:
            turn.note("assistant", answer.text)
        parsed: list[dict[str, Any] | DomainError] = []
        for call in calls:
            try:
                limit = self.max_argument_bytes
                if call.name == RUN_COMMAND:  # so an oversized field is named (RunCommandInput)
                    limit = max(limit, RUN_COMMAND_ARGUMENT_BYTES)
                parsed.append(parse_arguments(call.name, call.arguments, limit))
            except DomainError as err:
                parsed.append(err)
        valid = [(x.name, a) for x, a in zip(calls, parsed, strict=True) if isinstance(a, dict)]
        report = report_text_for(answer.text, valid, turn.focused)
        envelopes: list[ToolEnvelope] = []
        ledger: list[tuple[str, ToolCall, dict[str, Any]]] = []
        for index, (call, args) in enumerate(zip(calls, parsed, strict=True)):
            command_id = f"{turn.turn_id}:{turn.rounds}:{index}"
            local_tool = call.name in LOCAL_TOOLS or call.name in turn.mcp.tools
            if isinstance(args, dict) and not local_tool:
                ledger.append((command_id, call, args))
                continue
            envelopes += await self._through_ledger(turn, ledger, report)
            ledger = []
            turn.keeper.check()
            recorded = turn.recorded_calls
            if isinstance(args, DomainError):
                local = ToolEnvelope.failure(call.name, args)
            elif call.name in turn.mcp.tools:
                local = await self._external(turn, turn.mcp.tools[call.name], args, command_id)
            elif call.name == RUN_COMMAND:
                local = await self.commands.call(
                    turn, args, command_id, lambda command: self._record_in(turn, command)
                )
            else:
                local = await self._file_tool(turn, FileToolName(call.name), args)
            external = turn.recorded_calls > recorded
            envelopes.append(self._answered(turn, command_id, call, local, external=external))
        envelopes += await self._through_ledger(turn, ledger, report)
        turn.reply = None if promoted(report, envelopes) else answer.text.strip() or None
        return envelopes

    async def _through_ledger(
        self, turn: Turn, calls: list[tuple[str, ToolCall, dict[str, Any]]], report: str | None
    ) -> list[ToolEnvelope]:
        """Consecutive calls for the ledger in one round trip (`ToolGateway.call_all`)."""
        if not calls:
            return []
        turn.keeper.check()
        if any(call.name == ToolName.COMPLETE_WORK_ITEM for _, call, _ in calls):
            await self.refresh_plans(turn)  # a completed item's plan can no longer be refreshed
        started = time.perf_counter()
        try:
            answers = await self.gateway.call_all(
                turn.agent_id,
                [Call(call.name, args, command_id, report) for command_id, call, args in calls],
                turn_id=turn.turn_id,
                fencing_token=turn.token,
            )
        finally:
            turn.ledger_seconds += time.perf_counter() - started
        return [
            self._answered(turn, command_id, call, envelope)
            for (command_id, call, _), envelope in zip(calls, answers, strict=True)
        ]

    def _answered(
        self,
        turn: Turn,
        command_id: str,
        call: ToolCall,
        envelope: ToolEnvelope,
        *,
        external: bool = False,
    ) -> ToolEnvelope:
        """Take one call's answer in call order: transcript, focus, metrics, the turn's tally of
        calls the history does not record on their own (`external`: it does); a `stale_turn`
        ends the turn here, as if the calls after it had not been made."""
        turn.note("assistant", call.arguments, tool_name=call.name, tool_call_id=call.id)
        if envelope.error is not None and envelope.error.kind is ErrorKind.STALE_TURN:
            raise TurnSuperseded(envelope.error.message)
        if not external:
            turn.tool_calls += 1
            if envelope.error is not None:
                line = f"{call.name}: {envelope.error.kind.value}: {envelope.error.message}"
                turn.tool_errors.append(shortened(line, TOOL_ERROR_CHARS))
        # One serialization serves both the model's next round and the transcript.
        answer = tool_message(call.id, envelope)
        turn.messages.append(answer)
        turn.note("tool", answer["content"], tool_name=call.name, tool_call_id=call.id)
        self._observe(turn, envelope)
        tool = call.name if call.name in KNOWN_TOOLS else "unknown"
        tool = "mcp" if call.name in turn.mcp.tools else tool
        self.metrics.tool_calls.labels(tool=tool, status=envelope.status).inc()
        log.debug(
            "tool_call",
            agent_id=turn.agent_id,
            turn_id=turn.turn_id,
            command_id=command_id,
            work_item_id=turn.focused,
            tool=call.name,
            status=envelope.status,
        )
        return envelope

    async def _external(
        self, turn: Turn, tool: McpTool, args: dict[str, Any], command_id: str
    ) -> ToolEnvelope:
        """One MCP call between two fenced records: started before, finished after. Never
        retried here: if the turn dies in between, the next turn is told the outcome is unknown."""
        call_id = f"call_{command_id}"
        arguments, digest = canonical_arguments(args)
        await self._record_in(
            turn,
            c.RecordToolCallStart(
                command_id=f"{command_id}:started",
                agent_id=turn.agent_id,
                turn_id=turn.turn_id,
                fencing_token=turn.token,
                call_id=call_id,
                server=tool.server.name,
                tool=tool.tool,
                args_sha256=digest,
                arguments=arguments[:ARGUMENTS_SHOWN],
            ),
        )
        answer = await self.mcp.call(tool, args, call_id)
        await self._record(
            c.RecordToolCallFinish(
                command_id=f"{command_id}:finished",
                agent_id=turn.agent_id,
                turn_id=turn.turn_id,
                fencing_token=turn.token,
                call_id=call_id,
                outcome=answer.outcome,
                result_chars=answer.result_chars,
                truncated=answer.truncated,
            )
        )
        return envelope_of(tool, answer)

    async def record_unknown(self, turn: Turn, call_ids: list[str]) -> None:
        """Mark calls an earlier turn started and never finished as `unknown` in the history."""
        for call_id in call_ids:
            await self._record(
                c.RecordToolCallFinish(
                    command_id=f"{turn.turn_id}:unknown:{call_id}",
                    agent_id=turn.agent_id,
                    turn_id=turn.turn_id,
                    fencing_token=turn.token,
                    call_id=call_id,
                    outcome="unknown",
                )
            )

    async def _record_in(self, turn: Turn, command: c.Command) -> None:
        """`_record`, counting the external calls the turn records as started."""
        if isinstance(command, c.RecordToolCallStart):
            turn.recorded_calls += 1
        await self._record(command)

    async def _record(self, command: c.Command) -> None:
        reply = await self.client.send(command)
        if reply.error is not None and reply.error.kind is ErrorKind.STALE_TURN:
            raise TurnSuperseded(reply.error.message)
        if reply.error is not None:
            raise RuntimeError(f"the ledger refused {command.message_type}: {reply.error.message}")

    async def _file_tool(
        self, turn: Turn, name: FileToolName, args: dict[str, Any]
    ) -> ToolEnvelope:
        home = self.agent_home
        if not turn.spec.tools.files:
            refused = DomainError(ErrorKind.UNKNOWN_TOOL, f"{name} is not one of your tools")
            return ToolEnvelope.failure(name.value, refused)
        envelope = await self.files.run(turn.agent_id, name, args)
        for path in changed_paths(name, envelope):
            item_id = plan_work_item_id(home, turn.agent_id, path)
            if item_id is not None:
                turn.dirty.add(item_id)
        return envelope

    def _observe(self, turn: Turn, envelope: ToolEnvelope) -> None:
        """Follow focus and the plan descriptors the ledger reports back."""
        turn.focused = focus_after(envelope, turn.focused)
        turn.subject = turn.focused or turn.subject
        result = envelope.result or {}
        for key in ("work_item", "current_work_item"):
            view = result.get(key)
            if isinstance(view, dict) and isinstance(view.get("plan_artifact"), dict):
                turn.plans[view["id"]] = view["plan_artifact"].get("sha256", "")
        if result.get("work_item") and envelope.tool_name == ToolName.COMPLETE_WORK_ITEM:
            turn.subject = result["work_item"].get("id", turn.subject)

    def plan_refreshes(self, turn: Turn) -> list[c.RefreshPlanArtifact]:
        """RefreshPlanArtifact for each plan file this turn changed (see turn_writes)."""
        return plan_refreshes(turn, self.agent_home, self.clock)

    async def refresh_plans(self, turn: Turn) -> None:
        """Tell the ledger about plan files this turn changed (RefreshPlanArtifact)."""
        refreshes = self.plan_refreshes(turn)
        if not refreshes:
            return
        started = time.perf_counter()
        replies = await self.client.send_all(refreshes)
        turn.ledger_seconds += time.perf_counter() - started
        refreshed(turn, refreshes, replies)

    async def record(self, turn: Turn) -> None:
        """Publish the transcript noted so far (see `transcript`)."""
        await self.client.publish(*transcript(turn))
