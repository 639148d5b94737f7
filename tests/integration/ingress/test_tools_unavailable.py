"""The agent view names tools its spec asks for that cannot be offered: RunCommand while no
turn executor reports a working sandbox, with the executor's reason."""

from __future__ import annotations

import orjson

from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration.ingress.conftest import Api


async def test_run_command_is_named_unavailable_with_the_executors_reason(
    api: Api, redis: AnyRedis, names: Names
) -> None:
    plain = await api.create_agent()
    asking = await api.create_agent(spec={"tools": {"commands": True}})
    await redis.delete(names.sandbox_status)

    async def unavailable(agent: dict[str, object]) -> object:
        shown = await api.http.get(f"/v1/agents/{agent['agent_id']}", headers=api.operator)
        assert shown.status_code == 200, shown.text
        return shown.json()["tools_unavailable"]

    assert await unavailable(asking) == [
        {"tool": "RunCommand", "reason": "no turn executor has reported a sandbox"}
    ]
    broken = {"backend": "bubblewrap", "available": False, "reason": "no user namespaces"}
    working = {"backend": "bubblewrap", "available": True, "reason": None}
    await redis.hset(names.sandbox_status, "executor-b", orjson.dumps(broken))
    await redis.hset(names.sandbox_status, "executor-a", orjson.dumps(working))
    assert await unavailable(asking) == [
        {
            "tool": "RunCommand",
            "reason": "sandbox unavailable on executor executor-b: no user namespaces",
        }
    ]
    assert await unavailable(plain) == []
    await redis.hdel(names.sandbox_status, "executor-b")
    assert await unavailable(asking) == []
