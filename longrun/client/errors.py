"""Errors as typed exceptions: every refusal carries the contract's error `kind` (`forbidden`,
`work_item_not_open`, ...), the HTTP status and the server's message, so callers branch on the
class or on `kind`."""

from __future__ import annotations

from typing import Any


class LongrunError(Exception):
    """Any answer longrun refused, or a server that could not be reached."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{kind}: {message}" if status is None else f"{status} {kind}: {message}")
        self.kind = kind
        self.message = message
        self.status = status
        self.details = details


class InvalidRequest(LongrunError):
    """400: malformed input (`invalid_request`) or a tool's `invalid_tool_input`."""


class Unauthorized(LongrunError):
    """401 `unauthorized`: a missing or unknown token (a retired agent's too)."""


class Forbidden(LongrunError):
    """403: a valid token not allowed here (`forbidden`, `work_item_access_denied`, ...)."""


class NotFound(LongrunError):
    """404: `agent_not_found`, `work_item_not_found`, `wait_not_found`, `not_found`, ..."""


class Conflict(LongrunError):
    """409: `work_item_not_open`, `no_current_work_item`, `agent_paused`, `stale_turn`, ..."""


class PayloadTooLarge(LongrunError):
    """413 `payload_too_large`."""


class RateLimited(LongrunError):
    """429 `rate_limited`, after the client's own retries; `retry_after` in seconds."""

    def __init__(self, kind: str, message: str, *, retry_after: float | None = None, **kw: Any):
        super().__init__(kind, message, **kw)
        self.retry_after = retry_after


class Unavailable(LongrunError):
    """503 `unavailable` (or another 5xx, or no answer at all) after the client's retries."""


class ToolError(LongrunError):
    """A tool call answered with an error envelope; `recovery_hint` says what to do instead."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        tool_name: str,
        recovery_hint: str | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(kind, message, **kw)
        self.tool_name = tool_name
        self.recovery_hint = recovery_hint


_BY_STATUS: dict[int, type[LongrunError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: RateLimited,
}


def error_class(status: int) -> type[LongrunError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return Unavailable if status >= 500 else LongrunError


class ToolInputError(ToolError, InvalidRequest):
    """400 tool error: `invalid_tool_input`, `pattern_too_slow`, ..."""


class ToolForbidden(ToolError, Forbidden):
    """403 tool error: `work_item_access_denied`, `access_denied`."""


class ToolNotFound(ToolError, NotFound):
    """404 tool error: `work_item_not_found`, `wait_not_found`, `unknown_tool`."""


class ToolConflict(ToolError, Conflict):
    """409 tool error: `work_item_not_open`, `no_current_work_item`, `agent_paused`, ..."""


_TOOL_BY_STATUS: dict[int, type[ToolError]] = {
    400: ToolInputError,
    403: ToolForbidden,
    404: ToolNotFound,
    409: ToolConflict,
}


def tool_error_class(status: int) -> type[ToolError]:
    return _TOOL_BY_STATUS.get(status, ToolError)
