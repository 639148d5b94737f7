"""POST /v1/callbacks/{token}: a capability-authenticated delivery, deduplicated by its
Idempotency-Key in the same key space as the callbacks stream's delivery ids.

The hot path of ingress, so it is a plain Starlette route: FastAPI's per-request parameter and
dependency machinery cost more than everything else the route does. Its OpenAPI entry is
written here by hand (`document`) from the same models and limits.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from services.ingress.deps import Ingress
from services.ingress.errors import FORBIDDEN, INVALID_REQUEST, RATE_LIMITED, ApiError
from services.ingress.ratelimit import retry_after_header
from services.ingress.schemas import DEFAULT_CONTENT_TYPE, CallbackAccepted, ErrorAnswer
from services.ingress.service import UNKNOWN_TOKEN, CallbackRefused, Delivery
from shared.wire.commands import CallbackSource

PATH = "/v1/callbacks/{token}"
MAX_TOKEN = 1000
MAX_KEY = 200


async def post_callback(request: Request) -> Response:
    """Record one delivery for the capability in the path."""
    ingress: Ingress = request.app.state.ingress
    token = request.path_params["token"]
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= MAX_KEY:
        raise ApiError(400, INVALID_REQUEST, f"Idempotency-Key must have 1 to {MAX_KEY} characters")
    if len(token) > MAX_TOKEN:
        raise ApiError(403, FORBIDDEN, UNKNOWN_TOKEN)
    _admit(ingress, token)
    delivery = Delivery(
        token=token,
        body=await request.body(),
        content_type=request.headers.get("content-type") or DEFAULT_CONTENT_TYPE,
        delivery_id=key or ingress.new_id("dlv_"),
        source=CallbackSource.HTTP,
    )
    try:
        accepted = await ingress.intake.accept(delivery)
    except CallbackRefused as refused:
        raise ApiError(refused.status, refused.kind, refused.message) from None
    answer: dict[str, Any] = {
        "delivery_id": accepted.delivery_id,
        "disposition": accepted.disposition,
    }
    if accepted.wait_id is not None:
        answer["wait_id"] = accepted.wait_id
    return Response(orjson.dumps(answer), status_code=202, media_type="application/json")


def _admit(ingress: Ingress, token: str) -> None:
    """Per-capability rate limit, checked before the body is read or the ledger asked."""
    wait = ingress.intake.admit(token)
    if wait > 0:
        raise ApiError(
            429,
            RATE_LIMITED,
            "too many callbacks for this capability; retry after the Retry-After delay",
            headers={"Retry-After": retry_after_header(wait)},
        )


route = Route(PATH, post_callback, methods=["POST"], name="post_callback")


def _json(schema_name: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{schema_name}"}
    return {"content": {"application/json": {"schema": ref}}}


OPERATION: dict[str, Any] = {
    "tags": ["callbacks"],
    "summary": "Post Callback",
    "description": "Record one delivery for the capability in the path: it triggers the "
    "capability's wait, or (agent-scope URL without a single external wait) lands in the inbox.",
    "operationId": "post_callback",
    "parameters": [
        {
            "name": "token",
            "in": "path",
            "required": True,
            "description": "The capability token (the last segment of a callback URL).",
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_TOKEN},
        },
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "Repeat it on a retried delivery: the second one is a `duplicate`. "
            "One key space with the callbacks stream's `delivery_id`.",
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY},
        },
    ],
    "requestBody": {
        "required": False,
        "description": "JSON, text or bytes; kept with its content type and provenance.",
        "content": {
            "application/json": {"schema": {}},
            "text/plain": {"schema": {"type": "string"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    },
    "responses": {
        "202": {"description": "Accepted", **_json("CallbackAccepted")},
        **{
            str(status): {"description": description, **_json("ErrorAnswer")}
            for status, description in (
                (400, "JSON content type with a body that is not JSON; a bad Idempotency-Key"),
                (403, "Unknown capability, or its wait was cancelled"),
                (413, "Body over LONGRUN_MAX_BODY_BYTES"),
                (429, "Over the capability's rate limit"),
            )
        },
    },
}


def document(openapi: dict[str, Any]) -> dict[str, Any]:
    """Add this route and the schemas it names to a generated OpenAPI document."""
    openapi.setdefault("paths", {})[PATH] = {"post": OPERATION}
    schemas = openapi.setdefault("components", {}).setdefault("schemas", {})
    for model in (CallbackAccepted, ErrorAnswer):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return openapi
