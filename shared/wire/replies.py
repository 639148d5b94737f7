"""The ledger's answer to a command: sent to its `reply_to` stream and stored for dedup."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from shared.domain.errors import ToolErrorBody, ToolWarning
from shared.wire.message import Message


class CommandOutcome(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"


class CommandReply(Message):
    message_type = "command_reply"
    command_id: str
    outcome: CommandOutcome
    result: dict[str, Any] | None = None
    warnings: tuple[ToolWarning, ...] = ()
    error: ToolErrorBody | None = None
