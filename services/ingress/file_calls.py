"""File tool calls from outside a turn (the HTTP tools route and the MCP server): run in the
agent's home, applied once per command id, and followed by a refresh of every plan file they
changed, so the WorkItem views describe the plan as it now is.

A call that changes files and carries a command id is claimed through the ledger first
(`BeginFileToolCall`, deduplicated by command id like every WorkItem tool), and its envelope is
kept as the reply of `FinishFileToolCall`; a repeat finds the claim taken and answers with the
kept envelope. The tool runs between the two records, so if the ingress dies there the outcome
is unknown: a repeat answers `outcome_unknown` rather than risk applying the change twice."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from services.ingress.deps import Ingress
from shared.agent_home import plan_descriptor, plan_work_item_id
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.tools import ToolEnvelope
from shared.file_tools import MUTATING, FileToolName, changed_paths
from shared.wire import commands as c
from shared.wire.codec import decode
from shared.wire.replies import CommandOutcome, CommandReply

FIRST_ANSWER_WAIT_S = 5.0
"""How long a repeat waits for the first call's answer: a file tool takes milliseconds, so a
first call still unanswered after this died between its two records."""
_POLL_S = 0.05


def finish_command_id(command_id: str) -> str:
    """The finishing record's command id: derived, so any retry finds the same one, and of fixed
    length whatever the caller's id is."""
    return "file-result:" + hashlib.sha256(command_id.encode()).hexdigest()[:40]


async def run_file_call(
    ingress: Ingress,
    agent_id: str,
    name: FileToolName,
    args: dict[str, object],
    command_id: str | None,
) -> ToolEnvelope:
    """The call's envelope, the first one again for a repeated command id."""
    if not (await ingress.reads.agent_spec(agent_id)).spec.tools.files:
        return _turned_off(name)
    if name not in MUTATING:  # a read changes nothing: it is simply read again
        return await _run(ingress, agent_id, name, args)
    key = command_id or ingress.new_id("cmd_")
    if command_id is not None:
        claim = c.BeginFileToolCall(command_id=key, agent_id=agent_id, tool=name.value)
        claimed = await ingress.client.send(claim)
        if claimed.outcome is CommandOutcome.DUPLICATE:
            return await _first_answer(ingress, agent_id, name, key)
        if claimed.error is not None:
            return ToolEnvelope(tool_name=name.value, status="error", error=claimed.error)
    envelope = await _run(ingress, agent_id, name, args)
    records: list[c.Command] = _plan_refreshes(ingress, agent_id, name, envelope, key)
    if command_id is not None:
        kept = envelope.model_dump(mode="json")
        records.insert(
            0,
            c.FinishFileToolCall(
                command_id=finish_command_id(key),
                agent_id=agent_id,
                started_command_id=key,
                envelope=kept,
            ),
        )
    if records:
        await ingress.client.send_all(records)
    return envelope


def _turned_off(name: FileToolName) -> ToolEnvelope:
    off = DomainError(
        ErrorKind.UNKNOWN_TOOL,
        f"{name.value} is not one of this agent's tools: its spec turns file tools off",
        recovery_hint="Set tools.files to true in the agent's spec to use the file tools.",
    )
    return ToolEnvelope.failure(name.value, off)


async def _run(
    ingress: Ingress, agent_id: str, name: FileToolName, args: dict[str, object]
) -> ToolEnvelope:
    return await ingress.files.run(agent_id, name, args)


def _plan_refreshes(
    ingress: Ingress, agent_id: str, name: FileToolName, envelope: ToolEnvelope, key: str
) -> list[c.Command]:
    """RefreshPlanArtifact for each plan file the call wrote (out of turn: no fencing token;
    the ledger refuses one for an item no longer open, which changes nothing)."""
    home = ingress.gateway.agent_home
    refreshes: list[c.Command] = []
    for path in changed_paths(name, envelope):
        item_id = plan_work_item_id(home, agent_id, Path(path))
        if item_id is None:
            continue
        try:
            artifact = plan_descriptor(home, agent_id, item_id, ingress.clock())
        except FileNotFoundError:
            continue
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        refreshes.append(
            c.RefreshPlanArtifact(
                command_id=f"plan:{digest}:{item_id}:{artifact.sha256[:16]}",
                agent_id=agent_id,
                work_item_id=item_id,
                artifact=artifact,
            )
        )
    return refreshes


async def _first_answer(
    ingress: Ingress, agent_id: str, name: FileToolName, command_id: str
) -> ToolEnvelope:
    """The envelope the first call with this command id answered; `outcome_unknown` if it
    never recorded one (it died while the tool ran)."""
    key = ingress.reads.n.idempotency(agent_id, finish_command_id(command_id))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIRST_ANSWER_WAIT_S
    while True:
        stored = await ingress.reads.redis.get(key)
        if stored is not None:
            reply = decode(stored).body
            if isinstance(reply, CommandReply) and reply.result is not None:
                return ToolEnvelope.model_validate(reply.result["envelope"])
        if loop.time() > deadline:
            break
        await asyncio.sleep(_POLL_S)
    unknown = DomainError(
        ErrorKind.OUTCOME_UNKNOWN,
        f"{name.value} with command id {command_id!r} was started but its answer was never "
        "recorded: the change may or may not have been made",
    )
    return ToolEnvelope.failure(name.value, unknown)
