"""The ledger's answers to the read tools (GetWorkItem, ListWorkItems), from the read model."""

from __future__ import annotations

from shared.domain.errors import DomainError
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome, CommandReply


async def answer_read(redis: AnyRedis, names: Names, cmd: c.Command) -> CommandReply:
    """Reads change nothing, so they are answered fresh each time and never stored."""
    reads = ReadModel(redis, names)
    try:
        if isinstance(cmd, c.GetWorkItem):
            result = await reads.get_work_item(cmd.agent_id, cmd.args)
        elif isinstance(cmd, c.ListWorkItems):
            result = await reads.list_work_items(cmd.agent_id, cmd.args)
        else:
            raise TypeError(f"{cmd.message_type} is not a read")
    except DomainError as err:
        return CommandReply(
            command_id=cmd.command_id, outcome=CommandOutcome.REJECTED, error=err.body()
        )
    return CommandReply(command_id=cmd.command_id, outcome=CommandOutcome.APPLIED, result=result)
