"""HTTP errors as JSON `{error: {kind, message, details?}}`, and the handlers that map every
failure (validation, domain rejection, ledger outage, bug) onto one status and kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import structlog
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.archive.files import ArchiveUnavailable
from shared.domain.errors import HTTP_STATUS, DomainError
from shared.domain.spec_secrets import error_path
from shared.ledger_client import LedgerTimeout
from shared.store.client import CLUSTER_UNAVAILABLE
from shared.store.history import HistoryMoved

log = structlog.get_logger("longrun.ingress")

UNAUTHORIZED = "unauthorized"
FORBIDDEN = "forbidden"
PAYLOAD_TOO_LARGE = "payload_too_large"
INVALID_REQUEST = "invalid_request"
RATE_LIMITED = "rate_limited"
AGENT_NOT_FOUND = "agent_not_found"
NOT_FOUND = "not_found"
METHOD_NOT_ALLOWED = "method_not_allowed"
UNAVAILABLE = "unavailable"
ARCHIVE_UNAVAILABLE = "archive_unavailable"
INTERNAL = "internal"

_KIND_BY_STATUS = {404: NOT_FOUND, 405: METHOD_NOT_ALLOWED, 413: PAYLOAD_TOO_LARGE}


class ApiError(Exception):
    """A request refused with a status, a kind from the contract and a message saying why."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {kind}: {message}")
        self.status = status
        self.kind = kind
        self.message = message
        self.details = details
        self.headers = dict(headers or {})


def error_body(kind: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    error: dict[str, Any] = {"kind": kind, "message": message}
    if details:
        error["details"] = details
    return orjson.dumps({"error": error}, default=str)


def error_response(err: ApiError) -> Response:
    return Response(
        error_body(err.kind, err.message, err.details),
        status_code=err.status,
        media_type="application/json",
        headers=err.headers,
    )


def from_domain(err: DomainError) -> ApiError:
    """A ledger or tool rejection keeps its kind; the status comes from the contract's table."""
    return ApiError(
        HTTP_STATUS.get(err.kind, 400), err.kind.value, err.message, details=err.details
    )


def _validation_details(exc: RequestValidationError) -> dict[str, Any]:
    errors = [
        {"loc": [str(p) for p in error_path(e)], "msg": str(e.get("msg", "")), "type": e["type"]}
        for e in exc.errors()
    ]
    details: dict[str, Any] = {"errors": errors[:20]}
    # A query or path parameter at fault is named as the list routes' own checks name it.
    fields = {tuple(e["loc"][:2]) for e in errors if len(e["loc"]) == 2}
    if len(fields) == 1 and next(iter(fields))[0] in ("query", "path"):
        details["field"] = next(iter(fields))[1]
    return details


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _on_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    message = "the request is malformed: fix the fields listed in details and send it again"
    return error_response(ApiError(400, INVALID_REQUEST, message, details=_validation_details(exc)))


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    kind = _KIND_BY_STATUS.get(exc.status_code, INVALID_REQUEST)
    return error_response(ApiError(exc.status_code, kind, str(exc.detail), headers=exc.headers))


async def _on_domain(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    return error_response(from_domain(exc))


async def _on_unavailable(request: Request, exc: Exception) -> Response:
    log.warning("ledger_or_redis_unavailable", path=request.url.path, error=repr(exc))
    message = "the ledger or Redis did not answer in time; retry the same request shortly"
    return error_response(ApiError(503, UNAVAILABLE, message, headers={"Retry-After": "1"}))


async def _on_archive(request: Request, exc: Exception) -> Response:
    log.warning("archive_unavailable", path=request.url.path, error=str(exc))
    retry = {"Retry-After": "5"}
    return error_response(ApiError(503, ARCHIVE_UNAVAILABLE, str(exc), headers=retry))


async def _on_bug(request: Request, exc: Exception) -> Response:
    log.error("unhandled_error", path=request.url.path, error=repr(exc), exc_info=exc)
    return error_response(ApiError(500, INTERNAL, "internal error; it was logged"))


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(DomainError, _on_domain)
    app.add_exception_handler(ArchiveUnavailable, _on_archive)
    for transient in (
        LedgerTimeout,
        RedisConnectionError,
        RedisTimeoutError,
        HistoryMoved,
        *CLUSTER_UNAVAILABLE,
    ):
        app.add_exception_handler(transient, _on_unavailable)
    app.add_exception_handler(Exception, _on_bug)
