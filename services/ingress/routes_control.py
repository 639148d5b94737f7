"""Operator routes that control an agent's life: pause (optionally interrupting the running
turn), resume, retire. Each answers with the agent's view, as `GET /v1/agents/{id}` does."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from services.ingress.auth import OperatorAgent
from services.ingress.deps import IngressDep
from services.ingress.operator_actions import pause_agent, resume_agent, retire_agent
from services.ingress.queries import agent_detail
from services.ingress.schemas import AgentDetail, ErrorAnswer, PauseBody, RetireBody

router = APIRouter(prefix="/v1/agents", tags=["agents"])


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {"model": ErrorAnswer} for status in (400, 401, 403, 404, 409, 413, 429, *statuses)
    }


async def _view(ingress: IngressDep, agent_id: str) -> AgentDetail:
    record = await ingress.reads.agent_record(agent_id)
    assert record is not None  # the agent existed when the route began; agents are never deleted
    return await agent_detail(ingress, record)


@router.post("/{agent_id}/pause", responses=errors())
async def post_pause(record: OperatorAgent, body: PauseBody, ingress: IngressDep) -> AgentDetail:
    """Pause the agent: no turn starts until resume; a running turn ends after its current
    round (`interrupt: true`: at once). Messages and callbacks are still taken. 409
    `agent_retired` for a retired agent."""
    agent_id = record.state.agent_id
    await pause_agent(ingress, agent_id, body.reason, interrupt=body.interrupt)
    return await _view(ingress, agent_id)


@router.post("/{agent_id}/resume", responses=errors())
async def post_resume(record: OperatorAgent, ingress: IngressDep) -> AgentDetail:
    """Resume a paused agent: it runs again if it has work (a no-op for an agent not paused)."""
    agent_id = record.state.agent_id
    await resume_agent(ingress, agent_id)
    return await _view(ingress, agent_id)


@router.post("/{agent_id}/retire", responses=errors())
async def post_retire(record: OperatorAgent, body: RetireBody, ingress: IngressDep) -> AgentDetail:
    """Retire the agent for good: its open WorkItems are cancelled (with the reason) and their
    waits with them, a running turn is interrupted, its agent token answers 401 and its
    callback URLs 403 from now on, and a PUT of the same id 409 `agent_retired`."""
    agent_id = record.state.agent_id
    await retire_agent(ingress, agent_id, body.reason)
    return await _view(ingress, agent_id)
