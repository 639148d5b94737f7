"""Tool calls as a library: validate arguments, prepare what the ledger must not do itself
(mint WorkItem ids and plan files, mint capability tokens), send the command, and answer with
the tool envelope. Used by the turn executor and by the HTTP tools route.

The read tools (GetWorkItem, ListWorkItems) change nothing, so they are answered from the read
model (one Redis round trip) rather than sent through the ledger (a stream hop each way and a
share of the ledger's CPU). A read is answered only once every write called before it has been
answered, so it sees them all.

`call_all` takes one model round's calls: the writes between two reads go out in one round trip.
The ledger applies an agent's commands one by one in stream order, each with its own checks, so
the results are those of calling one at a time; a round of n writes costs one wait, not n."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from shared.agent_home import ensure_plan_file, share_home
from shared.domain.capability import TOKEN_SEPARATOR, hash_token
from shared.domain.delegation import child_agent_id
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import WakeKind
from shared.domain.specs import AgentSpec
from shared.domain.tools import (
    CompleteWorkItemInput,
    CreateWorkItemInput,
    DelegateWorkItemInput,
    GetWorkItemInput,
    ListWorkItemsInput,
    SendMessageInput,
    SpawnAgentInput,
    SpawnKind,
    ToolEnvelope,
    ToolInput,
    ToolName,
    WaitForInput,
    WorkspaceMode,
    parse_tool_input,
)
from shared.ledger_client import LedgerClient
from shared.store.presets import get_preset
from shared.store.readmodel import ReadModel
from shared.wire.commands import (
    TOOL_COMMANDS,
    CompleteWorkItem,
    CreateWorkItem,
    DelegateWorkItem,
    SendMessage,
    SpawnAgent,
    ToolCommand,
    WaitFor,
)
from shared.wire.replies import CommandOutcome, CommandReply


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call as the model made it: the arguments are validated by the gateway."""

    tool_name: str
    raw_args: object
    command_id: str
    report_text: str | None = None
    """The same round's assistant text, for CompleteWorkItem (docs/contract.md §5)."""


@dataclass(frozen=True, slots=True)
class _Write:
    tool_name: str
    command: ToolCommand
    token: str | None
    """A new external wait's capability token, shown once in the envelope."""
    warnings: list[Any]


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
        archive: Path | None = None,
    ) -> None:
        """`archive`: LONGRUN_ARCHIVE_DIR, where GetWorkItem finds archived WorkItems."""
        self.client = client
        self.reads = ReadModel(client.redis, client.names, archive)
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
        by_operator: bool = False,
    ) -> ToolEnvelope:
        (envelope,) = await self.call_all(
            agent_id,
            [Call(tool_name, raw_args, command_id, report_text)],
            turn_id=turn_id,
            fencing_token=fencing_token,
            by_operator=by_operator,
        )
        return envelope

    async def call_all(
        self,
        agent_id: str,
        calls: Sequence[Call],
        *,
        turn_id: str | None = None,
        fencing_token: int | None = None,
        by_operator: bool = False,
    ) -> list[ToolEnvelope]:
        """The calls' envelopes, in order; each run of writes is sent in one round trip.
        `by_operator`: called with the operator's token (acceptance checks it adds are the
        operator's)."""
        envelopes: list[ToolEnvelope | None] = [None] * len(calls)
        writes: list[tuple[int, _Write]] = []
        for i, call in enumerate(calls):
            try:
                args, warnings = parse_tool_input(call.tool_name, call.raw_args)
            except DomainError as err:
                envelopes[i] = ToolEnvelope.failure(call.tool_name, err)
                continue
            if isinstance(args, (GetWorkItemInput, ListWorkItemsInput)):
                await self._send(writes, envelopes)
                writes = []
                envelopes[i] = await self._read(agent_id, call.tool_name, args, warnings)
                continue
            if isinstance(args, DelegateWorkItemInput) and not await self._exists(args.to_agent):
                # Refused before a plan file is made in the home of an agent that is not there.
                missing = DomainError(ErrorKind.AGENT_NOT_FOUND, f"no agent {args.to_agent!r}")
                envelopes[i] = ToolEnvelope.failure(call.tool_name, missing)
                continue
            common = {
                "command_id": call.command_id,
                "agent_id": agent_id,
                "turn_id": turn_id,
                "fencing_token": fencing_token,
                "by_operator": by_operator,
            }
            if isinstance(args, SpawnAgentInput):
                try:
                    spawn = await self._spawn(args, common)
                except DomainError as err:
                    envelopes[i] = ToolEnvelope.failure(call.tool_name, err)
                    continue
                writes.append((i, _Write(call.tool_name, spawn, None, warnings)))
                continue
            command, token = self._command(args, common, call.report_text)
            writes.append((i, _Write(call.tool_name, command, token, warnings)))
        await self._send(writes, envelopes)
        answered = [envelope for envelope in envelopes if envelope is not None]
        assert len(answered) == len(calls)  # every call is answered locally or by a reply
        return answered

    async def _spawn(self, args: SpawnAgentInput, common: dict[str, Any]) -> SpawnAgent:
        """What the ledger must not do itself for SpawnAgent: resolve the child's spec, mint its
        id (a private child's unless given), its delegation id and tokens, and link a shared
        home. Refused here (nothing written) for an unknown preset or template and a taken id;
        the ledger checks the id again, with the limits."""
        parent = common["agent_id"]
        private = args.kind is SpawnKind.PRIVATE_CHILD
        child = args.agent_id
        if child is None:
            assert args.initial_message is not None  # the input requires it for a private child
            child = child_agent_id(parent, args.initial_message, secrets.token_hex(2))
        if child == parent or await self._exists(child):
            raise DomainError(
                ErrorKind.AGENT_EXISTS, f"agent {child!r} exists", details={"agent_id": child}
            )
        spec = await self._child_spec(parent, args)
        if args.workspace_mode is WorkspaceMode.SHARED:
            await asyncio.to_thread(share_home, self.agent_home, parent, child)
        return SpawnAgent(
            args=args,
            child_agent_id=child,
            delegation_id=self.new_id("dlg_") if private else None,
            child_spec=spec,
            agent_token_hash=hash_token(new_capability_token(child)),
            callback_token_hash=hash_token(new_capability_token(child)),
            **common,
        )

    async def _child_spec(self, parent: str, args: SpawnAgentInput) -> AgentSpec:
        if args.preset is not None:
            found = await get_preset(self.client.redis, self.client.names, args.preset)
            if found is None:
                raise DomainError(ErrorKind.PRESET_NOT_FOUND, f"no preset {args.preset!r}")
            return found.spec
        if args.template is not None:
            if not await self._exists(args.template):
                raise DomainError(
                    ErrorKind.AGENT_NOT_FOUND, f"no agent {args.template!r} to copy the spec of"
                )
            return (await self.reads.agent_spec(args.template)).spec
        own = (await self.reads.agent_spec(parent)).spec
        return own.model_copy(update={"labels": {}})

    async def _exists(self, agent_id: str) -> bool:
        names = self.client.names
        return bool(await self.client.redis.hexists(names.agent(agent_id), "doc"))

    async def _send(
        self, writes: list[tuple[int, _Write]], envelopes: list[ToolEnvelope | None]
    ) -> None:
        if not writes:
            return
        replies = await self.client.send_all([write.command for _, write in writes])
        for (i, write), reply in zip(writes, replies, strict=True):
            envelope = _envelope(write.tool_name, reply, write.warnings)
            if (
                write.token is not None
                and envelope.result is not None
                and reply.outcome is CommandOutcome.APPLIED
            ):
                envelope = _with_callback_url(
                    envelope, f"{self.callback_base_url}/v1/callbacks/{write.token}"
                )
            envelopes[i] = envelope

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
        if isinstance(args, SendMessageInput):
            return SendMessage(args=args, message_id=self.new_id("msg_"), **common), None
        if isinstance(args, CompleteWorkItemInput):
            return CompleteWorkItem(args=args, report_text=report_text, **common), None
        if isinstance(args, DelegateWorkItemInput):
            # The child's plan file goes in the child's home; the ledger creates its WorkItem.
            child_id = self.new_id("wi_")
            artifact = ensure_plan_file(
                self.agent_home, args.to_agent, child_id, args.plan, self.clock()
            )
            command = DelegateWorkItem(
                args=args,
                delegation_id=self.new_id("dlg_"),
                child_work_item_id=child_id,
                child_plan_artifact=artifact,
                **common,
            )
            return command, None
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
