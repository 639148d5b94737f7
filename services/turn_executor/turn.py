"""One running turn's state: its identity, its conversation, the focus it follows and what it
owes the ledger at the end; plus the one log line a finished turn leaves."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog

from services.turn_executor.guard import ContextGuard, PromptParts
from services.turn_executor.lease import LeaseKeeper
from services.turn_executor.mcp_client import McpToolset
from services.turn_executor.model_calls import TurnModel
from shared.domain.specs import AgentSpec
from shared.wire import commands as c
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick

log = structlog.get_logger("longrun.executor")


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
    tool_calls: int = 0
    """Calls answered that no `tool_call_started` records (see FinishTurn.tool_calls)."""
    tool_errors: list[str] = field(default_factory=list)
    recorded_calls: int = 0
    """External calls recorded as started (`tool_call_started`) in this turn."""
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
    remembered: set[str] = field(default_factory=set)
    """WorkItems whose notes and trace this turn has shown (once per turn per item)."""
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
        if role in ("assistant", "tool"):
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
