"""Signed history heads: an agent's head signed by the ledger, and the public keys to check
heads with (`longrun history anchor` / `verify --anchor`)."""

from __future__ import annotations

from fastapi import APIRouter

from services.ingress.auth import Operator, OperatorAgent
from services.ingress.commands import make, send
from services.ingress.deps import IngressDep
from services.ingress.routes_agents import errors
from shared.domain.base import Record
from shared.domain.signing import PublicKeyInfo, SignedHead
from shared.wire.commands import SignHistoryHead

router = APIRouter(tags=["history"])


class SigningKeyList(Record):
    keys: list[PublicKeyInfo]


@router.get("/v1/agents/{agent_id}/history/head", responses=errors(404))
async def history_head(record: OperatorAgent, ingress: IngressDep) -> SignedHead:
    """The agent's history tip (`seq`, `hash`) signed now by the ledger's key: save it (an
    anchor) to prove later that the history still passes through it."""
    command = make(
        SignHistoryHead,
        command_id=ingress.new_id("cmd_"),
        agent_id=record.state.agent_id,
    )
    return SignedHead.model_validate(await send(ingress, command))


@router.get("/v1/signing-keys", dependencies=[Operator], responses=errors())
async def signing_keys(ingress: IngressDep) -> SigningKeyList:
    """Every public key a ledger of this deployment has signed heads with, oldest first."""
    return SigningKeyList(keys=await ingress.reads.signing_keys())
