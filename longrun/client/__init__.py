"""longrun's Python client: `Agent` / `AsyncAgent` for an agent's own loop (one method per
tool, the WorkItem routes, `wakes()` over its wake feed) and `Operator` / `AsyncOperator` for
the operator's routes. Errors are typed exceptions carrying the contract's error `kind`
(`longrun.client.errors`). Depends on httpx and pydantic only: `pip install 'longrun[client]'`.

    from longrun.client import Agent

    with Agent("http://127.0.0.1:8080", token) as agent:
        for tick in agent.wakes():
            ...
"""

from longrun.client.agent import Agent, AsyncAgent
from longrun.client.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    LongrunError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ToolConflict,
    ToolError,
    ToolForbidden,
    ToolInputError,
    ToolNotFound,
    Unauthorized,
    Unavailable,
)
from longrun.client.models import ToolEnvelope, WakePage, WakeTick, WorkItemView
from longrun.client.operator import AsyncOperator, Operator

__all__ = [
    "Agent",
    "AsyncAgent",
    "AsyncOperator",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "LongrunError",
    "NotFound",
    "Operator",
    "PayloadTooLarge",
    "RateLimited",
    "ToolConflict",
    "ToolEnvelope",
    "ToolError",
    "ToolForbidden",
    "ToolInputError",
    "ToolNotFound",
    "Unauthorized",
    "Unavailable",
    "WakePage",
    "WakeTick",
    "WorkItemView",
]
