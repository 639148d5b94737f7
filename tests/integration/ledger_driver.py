"""A small driver for ledger scenarios: sends commands through the real LedgerService on a
real Redis and reads back through the read model."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from services.ledger.service import LedgerService
from shared.agent_home import describe_plan
from shared.domain.records import PlanArtifact
from shared.domain.tools import TOOL_INPUTS, GetWorkItemInput, ToolName
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome, CommandReply

_counter = itertools.count(1)


def new_ledger(
    redis: AnyRedis, names: Names, *, inline_replies: bool | None = None
) -> LedgerService:
    """An in-process ledger with its own metrics registry, the wall clock and real ids."""
    return LedgerService(
        redis,
        names,
        build_metrics(CollectorRegistry()),
        clock=utc_now,
        new_id=new_id,
        wake_limit=25,
        inline_replies=inline_replies,
    )


def token_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def plan_artifact(work_item_id: str) -> PlanArtifact:
    rel = f"work-items/{work_item_id}/plan.md"
    return describe_plan(f"/home/agent/{rel}", rel, b"", datetime.now(UTC))  # type: ignore[arg-type]


class Driver:
    """One agent's view of the ledger: `await d.tool("PickWorkItem", work_item_id=...)`."""

    def __init__(self, ledger: LedgerService, reads: ReadModel, agent_id: str = "agent-1") -> None:
        self.ledger = ledger
        self.reads = reads
        self.agent_id = agent_id

    def cid(self) -> str:
        return f"cmd-{next(_counter)}"

    async def send(self, command: c.Command) -> CommandReply:
        (applied,) = await self.ledger.apply_batch([command])
        return applied.reply

    async def ensure(self, loop: str = "builtin") -> CommandReply:
        return await self.send(
            c.EnsureAgent(
                command_id=self.cid(),
                agent_id=self.agent_id,
                loop=loop,
                agent_token_hash=token_hash(f"agent-token-{self.agent_id}"),
                callback_token_hash=token_hash(f"callback-{self.agent_id}"),
            )
        )

    async def tool(
        self,
        name: str,
        *,
        report_text: str | None = None,
        fencing_token: int | None = None,
        command_id: str | None = None,
        capability_token_hash: str | None = None,
        **args: Any,
    ) -> CommandReply:
        tool = ToolName(name)
        parsed = TOOL_INPUTS[tool].model_validate(args)
        common: dict[str, Any] = {
            "command_id": command_id or self.cid(),
            "agent_id": self.agent_id,
            "fencing_token": fencing_token,
        }
        if tool is ToolName.CREATE_WORK_ITEM:
            wid = new_id("wi_")
            cmd: c.Command = c.CreateWorkItem(
                args=parsed, work_item_id=wid, plan_artifact=plan_artifact(wid), **common
            )
        elif tool is ToolName.COMPLETE_WORK_ITEM:
            cmd = c.CompleteWorkItem(args=parsed, report_text=report_text, **common)
        elif tool is ToolName.WAIT_FOR:
            cmd = c.WaitFor(args=parsed, capability_token_hash=capability_token_hash, **common)
        else:
            cmd = c.TOOL_COMMANDS[tool](args=parsed, **common)
        return await self.send(cmd)

    async def create(self, objective: str = "objective", **args: Any) -> str:
        reply = await self.tool("CreateWorkItem", objective=objective, **args)
        assert reply.outcome is CommandOutcome.APPLIED, reply
        assert reply.result is not None
        return str(reply.result["work_item"]["id"])

    async def view(self, work_item_id: str) -> dict[str, Any]:
        result = await self.reads.get_work_item(
            self.agent_id, GetWorkItemInput(work_item_id=work_item_id, include_todo_list=True)
        )
        return dict(result["work_item"])

    async def history_types(self) -> list[str]:
        return [e["type"] for e in await self.reads.history(self.agent_id, limit=1000)]
