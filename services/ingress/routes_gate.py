"""Operator routes that end, judge or put down a WorkItem: cancel it, give the verdict on its
operator_approval checks, take focus off it. Each answers with the WorkItemView the ledger
wrote."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path
from pydantic import Field, StrictBool

from services.ingress import operator_actions
from services.ingress.auth import OperatorAgent
from services.ingress.deps import IngressDep
from services.ingress.routes_agents import errors
from services.ingress.schemas import Body
from shared.domain.base import NonEmptyStr
from shared.domain.records import WORK_ITEM_ID_PATTERN

router = APIRouter(prefix="/v1/agents/{agent_id}/work-items/{work_item_id}", tags=["work items"])

WorkItemPath = Annotated[
    str, Path(pattern=WORK_ITEM_ID_PATTERN, max_length=64, description="The WorkItem's id.")
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        description="Retry key: a repeat with the same key is applied once and answered alike.",
    ),
]


class CancelBody(Body):
    reason: NonEmptyStr


class PutDownBody(Body):
    reason: NonEmptyStr


class VerdictBody(Body):
    passed: StrictBool
    """A JSON boolean: a string such as "yes" or "no" is a 400, never coerced into a verdict."""
    note: Annotated[str, Field(max_length=4000)] = ""
    attempt: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """The attempt judged (from the item's `verification.attempt`); absent: the current one.
    A verdict naming an older attempt changes nothing. Bounded so that every accepted number
    fits the wire codec (a 30-digit attempt was a 500)."""


@router.post("/cancel", responses=errors(404, 409))
async def cancel_work_item(
    record: OperatorAgent,
    work_item_id: WorkItemPath,
    body: CancelBody,
    ingress: IngressDep,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Cancel an open WorkItem (outcome `cancelled`, waits cancelled, focus released, nothing
    promoted), verifying or not. Answers the WorkItemView."""
    return await operator_actions.cancel_work_item(
        ingress, record.state.agent_id, work_item_id, body.reason, idempotency_key
    )


@router.post("/put-down", responses=errors(404, 409))
async def put_down_work_item(
    record: OperatorAgent,
    work_item_id: WorkItemPath,
    body: PutDownBody,
    ingress: IngressDep,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Take focus off the agent's current WorkItem: the item stays open as it is and the agent
    picks what comes next. 409 `no_current_work_item` when this item is not the current one,
    `work_item_not_open` when it is completed. Answers the WorkItemView."""
    return await operator_actions.put_down_work_item(
        ingress, record.state.agent_id, work_item_id, body.reason, idempotency_key
    )


@router.post("/verdict", responses=errors(404, 409))
async def post_verdict(
    record: OperatorAgent,
    work_item_id: WorkItemPath,
    body: VerdictBody,
    ingress: IngressDep,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Approve (`passed: true`) or reject the awaited operator_approval checks of a verifying
    WorkItem. 409 `work_item_not_verifying` when none awaits a verdict."""
    return await operator_actions.record_operator_verdict(
        ingress,
        record.state.agent_id,
        work_item_id,
        passed=body.passed,
        note=body.note,
        attempt=body.attempt,
        idempotency_key=idempotency_key,
    )
