"""The operator's write actions as ledger commands, shared by the HTTP routes and the console's
forms so that both send exactly the same command for the same action."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from services.ingress.commands import make, send
from services.ingress.deps import Ingress
from shared.domain.capability import TOKEN_SEPARATOR, hash_token
from shared.domain.records import AgentLoop
from shared.domain.specs import AgentSpec
from shared.wire.commands import (
    AppendOperatorMessage,
    CancelWorkItem,
    EnsureAgent,
    PauseAgent,
    PutDownWorkItem,
    RecordVerdict,
    ResumeAgent,
    RetireAgent,
)


@dataclass(frozen=True, slots=True)
class Ensured:
    """What EnsureAgent did: `result` is the ledger's answer; the token and callback token
    were minted for this call (the token is shown only when `created`)."""

    result: dict[str, Any]
    agent_token: str
    callback_token: str

    @property
    def created(self) -> bool:
        return bool(self.result.get("created"))


async def ensure_agent(
    ingress: Ingress, agent_id: str, loop: AgentLoop | None, spec: AgentSpec | None
) -> Ensured:
    """Create the agent once, or change its spec (what PUT /v1/agents/{id} does)."""
    agent_token = f"{agent_id}{TOKEN_SEPARATOR}{secrets.token_urlsafe(32)}"
    callback_token = ingress.agent_callback_token(agent_id)
    command = make(
        EnsureAgent,
        command_id=ingress.new_id("cmd_"),
        agent_id=agent_id,
        loop=loop,
        spec=spec,
        agent_token_hash=hash_token(agent_token),
        callback_token_hash=hash_token(callback_token),
    )
    return Ensured(await send(ingress, command), agent_token, callback_token)


async def send_operator_message(
    ingress: Ingress,
    agent_id: str,
    text: str,
    work_item_id: str | None,
    idempotency_key: str | None,
) -> str:
    """Put an operator message in the agent's inbox; its message id. A repeated idempotency
    key (for this agent) is applied once and answered with the first message id."""
    if idempotency_key is None:
        message_id, command_id = ingress.new_id("msg_"), ingress.new_id("cmd_")
    else:
        # The ledger dedups by command id per agent: a retry after a lost answer (a killed
        # ingress, a 503 while the command still waited in its stream) is applied once.
        digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]
        message_id, command_id = f"msg_k{digest}", f"cmd_msgkey_{digest}"
    command = make(
        AppendOperatorMessage,
        command_id=command_id,
        agent_id=agent_id,
        message_id=message_id,
        text=text,
        work_item_id=work_item_id,
    )
    await send(ingress, command)
    return message_id


def keyed_command_id(ingress: Ingress, kind: str, work_item_id: str, key: str | None) -> str:
    """A fresh command id, or one derived from the caller's retry key (applied once)."""
    if key is None:
        return str(ingress.new_id("cmd_"))
    digest = hashlib.sha256(key.encode()).hexdigest()[:40]
    return f"cmd_{kind}_{work_item_id}_{digest}"


async def cancel_work_item(
    ingress: Ingress, agent_id: str, work_item_id: str, reason: str, idempotency_key: str | None
) -> dict[str, Any]:
    """Cancel an open WorkItem as the operator; the WorkItemView the ledger wrote."""
    command = make(
        CancelWorkItem,
        command_id=keyed_command_id(ingress, "cancel", work_item_id, idempotency_key),
        agent_id=agent_id,
        args={"work_item_id": work_item_id, "reason": reason},
        by_operator=True,
    )
    result = await send(ingress, command)
    return dict(result["work_item"])


async def put_down_work_item(
    ingress: Ingress, agent_id: str, work_item_id: str, reason: str, idempotency_key: str | None
) -> dict[str, Any]:
    """Take focus off the agent's current WorkItem as the operator; the WorkItemView."""
    command = make(
        PutDownWorkItem,
        command_id=keyed_command_id(ingress, "putdown", work_item_id, idempotency_key),
        agent_id=agent_id,
        work_item_id=work_item_id,
        reason=reason,
    )
    result = await send(ingress, command)
    return dict(result["work_item"])


async def record_operator_verdict(
    ingress: Ingress,
    agent_id: str,
    work_item_id: str,
    *,
    passed: bool,
    note: str,
    attempt: int | None,
    idempotency_key: str | None,
) -> dict[str, Any]:
    """The operator's verdict on a verifying WorkItem's operator_approval checks (an older
    `attempt` changes nothing), or on a WorkItem held for the operator after its attempts were
    spent (approve: done; reject: fresh attempts); the WorkItemView the ledger wrote."""
    command = make(
        RecordVerdict,
        command_id=keyed_command_id(ingress, "verdict", work_item_id, idempotency_key),
        agent_id=agent_id,
        work_item_id=work_item_id,
        attempt=attempt,
        source="operator",
        passed=passed,
        reason=note,
    )
    result = await send(ingress, command)
    return dict(result["work_item"])


async def pause_agent(ingress: Ingress, agent_id: str, reason: str, *, interrupt: bool) -> None:
    """Pause the agent: no turn starts; the running one ends after its round, or at once."""
    command = make(
        PauseAgent,
        command_id=ingress.new_id("cmd_"),
        agent_id=agent_id,
        reason=reason,
        interrupt=interrupt,
    )
    await send(ingress, command)


async def resume_agent(ingress: Ingress, agent_id: str) -> None:
    await send(ingress, make(ResumeAgent, command_id=ingress.new_id("cmd_"), agent_id=agent_id))


async def retire_agent(ingress: Ingress, agent_id: str, reason: str) -> list[str]:
    """Retire the agent with its open WorkItems (read from the indexes: the ledger loads only
    what a command names), then sweep: an item created while the retirement was on its way is
    cancelled by a second command (the retired agent can create no more). The ids cancelled."""
    command_id = ingress.new_id("cmd_")
    cancelled: list[str] = []
    for sweep in range(2):
        ids = await ingress.reads.open_item_ids(agent_id)
        if sweep and not ids:
            break
        command = make(
            RetireAgent,
            command_id=f"{command_id}:{sweep}",
            agent_id=agent_id,
            reason=reason,
            work_item_ids=tuple(ids),
        )
        cancelled += (await send(ingress, command))["cancelled_work_items"]
    return cancelled
