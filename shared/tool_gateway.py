"""Tool calls as a library: validate arguments, prepare what the ledger must not do itself
(mint WorkItem ids and plan files, mint capability tokens), send the command, and answer with
the tool envelope. Used by the turn executor and by the HTTP tools route.

The read tools (GetWorkItem, ListWorkItems) change nothing, so they are answered from the read
model (one Redis round trip) rather than sent through the ledger (a stream hop each way and a
share of the ledger's CPU). Callers await each write's reply before their next call, so a read
still sees every write the caller made before it."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from shared.agent_home import ensure_plan_file
from shared.domain.capability import TOKEN_SEPARATOR, hash_token
from shared.domain.errors import DomainError
from shared.domain.records import WakeKind
from shared.domain.tools import (
    CompleteWorkItemInput,
    CreateWorkItemInput,
    GetWorkItemInput,
    ListWorkItemsInput,
    ToolEnvelope,
    ToolInput,
    ToolName,
    WaitForInput,
    parse_tool_input,
)
from shared.ledger_client import LedgerClient
from shared.store.readmodel import ReadModel
from shared.wire.commands import (
    TOOL_COMMANDS,
    CompleteWorkItem,
    CreateWorkItem,
    ToolCommand,
    WaitFor,
)
from shared.wire.replies import CommandOutcome, CommandReply


def new_capability_token(agent_id: str) -> str:
    return f"{agent_id}{TOKEN_SEPARATOR}{secrets.token_urlsafe(24)}"


class ToolGateway:
    def __init__(
        self,
        client: LedgerClient,
        *,
        agent_home: Path,
        callback_base_url: str,
        clock: Callable[[], datetime],
        new_id: Callable[[str], str],
    ) -> None:
        self.client = client
        self.reads = ReadModel(client.redis, client.names)
        self.agent_home = agent_home
        self.callback_base_url = callback_base_url.rstrip("/")
        self.clock = clock
        self.new_id = new_id

    async def call(
        self,
        agent_id: str,
        tool_name: str,
        raw_args: object,
        *,
        command_id: str,
        turn_id: str | None = None,
        fencing_token: int | None = None,
        report_text: str | None = None,
    ) -> ToolEnvelope:
        try:
            args, warnings = parse_tool_input(tool_name, raw_args)
        except DomainError as err:
            return ToolEnvelope.failure(tool_name, err)
        if isinstance(args, (GetWorkItemInput, ListWorkItemsInput)):
            return await self._read(agent_id, tool_name, args, warnings)
        common = {
            "command_id": command_id,
            "agent_id": agent_id,
            "turn_id": turn_id,
            "fencing_token": fencing_token,
        }
        command, token = self._command(args, common, report_text)
        reply = await self.client.send(command)
        envelope = _envelope(tool_name, reply, warnings)
        if (
            token is not None
            and envelope.result is not None
            and reply.outcome is CommandOutcome.APPLIED
        ):
            envelope = _with_callback_url(
                envelope, f"{self.callback_base_url}/v1/callbacks/{token}"
            )
        return envelope

    async def _read(
        self,
        agent_id: str,
        tool_name: str,
        args: GetWorkItemInput | ListWorkItemsInput,
        warnings: list[Any],
    ) -> ToolEnvelope:
        try:
            if isinstance(args, GetWorkItemInput):
                result = await self.reads.get_work_item(agent_id, args)
            else:
                result = await self.reads.list_work_items(agent_id, args)
        except DomainError as err:
            return ToolEnvelope(
                tool_name=tool_name, status="error", error=err.body(), warnings=tuple(warnings)
            )
        # Plain JSON values, as a ledger reply would carry them (the views hold JSON fragments).
        return ToolEnvelope.success(tool_name, orjson.loads(orjson.dumps(result)), warnings)

    def _command(
        self, args: ToolInput, common: dict[str, Any], report_text: str | None
    ) -> tuple[ToolCommand, str | None]:
        tool = ToolName(type(args).__name__.removesuffix("Input"))
        if isinstance(args, CreateWorkItemInput):
            work_item_id = self.new_id("wi_")
            artifact = ensure_plan_file(
                self.agent_home, common["agent_id"], work_item_id, args.plan, self.clock()
            )
            return CreateWorkItem(
                args=args, work_item_id=work_item_id, plan_artifact=artifact, **common
            ), None
        if isinstance(args, WaitForInput) and args.wake is WakeKind.EXTERNAL:
            token = new_capability_token(common["agent_id"])
            return WaitFor(args=args, capability_token_hash=hash_token(token), **common), token
        if isinstance(args, CompleteWorkItemInput):
            return CompleteWorkItem(args=args, report_text=report_text, **common), None
        return TOOL_COMMANDS[tool](args=args, **common), None


def _envelope(tool_name: str, reply: CommandReply, warnings: list[Any]) -> ToolEnvelope:
    if reply.error is not None:
        return ToolEnvelope(
            tool_name=tool_name, status="error", error=reply.error, warnings=tuple(warnings)
        )
    return ToolEnvelope.success(tool_name, reply.result or {}, [*warnings, *reply.warnings])


def _with_callback_url(envelope: ToolEnvelope, url: str) -> ToolEnvelope:
    """The capability token is shown once, here; the ledger keeps only its hash."""
    result = dict(envelope.result or {})
    result["wait"] = {**result.get("wait", {}), "callback_url": url}
    return envelope.model_copy(update={"result": result})
