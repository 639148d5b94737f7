"""What a turn owes the ledger besides its tool calls, as commands: a RefreshPlanArtifact for
each plan file it changed, and its transcript as RecordTranscript runs of one binding."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from services.turn_executor.turn import Turn, TurnSuperseded
from shared.agent_home import plan_descriptor
from shared.domain.errors import ErrorKind
from shared.wire import commands as c
from shared.wire.replies import CommandReply


def plan_refreshes(
    turn: Turn, agent_home: Path, clock: Callable[[], datetime]
) -> list[c.RefreshPlanArtifact]:
    """RefreshPlanArtifact for each plan file this turn changed since the ledger last
    described it; `refreshed` records the answers."""
    refreshes = []
    for item_id in sorted(turn.dirty):
        try:
            artifact = plan_descriptor(agent_home, turn.agent_id, item_id, clock())
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


def refreshed(
    turn: Turn, refreshes: list[c.RefreshPlanArtifact], replies: list[CommandReply]
) -> None:
    """Take the ledger's answers to `plan_refreshes`; raises TurnSuperseded on stale_turn."""
    for refresh, reply in zip(refreshes, replies, strict=True):
        if reply.error is not None and reply.error.kind is ErrorKind.STALE_TURN:
            raise TurnSuperseded(reply.error.message)
        turn.plans[refresh.work_item_id] = refresh.artifact.sha256


def transcript(turn: Turn) -> list[c.RecordTranscript]:
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
