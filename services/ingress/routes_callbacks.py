"""POST /v1/callbacks/{token}: a capability-authenticated delivery, deduplicated by its
Idempotency-Key in the same key space as the callbacks stream's delivery ids.

The hot path of ingress, so it is a plain Starlette route: FastAPI's per-request parameter and
dependency machinery cost more than everything else the route does. Its OpenAPI entry is
written here by hand (`document`) from the same models and limits.
"""

from __future__ import annotations

from typing import Any, cast

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

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
PREFIX = PATH.removesuffix("{token}")


class CallbackShortcut:
    """Serves `POST /v1/callbacks/{token}` from inside the user middlewares (body limit and
    request counter), ahead of FastAPI's exception, exit-stack and routing layers, which cost
    a measured share of the hot path's CPU; every other request goes on unchanged. The answers,
    errors and metric label are the route's own, so the route stays the documented one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _callback_token(scope)
        if token is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = route
        scope["path_params"] = {"token": token}
        request = Request(scope, receive)
        try:
            response = await post_callback(request)
        except Exception as exc:  # mapped exactly as the app's exception handlers map it
            response = await error_answer(request, exc)
        await response(scope, receive, send)


async def error_answer(request: Request, exc: Exception) -> Response:
    """The answer the app's own exception handlers give to `exc` (looked up by its classes,
    most specific first, as Starlette does), for code that runs outside FastAPI's exception
    middleware."""
    handlers = request.app.exception_handlers
    for cls in type(exc).__mro__:
        handler = handlers.get(cls)
        if handler is not None:
            return cast(Response, await handler(request, exc))
    raise exc  # nothing registered for it: ServerErrorMiddleware's 500


def _callback_token(scope: Scope) -> str | None:
    """The token when this is a POST the callback route would match (one non-empty segment)."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path: str = scope["path"]
    if not path.startswith(PREFIX):
        return None
    token = path[len(PREFIX) :]
    return token if token and "/" not in token else None


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
