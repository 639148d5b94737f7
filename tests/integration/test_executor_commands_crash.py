"""kill -9 of the executor while a RunCommand runs, every service a real process and the model
a chat-completions stub: the command dies with its executor (nothing it started is left), a new
executor retries the turn, whose first model request names the command as started by an
interrupted turn with its outcome unknown; the history records `unknown`, and the command ran
once (longrun never runs it again)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_command_checks_stack import running
from tests.integration.test_executor_mcp_crash import notices
from tests.integration.test_executor_search_bounds import STEADY_LEASE
from tests.unit.test_provider_openai import ChatServer, completion, function_call, serving


@pytest.mark.timeout(300)
async def test_a_command_running_when_the_executor_dies_is_unknown_and_never_rerun(
    spawn: Any, tmp_path: Path
) -> None:
    marker = f"{secrets.randbelow(10**6) + 10**6}.75"
    args = {"command": f"echo ran >> runs.txt; sleep {marker}", "timeout_s": 600}
    chat = ChatServer()
    run = function_call("call_cmd", "RunCommand", json.dumps(args))
    chat.replies.append((200, completion("Running it.", [run], "tool_calls"), {}))
    chat.replies.append((200, completion("It may have run; I will look first."), {}))
    runs = tmp_path / "home" / "ada" / "runs.txt"
    async with serving(chat) as model:
        env = {
            "LONGRUN_PROVIDER": "openai",
            "LONGRUN_OPENAI_BASE_URL": model.base_url,
            "LONGRUN_OPENAI_API_KEY": "stub",
            "LONGRUN_MODEL": "stub-model",
            **STEADY_LEASE,
        }
        stack = Stack(spawn)
        await stack.start(**env)
        async with stack.http() as http:
            spec = {"tools": {"commands": True}}
            assert (await http.put("/v1/agents/ada", json={"spec": spec})).status_code == 201
            said = await http.post("/v1/agents/ada/messages", json={"text": "Run it."})
            assert said.status_code == 202, said.text

            async def started() -> bool:
                return runs.exists()

            await poll(started, "the command to start", within=240)
            stack.executors[0].kill9()

            async def gone() -> bool:
                return not running(marker)

            await poll(gone, "the command to die with its executor", within=30)
            await stack.add_executor(**env)

            async def retried() -> bool:
                return len(chat.requests) >= 2

            await poll(retried, "the retry turn's first model request", within=240)

            async def recorded() -> list[dict[str, Any]]:
                events = await history(http, "ada")
                return events if of_type(events, "tool_call_finished") else []

            events = await poll(recorded, "the unknown outcome recorded")
    (start,) = of_type(events, "tool_call_started")
    (end,) = of_type(events, "tool_call_finished")
    assert (start["data"]["server"], start["data"]["tool"]) == ("longrun.sandbox", "RunCommand")
    assert end["data"]["outcome"] == "unknown"
    assert notices(chat.requests[1]) == [
        f"call {start['data']['call_id']}: RunCommand({start['data']['arguments']}) was started "
        "by an interrupted turn; its outcome is unknown: check before repeating it"
    ]
    assert runs.read_text() == "ran\n"
