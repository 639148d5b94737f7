"""RunCommand in a builtin agent's turn, on the real ledger and the bubblewrap sandbox: offered
only when the spec turns `tools.commands` on and a sandbox works; each run recorded before and
after like an MCP call; bad input refused naming the field, with nothing run or recorded; a turn
that dies mid-command leaves its outcome unknown, the next turn is told, and it never runs
again."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from services.turn_executor.command_calls import CommandCalls
from services.turn_executor.run_command import RUN_COMMAND
from services.turn_executor.sandbox import (
    Bubblewrap,
    SandboxLimits,
    Unavailable,
    build_sandbox,
    default_extra_paths,
)
from shared.wire import commands as c
from tests.integration.test_executor_mcp import Tools
from tests.integration.test_executor_specs import put_spec
from tests.integration.test_executor_turns import AGENT, Executor, executor, home, script

pytestmark = pytest.mark.integration
__all__ = ["home"]
ON = {"tools": {"commands": True}}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Bubblewrap:
    probe = tmp_path_factory.mktemp("probe")
    built = build_sandbox("bubblewrap", probe, SandboxLimits(), default_extra_paths())
    assert isinstance(built, Bubblewrap), f"bubblewrap does not work here: {built.reason}"
    return built


@pytest.fixture
def run_with(*, pump: Any, redis: Any, names: Any, client: Any, home: Path, sandbox: Any) -> Any:
    """Builds an executor on the real ledger whose RunCommand runs in `sandbox`."""

    def build(provider: Any) -> Executor:
        run = executor(redis, names, client, home, provider)
        run.service.runner.commands = CommandCalls(sandbox, home, max_timeout_s=30)
        return run

    return build


def answers(provider: Tools) -> list[dict[str, Any]]:
    return [orjson.loads(m["content"]) for m in provider.asked[-1] if m["role"] == "tool"]


async def command_events(run: Executor) -> list[dict[str, Any]]:
    events = await run.reads.history(AGENT, limit=1000)
    return [e for e in events if e["type"].startswith("tool_call_")]


def calling(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": RUN_COMMAND, "arguments": args} for args in calls]}


async def test_a_command_runs_in_the_home_and_is_recorded_before_and_after(
    run_with, client, home
) -> None:
    provider = Tools(script(calling({"argv": ["python3", "-c", "print(6 * 7)"]}), {"text": "ok"}))
    run = run_with(provider)
    await put_spec(client, ON, "spec-on")
    assert await run.tick() is c.TurnOutcome.YIELDED
    assert RUN_COMMAND in provider.names[0]
    (answer,) = answers(provider)
    assert answer["status"] == "success", answer
    result = answer["result"]
    assert (result["exit_code"], result["stdout_tail"], result["timed_out"]) == (0, "42\n", False)
    started, finished = (e["data"] for e in await command_events(run))
    assert (started["server"], started["tool"]) == ("longrun.sandbox", RUN_COMMAND)
    assert started["call_id"] == finished["call_id"]
    assert (finished["outcome"], finished["result_chars"]) == ("ok", 3)
    assert run.metric("longrun_tool_calls_total", tool=RUN_COMMAND, status="success") == 1


async def test_commands_are_not_offered_unless_the_spec_asks_and_a_sandbox_works(
    run_with, client, home
) -> None:
    call = calling({"command": "touch ran"})
    provider = Tools(script(call, {"text": "a"}, call, {"text": "b"}))
    run = run_with(provider)
    await put_spec(client, {}, "spec-off")
    await run.tick()
    assert RUN_COMMAND not in provider.names[0]
    (refused,) = answers(provider)
    assert refused["error"]["kind"] == "unknown_tool"
    assert "tools.commands" in refused["error"]["message"]
    broken = Unavailable("bubblewrap fails: no user namespaces")
    run.service.runner.commands = CommandCalls(broken, home, max_timeout_s=30)
    await put_spec(client, ON, "spec-on")
    await run.tick()
    assert RUN_COMMAND not in provider.names[-1]
    (refused,) = answers(provider)
    assert "no user namespaces" in refused["error"]["message"]
    assert not (home / AGENT / "ran").exists()
    assert await command_events(run) == []


BAD_INPUT = [
    ({"argv": []}, "argv"),
    ({"command": "x" * 70_000}, "command"),
    ({"argv": ["ls"], "env": {"PATH": "/workspace/bin"}}, "env"),
    ({"argv": ["ls"], "cwd": "../other-agent"}, "cwd"),
    ({"argv": ["ls"], "cwd": "/etc"}, "cwd"),
    ({"argv": ["ls"], "timeout_s": 31}, "timeout_s"),
    ({"argv": ["ls"], "command": "ls"}, "(input)"),
]


async def test_bad_input_is_refused_naming_the_field_and_nothing_runs(
    run_with, client, home
) -> None:
    provider = Tools(script(calling(*(args for args, _ in BAD_INPUT)), {"text": "ok"}))
    run = run_with(provider)
    await put_spec(client, ON, "spec-on")
    await run.tick()
    refused = answers(provider)
    assert [a["error"]["kind"] for a in refused] == ["invalid_tool_input"] * len(BAD_INPUT)
    fields = [[p["field"] for p in a["error"]["details"]["errors"]] for a in refused]
    assert fields == [[field] for _, field in BAD_INPUT]
    assert await command_events(run) == []


async def test_a_turn_dying_mid_command_leaves_it_unknown_and_it_never_runs_again(
    run_with, client, home
) -> None:
    hang = calling({"command": "echo once >> runs.txt; sleep 1000"})
    provider = Tools(script(hang, {"text": "checked first"}, {"text": "later"}))
    run = run_with(provider)
    await put_spec(client, ON, "spec-on")
    runs = home / AGENT / "runs.txt"
    turn = asyncio.create_task(run.tick())
    async with asyncio.timeout(60):
        while not runs.exists():  # noqa: ASYNC110 - the sandboxed command writes it
            await asyncio.sleep(0.05)
    turn.cancel()  # the executor dies between the two records
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    await run.leases.redis.delete(run.leases.names.lease(AGENT))  # its lease expires
    (started,) = (e["data"] for e in await command_events(run))
    assert await run.reads.call_outcomes(AGENT, await run.reads.history(AGENT)) == {
        started["call_id"]: "unknown"
    }
    await run.tick()
    told = "\n".join(str(m["content"]) for m in provider.asked[-1] if m["role"] == "user")
    assert (
        f"call {started['call_id']}: {RUN_COMMAND}({started['arguments']}) was started by an "
        "interrupted turn; its outcome is unknown: check before repeating it"
    ) in told
    await run.tick()
    assert "was started by an interrupted turn" not in str(provider.asked[-1])
    assert runs.read_text() == "once\n"
