"""Turn executor processes report their command sandbox: /readyz stays ready and says
`sandbox: bubblewrap` or `sandbox: unavailable (<reason>)`, and each writes its report where
ingress reads it for the agent view (`tools_unavailable`); a clean stop removes it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration.test_executor_search_bounds import STEADY_LEASE

pytestmark = pytest.mark.timeout(300)


async def reports(redis: AnyRedis, names: Names) -> dict[str, dict[str, Any]]:
    raw = await redis.hgetall(names.sandbox_status)
    return {k.decode(): orjson.loads(v) for k, v in raw.items()}


async def test_executors_say_whether_their_sandbox_works(
    spawn: Any, redis: AnyRedis, names: Names
) -> None:
    off = spawn(
        "services.turn_executor", "LONGRUN_EXECUTOR_PORT", LONGRUN_SANDBOX="none", **STEADY_LEASE
    )
    on = spawn("services.turn_executor", "LONGRUN_EXECUTOR_PORT", **STEADY_LEASE)
    await asyncio.gather(off.wait_ready(within=240), on.wait_ready(within=240))
    async with httpx.AsyncClient(timeout=30) as http:
        said_off = await http.get(f"http://127.0.0.1:{off.port}/readyz")
        said_on = await http.get(f"http://127.0.0.1:{on.port}/readyz")
    assert said_off.status_code == 200
    assert said_off.text == "ready\nsandbox: unavailable (turned off (LONGRUN_SANDBOX=none))"
    assert (said_on.status_code, said_on.text) == (200, "ready\nsandbox: bubblewrap")
    found = await reports(redis, names)
    assert sorted((doc["available"], doc["reason"]) for doc in found.values()) == [
        (False, "turned off (LONGRUN_SANDBOX=none)"),
        (True, None),
    ]
    off.stop()
    async with asyncio.timeout(60):
        while len(found := await reports(redis, names)) > 1:  # noqa: ASYNC110 - another process writes it
            await asyncio.sleep(0.1)
    (left,) = found.values()
    assert left["available"] is True
