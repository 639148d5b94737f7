"""The four services as real processes on the test's Redis and prefix (ledger, scheduler,
ingress, and any number of executors, each with its own environment), and an HTTP client of
the ingress with the operator token. For tests about what a deployment does end to end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from tests.integration.conftest import ServiceProcess

OPERATOR_TOKEN = "stack-operator-token"
LEDGER = ("services.ledger", "LONGRUN_LEDGER_PORT")
SCHEDULER = ("services.scheduler", "LONGRUN_SCHEDULER_PORT")
INGRESS = ("services.ingress", "LONGRUN_HTTP_PORT")
EXECUTOR = ("services.turn_executor", "LONGRUN_EXECUTOR_PORT")
SETTINGS = {"LONGRUN_OPERATOR_TOKEN": OPERATOR_TOKEN}

Spawn = Callable[..., ServiceProcess]


@dataclass
class Stack:
    spawn: Spawn
    env: dict[str, str] = field(default_factory=dict)
    """Settings every service of the stack gets (beside the operator token)."""
    ingress: ServiceProcess | None = None
    executors: list[ServiceProcess] = field(default_factory=list)
    services: list[ServiceProcess] = field(default_factory=list)
    """Ledger and scheduler."""

    async def start(self, **executor_env: str) -> None:
        """Ledger, scheduler and ingress, plus one executor with `executor_env`."""
        common = {**SETTINGS, **self.env}
        self.services = [self.spawn(*LEDGER, **common), self.spawn(*SCHEDULER, **common)]
        self.ingress = self.spawn(*INGRESS, **common)
        for service in [*self.services, self.ingress]:
            await service.wait_ready()
        await self.add_executor(**executor_env)

    async def add_executor(self, **env: str) -> ServiceProcess:
        executor = self.spawn(*EXECUTOR, **SETTINGS, **self.env, **env)
        await executor.wait_ready()
        self.executors.append(executor)
        return executor

    @property
    def url(self) -> str:
        assert self.ingress is not None
        return f"http://127.0.0.1:{self.ingress.port}"

    def http(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)


T = TypeVar("T")


async def poll(probe: Callable[[], Awaitable[T | None]], what: str, within: float = 90.0) -> T:
    """Await `probe()` until it returns something truthy (no timing asserted: a deadline only
    bounds a broken run)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"never saw {what}")


async def history(http: httpx.AsyncClient, agent_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = (await http.get(f"/v1/agents/{agent_id}/history", params={"after": after})).json()
        if not page["events"]:
            return events
        events += page["events"]
        after = page["next_after"]


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]
