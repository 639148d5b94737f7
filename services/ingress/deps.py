"""What route handlers are given: the objects app.py builds once, reached through the request."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request

from services.ingress.paging import Cursors
from services.ingress.ratelimit import RateLimiter
from services.ingress.service import CallbackIntake
from shared.domain.capability import TOKEN_SEPARATOR
from shared.domain.why import Reason
from shared.file_runner import FileTools
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.runtime import utc_now
from shared.store.readmodel import ReadModel
from shared.tool_gateway import ToolGateway


@dataclass(frozen=True, slots=True)
class Ingress:
    reads: ReadModel
    client: LedgerClient
    gateway: ToolGateway
    intake: CallbackIntake
    metrics: Metrics
    agent_limiter: RateLimiter
    operator_token_hash: str
    callback_secret: bytes
    """Derives each agent's scope callback token, so the operator can be shown it again."""
    callback_base_url: str
    new_id: Callable[[str], str]
    not_alive: Callable[[], str | None]
    """None while every subscriber and the ledger reply reader run, else which stopped."""
    not_ready: Callable[[], Awaitable[str | None]]
    """None when alive and Redis answers, else why not."""
    before_scrape: Callable[[], Awaitable[None]]
    """Refreshes sampled gauges (the callbacks group's pending count) for /metrics."""
    why: Callable[[str, str], Awaitable[Reason | None]]
    """(agent id, WorkItem id) -> why it is not running now; None when no such item."""
    files: FileTools
    """Runs the file tools off the event loop (SearchFiles within its time limit)."""
    clock: Callable[[], datetime] = utc_now

    @property
    def cursors(self) -> Cursors:
        """Seals and opens the list routes' cursors (a key derived from the operator token)."""
        return Cursors.from_secret(self.callback_secret)

    def agent_callback_token(self, agent_id: str) -> str:
        mac = hmac.new(self.callback_secret, f"agent-callback:{agent_id}".encode(), hashlib.sha256)
        secret = base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")
        return f"{agent_id}{TOKEN_SEPARATOR}{secret}"

    def callback_url(self, token: str) -> str:
        return f"{self.callback_base_url}/v1/callbacks/{token}"


async def get_ingress(request: Request) -> Ingress:
    """Async on purpose: FastAPI runs a plain `def` dependency in a worker thread."""
    ingress = request.app.state.ingress
    assert isinstance(ingress, Ingress)
    return ingress


IngressDep = Annotated[Ingress, Depends(get_ingress)]
