"""Ingress fixtures: one real ledger process per module (it applies every command for real), and
per test the ingress FastAPI app in-process (lifespan run, httpx over ASGI) on the module's
key prefix, or per module an ingress process beside the ledger (`ingress_process`, `http`).
Tests use fresh agent ids, so they never see each other's records."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.ingress.app import IngressApp, build
from services.ingress.settings import IngressSettings
from tests.integration.conftest import ServiceProcess, drop_prefix, service_process, started

OPERATOR_TOKEN = "operator-" + "x" * 24
PARTITIONS = 4
STOPPED = (0, -signal.SIGTERM)
"""A clean stop: uvicorn finishes its shutdown, then re-raises the SIGTERM it caught."""


@pytest.fixture(scope="module")
def stack_prefix(redis_url: str) -> Iterator[str]:
    value = "ti" + secrets.token_hex(4)
    yield value
    drop_prefix(redis_url, value)


@pytest.fixture
def prefix(stack_prefix: str) -> str:
    """The module's prefix: the shared fixtures (names, redis, reads) use it too."""
    return stack_prefix


def stack_env(redis_url: str, prefix: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS=str(PARTITIONS),
        LONGRUN_AGENT_HOME=str(home),
        LONGRUN_RECLAIM_IDLE_MS="1500",
        LONGRUN_LOG_LEVEL="WARNING",
    )
    return env


@pytest.fixture(scope="module")
def agent_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def ledger_process(
    redis_url: str, stack_prefix: str, agent_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """A real `python -m services.ledger` on the module's prefix."""
    env = stack_env(redis_url, stack_prefix, agent_home)
    log = tmp_path_factory.mktemp("logs") / "ledger.log"
    proc = started(service_process("services.ledger", env, "LONGRUN_LEDGER_PORT", log))
    yield proc
    proc.stop()


def start_ingress(env: dict[str, str], log: Path, **extra: str) -> ServiceProcess:
    """An ingress process on a free port with the operator token (started, maybe not ready)."""
    proc = service_process(
        "services.ingress", {**env, "LONGRUN_OPERATOR_TOKEN": OPERATOR_TOKEN, **extra},
        "LONGRUN_HTTP_PORT", log,
    )  # fmt: skip
    proc.start()
    return proc


@pytest.fixture(scope="module")
def ingress_process(
    redis_url: str,
    stack_prefix: str,
    agent_home: Path,
    ledger_process: ServiceProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServiceProcess]:
    """A real `python -m services.ingress` beside the module's ledger process."""
    env = stack_env(redis_url, stack_prefix, agent_home)
    proc = start_ingress(env, tmp_path_factory.mktemp("logs") / "ingress.log")
    asyncio.run(proc.wait_ready())
    yield proc
    assert proc.stop() in STOPPED


@pytest.fixture
def base_url(ingress_process: ServiceProcess) -> str:
    return f"http://127.0.0.1:{ingress_process.port}"


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the module's ingress process."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        yield client


async def until(check: Callable[[], Awaitable[bool]], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


@dataclass
class Api:
    """An in-process ingress and an httpx client speaking to it."""

    built: IngressApp
    http: httpx.AsyncClient

    @property
    def operator(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

    async def create_agent(self, agent_id: str | None = None, **body: Any) -> dict[str, Any]:
        agent_id = agent_id or new_agent_id()
        answer = await self.http.put(f"/v1/agents/{agent_id}", headers=self.operator, json=body)
        assert answer.status_code == 201, answer.text
        return dict(answer.json())

    async def tool(
        self, agent_id: str, tool: str, args: dict[str, Any], **extra: Any
    ) -> httpx.Response:
        return await self.http.post(
            f"/v1/agents/{agent_id}/tools/{tool}",
            headers=self.operator,
            json={"args": args, **extra},
        )


def new_agent_id() -> str:
    return "ag-" + secrets.token_hex(5)


def ingress_settings(redis_url: str, prefix: str, home: Path, **overrides: Any) -> IngressSettings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "prefix": prefix,
        "partitions": PARTITIONS,
        "agent_home": home,
        "operator_token": OPERATOR_TOKEN,
        "http_port": 8080,
        "reclaim_idle_ms": 1500,
        "ledger_timeout_s": 5.0,
        **overrides,
    }
    return IngressSettings(**values)


@asynccontextmanager
async def running(settings: IngressSettings) -> AsyncIterator[Api]:
    """Build the app, run its lifespan (broker, ledger client), and talk to it over ASGI."""
    built = build(settings)
    async with built.app.router.lifespan_context(built.app):
        transport = httpx.ASGITransport(app=built.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ingress.test") as http:
            yield Api(built, http)


@pytest.fixture
def make_api(
    redis_url: str, stack_prefix: str, agent_home: Path, ledger_process: ServiceProcess
) -> Any:
    """make_api(**settings) -> an async context manager running one ingress."""

    def _make(**overrides: Any) -> Any:
        return running(ingress_settings(redis_url, stack_prefix, agent_home, **overrides))

    return _make


@pytest.fixture
async def api(make_api: Any) -> AsyncIterator[Api]:
    async with make_api() as running_api:
        yield running_api
