"""Operator routes on agents: list, idempotent create, state, messages, history and its proof;
and the agent route that reports a task's result."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response

from services.ingress.auth import AgentAccess, AgentIdPath, Operator, OperatorAgent
from services.ingress.commands import make, send
from services.ingress.deps import Ingress, IngressDep
from services.ingress.operator_actions import ensure_agent, send_operator_message
from services.ingress.paging import CursorQuery, LimitQuery, bad_field, page_limit
from services.ingress.queries import agent_detail, agents_page
from services.ingress.schemas import (
    AgentCreatedAnswer,
    AgentDetail,
    AgentExistsAnswer,
    AgentList,
    AgentSummary,
    ErrorAnswer,
    HistoryPage,
    MessageAccepted,
    MessageBody,
    PutAgentBody,
    TaskResultAccepted,
    TaskResultBody,
    TranscriptPage,
)
from shared.domain.capability import hash_token, token_id_of
from shared.domain.history import VerifyResult
from shared.domain.records import WorkItemId
from shared.store.readmodel import HISTORY_PAGE_MAX
from shared.wire.commands import RecordTaskResult

router = APIRouter(prefix="/v1/agents", tags=["agents"])


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route can give."""
    return {status: {"model": ErrorAnswer} for status in (400, 401, 403, 413, 429, *statuses)}


@router.get("", dependencies=[Operator], responses=errors())
async def list_agents(
    ingress: IngressDep,
    label: Annotated[
        list[str] | None,
        Query(
            description="`key=value` (or a bare `key`): only agents whose labels match; "
            "repeat it to require several."
        ),
    ] = None,
    limit: LimitQuery = None,
    cursor: CursorQuery = None,
) -> AgentList:
    """Agents by id, paged: `{agents, next_cursor}`."""
    size = page_limit(limit)
    labels = sorted(label or ())
    route = "agents?" + "&".join(labels)
    after = ingress.cursors.position(route, "", cursor)
    pairs, last = await agents_page(ingress, labels, after, size)
    return AgentList(
        agents=[
            AgentSummary(
                agent_id=r.state.agent_id,
                loop=r.state.loop,
                posture=r.state.posture,
                current_work_item_id=r.state.current_work_item_id,
                labels=s.spec.labels,
            )
            for r, s in pairs
        ],
        next_cursor=None if last is None else ingress.cursors.seal(route, "", last),
    )


@router.put(
    "/{agent_id}",
    dependencies=[Operator],
    status_code=201,
    responses={200: {"model": AgentExistsAnswer}, **errors(409)},
)
async def put_agent(
    agent_id: AgentIdPath,
    ingress: IngressDep,
    response: Response,
    body: PutAgentBody | None = None,
) -> AgentCreatedAnswer | AgentExistsAnswer:
    """Create the agent once, or change its spec; a token is shown only on creation."""
    body = body or PutAgentBody()
    ensured = await ensure_agent(ingress, agent_id, body.loop, body.spec)
    result, callback_token = ensured.result, ensured.callback_token
    # The stored spec is the one sent (an identical one changed nothing), else the one stored.
    spec = body.spec or (await ingress.reads.agent_spec(agent_id)).spec
    if result.get("created"):
        return AgentCreatedAnswer(
            agent_id=agent_id,
            loop=result["loop"],
            agent_token=ensured.agent_token,
            callback_url=ingress.callback_url(callback_token),
            spec=spec,
            spec_version=result["spec_version"],
        )
    response.status_code = 200
    return AgentExistsAnswer(
        agent_id=agent_id,
        loop=result["loop"],
        callback_url=await _known_callback_url(ingress, agent_id, callback_token),
        spec=spec,
        spec_version=result["spec_version"],
    )


async def _known_callback_url(ingress: Ingress, agent_id: str, token: str) -> str | None:
    """The scope URL again, if this operator secret minted it (the ledger keeps its id)."""
    record = await ingress.reads.agent_record(agent_id)
    if record is None or record.callback_token_id != token_id_of(hash_token(token)):
        return None
    return ingress.callback_url(token)


@router.get("/{agent_id}", responses=errors(404))
async def get_agent(record: OperatorAgent, ingress: IngressDep) -> AgentDetail:
    return await agent_detail(ingress, record)


@router.post(
    "/{agent_id}/messages", status_code=202, responses=errors(404), response_model=MessageAccepted
)
async def post_message(
    record: OperatorAgent,
    body: MessageBody,
    ingress: IngressDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=200,
            description="Retry key: a repeat with the same key (for this agent) is applied once "
            "and answered with the first message_id.",
        ),
    ] = None,
) -> MessageAccepted:
    """Put an operator message in the agent's inbox; it answers a matching operator_input wait."""
    message_id = await send_operator_message(
        ingress, record.state.agent_id, body.text, body.work_item_id, idempotency_key
    )
    return MessageAccepted(message_id=message_id)


@router.post("/{agent_id}/tasks/{task_id}/result", status_code=202, responses=errors(404))
async def post_task_result(
    record: AgentAccess, task_id: str, body: TaskResultBody, ingress: IngressDep
) -> TaskResultAccepted:
    """Trigger the active task_result wait whose resource is `task_id`."""
    command = make(
        RecordTaskResult,
        command_id=ingress.new_id("cmd_"),
        agent_id=record.state.agent_id,
        task_id=task_id,
        status=body.status,
        summary=body.summary,
    )
    result = await send(ingress, command)
    return TaskResultAccepted(task_id=task_id, wait_id=result["wait_id"], disposition="triggered")


@router.get("/{agent_id}/history", responses=errors(404))
async def get_history(
    record: OperatorAgent,
    ingress: IngressDep,
    after: Annotated[int, Query(ge=0, le=2**62, description="Return events with seq > after.")] = 0,
    limit: LimitQuery = None,
    cursor: CursorQuery = None,
) -> HistoryPage:
    """Events ascending by seq, paged: `{events, next_after, next_cursor, call_outcomes}`;
    `next_cursor` is null once the page reaches the newest event (`next_after` keeps working
    for a reader that follows the history as it grows)."""
    size = page_limit(limit, most=HISTORY_PAGE_MAX)
    agent_id = record.state.agent_id
    if cursor is not None:
        if after:
            raise bad_field("cursor", "give after or cursor, not both")
        position = ingress.cursors.open("history", agent_id, cursor)
        after = position if isinstance(position, int) else 0
    found = await ingress.reads.history(agent_id, after=after, limit=size + 1)
    events = found[:size]
    next_after = int(events[-1]["seq"]) if events else after
    more = len(found) > size
    outcomes = await ingress.reads.call_outcomes(agent_id, events)
    return HistoryPage(
        events=events,
        next_after=next_after,
        next_cursor=ingress.cursors.seal("history", agent_id, next_after) if more else None,
        call_outcomes=outcomes,
    )


@router.get("/{agent_id}/transcript", responses=errors(404))
async def get_transcript(
    record: OperatorAgent,
    ingress: IngressDep,
    work_item_id: Annotated[
        WorkItemId | None, Query(description="Only the rounds bound to this WorkItem.")
    ] = None,
    after: Annotated[int, Query(ge=0, le=2**62, description="Entries with seq > after.")] = 0,
    limit: Annotated[int, Query(ge=1, le=HISTORY_PAGE_MAX)] = 100,
) -> TranscriptPage:
    """The recorded rounds of the agent's turns (prompts, assistant text, tool calls and
    results), ascending by `seq`; read until `entries` is empty, passing `next_after`."""
    entries, next_after = await ingress.reads.transcript_page(
        record.state.agent_id, after=after, limit=limit, work_item_id=work_item_id
    )
    return TranscriptPage(entries=entries, next_after=next_after)


@router.get("/{agent_id}/history/verify", responses=errors(404))
async def verify_history(record: OperatorAgent, ingress: IngressDep) -> VerifyResult:
    return await ingress.reads.verify_history(record.state.agent_id)
