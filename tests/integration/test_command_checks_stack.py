"""A `command` acceptance check end to end, every service a process and the model a
chat-completions stub: the agent writes code with a failing test, its check (`python -m pytest
-q` in the sandbox over its home) fails the attempt and says why, the agent fixes the code, and
the next attempt passes: the item is done once, with one acceptance_passed. And kill -9 of the
executor while a check runs fails that check closed (never a pass without a run)."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_executor_search_bounds import STEADY_LEASE
from tests.unit.test_provider_openai import completion, function_call, serving

CHECK = {"kind": "command", "run": "python -m pytest -q", "timeout_s": 60}
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def call(call_id: str, tool: str, args: dict[str, Any], text: str = "") -> dict[str, Any]:
    return completion(text, [function_call(call_id, tool, json.dumps(args))], "tool_calls")


@dataclass
class Coder:
    """Turn 1: create the gated item, pick it, write calc.py (broken) and its test, complete.
    Told the check failed: pick it again, fix calc.py, complete. Anything else: stop."""

    item_id: str = ""
    fixed: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        messages = request["messages"]
        steps = sum(1 for m in messages if m["role"] == "assistant")
        told_failed = any("command exited with" in str(m.get("content")) for m in messages)
        if not self.item_id or (steps > 0 and not self.fixed and not told_failed):
            return self._first(steps, messages)
        if told_failed and not self.fixed:
            return self._fix(steps)
        return completion("Nothing left to do.")

    def _first(self, steps: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if steps == 0:
            args = {"objective": "Write add() with a test", "plan_status": "ready"}
            return call("c1", "CreateWorkItem", {**args, "acceptance": [CHECK]})
        if steps == 1:
            tool = [m for m in messages if m["role"] == "tool"][-1]
            self.item_id = json.loads(tool["content"])["result"]["work_item"]["id"]
            return call("c2", "PickWorkItem", {"work_item_id": self.item_id})
        if steps == 2:
            return completion(
                "",
                [
                    function_call(
                        "c3", "WriteFile", json.dumps({"path": "calc.py", "content": BROKEN})
                    ),
                    function_call(
                        "c4", "WriteFile", json.dumps({"path": "test_calc.py", "content": TEST})
                    ),
                ],
                "tool_calls",
            )
        return call("c5", "CompleteWorkItem", {"work_item_id": self.item_id}, "add() is written.")

    def _fix(self, steps: int) -> dict[str, Any]:
        if steps == 0:
            return call(
                "f1", "PickWorkItem", {"work_item_id": self.item_id, "reason": "the check failed"}
            )
        if steps == 1:
            return call("f2", "WriteFile", {"path": "calc.py", "content": FIXED})
        self.fixed = True
        return call("f3", "CompleteWorkItem", {"work_item_id": self.item_id}, "add() adds now.")

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        raw = json.dumps(self.answer(json.loads(body))).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


def model_env(base_url: str) -> dict[str, str]:
    return {
        "LONGRUN_PROVIDER": "openai",
        "LONGRUN_OPENAI_BASE_URL": base_url,
        "LONGRUN_OPENAI_API_KEY": "sk-stub",
        "LONGRUN_MODEL": "stub-model",
        "LONGRUN_COMMAND_MAX_S": "60",
        **STEADY_LEASE,
    }


@pytest.mark.timeout(300)  # four service processes on a loaded machine
async def test_a_failing_test_fails_the_attempt_and_the_fixed_code_passes(spawn: Any) -> None:
    coder = Coder()
    async with serving(coder) as model:
        stack = Stack(spawn)
        await stack.start(**model_env(model.base_url))
        async with stack.http() as http:
            assert (await http.put("/v1/agents/coder")).status_code == 201
            said = await http.post("/v1/agents/coder/messages", json={"text": "Write add()."})
            assert said.status_code == 202, said.text

            async def passed() -> list[dict[str, Any]]:
                return of_type(await history(http, "coder"), "acceptance_passed")

            await poll(passed, "acceptance_passed", within=240)
            events = await history(http, "coder")
            shown = await http.get(f"/v1/agents/coder/work-items/{coder.item_id}")
            item = shown.json()["work_item"]
    failed = of_type(events, "acceptance_failed")
    assert len(failed) == 1
    reasons = json.dumps(failed[0]["data"])
    assert "command exited with 1" in reasons
    assert "assert -1 == 5" in reasons
    assert len(of_type(events, "acceptance_passed")) == 1
    assert item["outcome"] == "done"
    assert item["verification"]["attempt"] == 2
    assert item["verification"]["checks"][0]["passed"] is True
    assert item["verification"]["checks"][0]["decided_by"] == "command"


def running(marker: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.timeout(300)
async def test_an_executor_killed_while_a_check_runs_fails_it_closed(
    spawn: Any, tmp_path: Path
) -> None:
    marker = f"{secrets.randbelow(10**6) + 10**6}.25"
    check = {"kind": "command", "run": f"touch started; sleep {marker}", "timeout_s": 10}
    stack = Stack(spawn)
    await stack.start(LONGRUN_COMMAND_MAX_S="10", **STEADY_LEASE)
    async with stack.http() as http:
        assert (await http.put("/v1/agents/tester")).status_code == 201
        args = {
            "objective": "Prove it",
            "plan_status": "ready",
            "todo_list": [{"text": "Prove it", "state": "pending"}],
            "acceptance": [check],
        }
        made = await http.post("/v1/agents/tester/tools/CreateWorkItem", json={"args": args})
        assert made.status_code == 200, made.text
        started = tmp_path / "home" / "tester" / "started"

        async def check_running() -> bool:
            return started.exists()

        await poll(check_running, "the check's command to start", within=240)
        stack.executors[0].kill9()

        async def gone() -> bool:
            return not running(marker)

        await poll(gone, "the check's command to die with its executor", within=30)
        await stack.add_executor(LONGRUN_COMMAND_MAX_S="10", **STEADY_LEASE)

        async def failed() -> list[dict[str, Any]]:
            return of_type(await history(http, "tester"), "acceptance_failed")

        first, *_ = await poll(failed, "the check failed closed", within=240)
        events = await history(http, "tester")
    assert "the check runner stopped while running this check" in json.dumps(first["data"])
    assert of_type(events, "acceptance_passed") == []
