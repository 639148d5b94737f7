"""Who may call what: the operator token, each agent's own token (stored hashed by the ledger,
compared in constant time), and per-token rate limits. Capability tokens are checked by the
ledger itself (services.ingress.service)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.ingress.deps import Ingress, IngressDep
from services.ingress.errors import (
    AGENT_NOT_FOUND,
    FORBIDDEN,
    INVALID_REQUEST,
    RATE_LIMITED,
    UNAUTHORIZED,
    ApiError,
)
from services.ingress.ratelimit import retry_after_header
from shared.domain.capability import agent_of_token, hash_token, same_hash
from shared.domain.records import AgentId
from shared.domain.stored import AgentRecord

AGENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""The AgentId alphabet; a token naming anything else cannot be an agent's."""
AGENT_HEADER = "X-Longrun-Agent"
"""Names the agent a request acts as where no path does (the MCP endpoint)."""

bearer = HTTPBearer(
    auto_error=False,
    description="The operator token (LONGRUN_OPERATOR_TOKEN) or, on agent routes, the agent's own.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
AgentIdPath = Annotated[AgentId, Path(description="The agent's id.")]


def unauthorized(message: str) -> ApiError:
    return ApiError(401, UNAUTHORIZED, message, headers={"WWW-Authenticate": "Bearer"})


def _presented(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise unauthorized("send `Authorization: Bearer <token>` (the operator or agent token)")
    return credentials.credentials


def _is_operator(ingress: Ingress, token: str) -> bool:
    return same_hash(hash_token(token), ingress.operator_token_hash)


async def _agent_of(ingress: Ingress, token: str) -> AgentRecord | None:
    """The agent whose token this is, or None for a token no agent holds."""
    owner = agent_of_token(token)
    if owner is None or not AGENT_ID_RE.match(owner):
        return None
    record = await ingress.reads.agent_record(owner)
    if record is None or not same_hash(hash_token(token), record.agent_token_hash):
        return None
    if record.retired is not None:
        return None  # a retired agent's token opens nothing (401)
    return record


async def require_operator(ingress: IngressDep, credentials: Credentials) -> None:
    token = _presented(credentials)
    if _is_operator(ingress, token):
        return
    if await _agent_of(ingress, token) is not None:
        raise ApiError(
            403, FORBIDDEN, "this route is for the operator; an agent token is not enough"
        )
    raise unauthorized("unknown token")


async def _existing(ingress: Ingress, agent_id: str) -> AgentRecord:
    record = await ingress.reads.agent_record(agent_id)
    if record is None:
        raise ApiError(
            404, AGENT_NOT_FOUND, f"no agent {agent_id!r}; create it with PUT /v1/agents/{agent_id}"
        )
    return record


async def operator_agent(
    agent_id: AgentIdPath,
    ingress: IngressDep,
    _operator: Annotated[None, Depends(require_operator)],
) -> AgentRecord:
    """An operator route on one agent: the agent must exist."""
    return await _existing(ingress, agent_id)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request acts as: an agent, reached with its own token or the operator's."""

    record: AgentRecord
    operator: bool


async def act_as(ingress: Ingress, token: str, agent_id: str | None) -> Caller:
    """The agent a token may act as: the operator names any existing agent; an agent's token
    acts as that agent only (naming another is 403), rate-limited per token."""
    if _is_operator(ingress, token):
        if agent_id is None:
            raise ApiError(
                400, INVALID_REQUEST, f"with the operator token, name the agent: {AGENT_HEADER}"
            )
        if not AGENT_ID_RE.match(agent_id):
            raise ApiError(400, INVALID_REQUEST, f"{agent_id[:140]!r} is not an agent id")
        return Caller(await _existing(ingress, agent_id), operator=True)
    record = await _agent_of(ingress, token)
    if record is None:
        raise unauthorized("unknown token")
    if agent_id is not None and record.state.agent_id != agent_id:
        raise ApiError(403, FORBIDDEN, "an agent token is valid only for its own agent's routes")
    wait = ingress.agent_limiter.take(hash_token(token))
    if wait > 0:
        raise ApiError(
            429,
            RATE_LIMITED,
            "too many requests for this agent token; retry after the Retry-After delay",
            headers={"Retry-After": retry_after_header(wait)},
        )
    return Caller(record, operator=False)


async def agent_access(
    agent_id: AgentIdPath, ingress: IngressDep, credentials: Credentials
) -> AgentRecord:
    """An agent route: the operator, or this agent's own token (rate-limited per token)."""
    return (await act_as(ingress, _presented(credentials), agent_id)).record


async def own_agent_access(
    agent_id: AgentIdPath, ingress: IngressDep, credentials: Credentials
) -> AgentRecord:
    """A route for the agent's own loop: its own token only (the operator's is 403, as is
    another agent's), rate-limited per token."""
    token = _presented(credentials)
    if _is_operator(ingress, token):
        raise ApiError(
            403, FORBIDDEN, "this route takes the agent's own token; the operator token is not one"
        )
    return (await act_as(ingress, token, agent_id)).record


async def operator_caller(ingress: IngressDep, credentials: Credentials) -> bool:
    """Whether the request carries the operator token (on a route an agent may call too)."""
    return credentials is not None and _is_operator(ingress, credentials.credentials)


ByOperator = Annotated[bool, Depends(operator_caller)]
OperatorAgent = Annotated[AgentRecord, Depends(operator_agent)]
AgentAccess = Annotated[AgentRecord, Depends(agent_access)]
OwnAgentAccess = Annotated[AgentRecord, Depends(own_agent_access)]
Operator = Depends(require_operator)
