"""Routes for operations: liveness, readiness (subscribers running and Redis answering),
Prometheus metrics, and the AsyncAPI document of the streams."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from services.ingress.deps import IngressDep

router = APIRouter(tags=["operations"])


TEXT: dict[str, Any] = {"content": {"text/plain": {}}}


@router.get("/healthz", response_class=Response, responses={200: TEXT, 503: TEXT})
async def healthz(ingress: IngressDep) -> Response:
    """Alive while every stream subscriber and the ledger reply reader run (consumer rule 6)."""
    problem = ingress.not_alive()
    if problem is not None:
        return Response(problem.encode(), status_code=503, media_type="text/plain")
    return Response(b"ok", media_type="text/plain")


@router.get("/readyz", response_class=Response, responses={200: TEXT, 503: TEXT})
async def readyz(ingress: IngressDep) -> Response:
    """Ready when every stream subscriber runs, the ledger reply reader runs, Redis answers."""
    problem = await ingress.not_ready()
    if problem is not None:
        return Response(problem.encode(), status_code=503, media_type="text/plain")
    return Response(b"ready", media_type="text/plain")


@router.get("/metrics", response_class=Response, responses={200: TEXT})
async def metrics(request: Request, ingress: IngressDep) -> Response:
    await ingress.before_scrape()
    registry: CollectorRegistry = request.app.state.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/asyncapi.json",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}}},
)
async def asyncapi(request: Request) -> Response:
    """The AsyncAPI 3.0 document of every longrun stream."""
    document: dict[str, Any] = request.app.state.asyncapi
    return Response(orjson.dumps(document), media_type="application/json")
