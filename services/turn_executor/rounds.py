"""One round's tool calls, in order: arguments parsed, WorkItem tools sent to the ledger with the
turn's fencing token (consecutive ones in one round trip), file tools run in the agent's home;
plus the plan refreshes and the transcript a turn owes the ledger. Focus is followed from the
views each result carries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from services.turn_executor.external_calls import ARGUMENTS_SHOWN, canonical_arguments
from services.turn_executor.guard import ContextGuard, PromptParts
from services.turn_executor.lease import LeaseKeeper
from services.turn_executor.mcp_client import McpClients, McpTool, McpToolset, envelope_of
from services.turn_executor.model_calls import TurnModel
from services.turn_executor.promotion import (
    assistant_message,
    focus_after,
    parse_arguments,
    promoted,
    report_text_for,
    tool_message,
)
from services.turn_executor.providers import ProviderRound, ToolCall
from shared.agent_home import plan_descriptor, plan_work_item_id
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.specs import AgentSpec
from shared.domain.tools import ToolEnvelope, ToolName
from shared.file_tools import FileToolName, changed_paths, run_file_tool
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.tool_gateway import Call, ToolGateway
from shared.wire import commands as c
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.executor")

FILE_TOOLS = frozenset(FileToolName)
KNOWN_TOOLS = frozenset({*ToolName, *FileToolName})


class TurnSuperseded(Exception):
    """The ledger answered `stale_turn`: a newer turn holds the agent; stop without a word."""


@dataclass
class Turn:
    """One running turn: its identity, its conversation and what it must write at the end."""

    tick: Tick
    turn_id: str
    token: int
    keeper: LeaseKeeper
    messages: list[dict[str, Any]]
    focused: str | None
    inbox: int
    plans: dict[str, str]
    """sha256 of each plan file as the ledger last described it, by WorkItem id."""
    subject: str | None = None
    spec: AgentSpec = field(default_factory=AgentSpec)
    """The agent's spec as read when the turn opened: a change lands at the next turn."""
    interrupted: str | None = None
    """The turn id of an attempt that died before finishing, which this turn retries."""
    reviews: bool = False
    """The agent held an open review item when the turn opened: SubmitVerdict is offered."""
    mcp: McpToolset = field(default_factory=McpToolset)
    """The MCP tools this turn offers (listed when it opened) and the servers it could not."""
    dirty: set[str] = field(default_factory=set)
    entries: list[tuple[str | None, c.TranscriptEntry]] = field(default_factory=list)
    rounds: int = 0
    flushes: int = 0
    model_seconds: float = 0.0
    ledger_seconds: float = 0.0
    """Time spent waiting on ledger replies: the part of the overhead the ledger owns."""
    begun: asyncio.Task[list[CommandReply]] | None = None
    """BeginTurn's reply while it travels beside the first model round."""
    model: TurnModel | None = None
    parts: PromptParts = field(default_factory=PromptParts)
    """Where the prompt's parts that may give way to the context guard sit."""
    guard: ContextGuard | None = None
    """Keeps every request of the turn within the model's context window."""
    trim: c.TrimTranscript | None = None
    """The transcript trim this turn sends with its closing commands, if one is due."""
    answered: list[str] = field(default_factory=list)
    """The inbox message ids the turn was shown, at its start and between rounds."""
    reply: str | None = None
    """The last round's text, unless it was promoted to a completion report."""
    own: list[tuple[str | None, c.TranscriptEntry]] = field(default_factory=list)
    """The turn's own entries (assistant and tool) still shown in its request, with their
    binding: what a compaction between rounds reads (`entries` is sent away as it goes)."""

    def __post_init__(self) -> None:
        self.subject = self.subject or self.focused

    @property
    def agent_id(self) -> str:
        return self.tick.agent_id

    def note(self, role: str, content: str, **extra: Any) -> None:
        """A transcript entry, bound to the WorkItem current when it happened."""
        entry = c.TranscriptEntry.model_validate(
            {"role": role, "content": content, "round": self.rounds, **extra}
        )
        self.entries.append((self.focused, entry))
        if role != "user":
            self.own.append((self.focused, entry))


def log_turn(
    turn: Turn, outcome: c.TurnOutcome, seconds: float, *, note: str | None, error: str | None
) -> None:
    """One line per turn: where its time went (model, ledger, the rest is the executor's)."""
    log.info(
        "turn_finished",
        agent_id=turn.agent_id,
        work_item_id=turn.subject,
        turn_id=turn.turn_id,
        command_id=f"{turn.turn_id}:finish",
        tick_kind=turn.tick.kind.value,
        outcome=outcome.value,
        rounds=turn.rounds,
        seconds=round(seconds, 6),
        model_seconds=round(turn.model_seconds, 6),
        overhead_ms=round((seconds - turn.model_seconds) * 1000, 3),
        ledger_ms=round(turn.ledger_seconds * 1000, 3),
        note=note,
        error=error,
    )


class ToolRunner:
    def __init__(
        self,
        *,
        client: LedgerClient,
        gateway: ToolGateway,
        metrics: Metrics,
        agent_home: Path,
        clock: Callable[[], datetime],
        mcp: McpClients | None = None,
    ) -> None:
        self.mcp = mcp or McpClients(metrics, ttl_s=300.0)
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
                parsed.append(parse_arguments(call.name, call.arguments))
            except DomainError as err:
                parsed.append(err)
        valid = [(x.name, a) for x, a in zip(calls, parsed, strict=True) if isinstance(a, dict)]
        report = report_text_for(answer.text, valid, turn.focused)
        envelopes: list[ToolEnvelope] = []
        ledger: list[tuple[str, ToolCall, dict[str, Any]]] = []
        for index, (call, args) in enumerate(zip(calls, parsed, strict=True)):
            command_id = f"{turn.turn_id}:{turn.rounds}:{index}"
            local_tool = call.name in FILE_TOOLS or call.name in turn.mcp.tools
            if isinstance(args, dict) and not local_tool:
                ledger.append((command_id, call, args))
                continue
            envelopes += await self._through_ledger(turn, ledger, report)
            ledger = []
            turn.keeper.check()
            if isinstance(args, DomainError):
                local = ToolEnvelope.failure(call.name, args)
            elif call.name in turn.mcp.tools:
                local = await self._external(turn, turn.mcp.tools[call.name], args, command_id)
            else:
                local = self._file_tool(turn, FileToolName(call.name), args)
            envelopes.append(self._answered(turn, command_id, call, local))
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
        self, turn: Turn, command_id: str, call: ToolCall, envelope: ToolEnvelope
    ) -> ToolEnvelope:
        """Take one call's answer in call order: transcript, focus, metrics; a `stale_turn`
        ends the turn here, as if the calls after it had not been made."""
        turn.note("assistant", call.arguments, tool_name=call.name, tool_call_id=call.id)
        if envelope.error is not None and envelope.error.kind is ErrorKind.STALE_TURN:
            raise TurnSuperseded(envelope.error.message)
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
        await self._record(
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
            )
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

    async def _record(self, command: c.Command) -> None:
        reply = await self.client.send(command)
        if reply.error is not None and reply.error.kind is ErrorKind.STALE_TURN:
            raise TurnSuperseded(reply.error.message)
        if reply.error is not None:
            raise RuntimeError(f"the ledger refused {command.message_type}: {reply.error.message}")

    def _file_tool(self, turn: Turn, name: FileToolName, args: dict[str, Any]) -> ToolEnvelope:
        home = self.agent_home
        if not turn.spec.tools.files:
            refused = DomainError(ErrorKind.UNKNOWN_TOOL, f"{name} is not one of your tools")
            return ToolEnvelope.failure(name.value, refused)
        envelope = run_file_tool(home, turn.agent_id, name, args)
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
        """RefreshPlanArtifact for each plan file this turn changed since the ledger last
        described it; `refreshed` records the answers."""
        refreshes = []
        for item_id in sorted(turn.dirty):
            try:
                artifact = plan_descriptor(self.agent_home, turn.agent_id, item_id, self.clock())
            except FileNotFoundError:
                continue
            if artifact.sha256 == turn.plans.get(item_id):
                continue
            refreshes.append(
                c.RefreshPlanArtifact(
                    command_id=f"{turn.turn_id}:plan:{item_id}:{artifact.sha256[:16]}",
                    agent_id=turn.agent_id,
                    work_item_id=item_id,
                    artifact=artifact,
                    fencing_token=turn.token,
                )
            )
        turn.dirty.clear()
        return refreshes

    @staticmethod
    def refreshed(
        turn: Turn, refreshes: list[c.RefreshPlanArtifact], replies: list[CommandReply]
    ) -> None:
        """Take the ledger's answers to `plan_refreshes`; raises TurnSuperseded on stale_turn."""
        for refresh, reply in zip(refreshes, replies, strict=True):
            if reply.error is not None and reply.error.kind is ErrorKind.STALE_TURN:
                raise TurnSuperseded(reply.error.message)
            turn.plans[refresh.work_item_id] = refresh.artifact.sha256

    async def refresh_plans(self, turn: Turn) -> None:
        """Tell the ledger about plan files this turn changed (RefreshPlanArtifact)."""
        refreshes = self.plan_refreshes(turn)
        if not refreshes:
            return
        started = time.perf_counter()
        replies = await self.client.send_all(refreshes)
        turn.ledger_seconds += time.perf_counter() - started
        self.refreshed(turn, refreshes, replies)

    def transcript(self, turn: Turn) -> list[c.RecordTranscript]:
        """The entries noted so far as commands, one RecordTranscript per run of one binding.

        Published without awaiting the reply: the ledger reads an agent's commands in order
        from one partition stream, and the transcript is evidence, not a decision input.
        """
        groups: list[tuple[str | None, list[c.TranscriptEntry]]] = []
        for bound, entry in turn.entries:
            if groups and groups[-1][0] == bound:
                groups[-1][1].append(entry)
            else:
                groups.append((bound, [entry]))
        turn.entries = []
        turn.flushes += 1
        return [
            c.RecordTranscript(
                command_id=f"{turn.turn_id}:transcript:{turn.flushes}:{n}",
                agent_id=turn.agent_id,
                turn_id=turn.turn_id,
                fencing_token=turn.token,
                work_item_id=bound,
                entries=tuple(entries),
            )
            for n, (bound, entries) in enumerate(groups)
        ]

    async def record(self, turn: Turn) -> None:
        """Publish the transcript noted so far (see `transcript`)."""
        await self.client.publish(*self.transcript(turn))
