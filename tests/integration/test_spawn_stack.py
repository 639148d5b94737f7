"""Agents that spawn agents, with every service a real process and the executor talking to a
chat-completions stub that answers each agent by what its request shows (so a retried turn is
answered the same way). A parent spawns a private child from a preset, in another partition;
the child's first WorkItem is bound to the delegation and its completion reaches the parent
once. The ledger and the executor are killed with SIGKILL right after the spawn is recorded:
still one child, one binding, one result."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_executor_search_bounds import STEADY_LEASE
from tests.unit.test_provider_openai import completion, function_call, serving

PARTITIONS = 4  # the stack fixtures' LONGRUN_PARTITIONS
RESEARCHER = {"instructions": "You find the cause of one failure.", "labels": {"role": "r"}}


def other_partition(agent: str, stem: str) -> str:
    """An id starting with `stem` whose partition is not `agent`'s."""
    home = zlib.crc32(agent.encode()) % PARTITIONS
    return next(
        f"{stem}{n}" for n in range(100) if zlib.crc32(f"{stem}{n}".encode()) % PARTITIONS != home
    )


def _agent_of(request: dict[str, Any]) -> str:
    system = request["messages"][0]["content"]
    found = re.match(r"You are (\S+), a long-lived agent", system)
    assert found is not None, system[:200]
    return found.group(1)


def _last_tool(request: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The tool and result the request ends with, if it ends with a tool answer."""
    last = request["messages"][-1]
    if last["role"] != "tool":
        return None
    envelope = json.loads(last["content"])
    return envelope["tool_name"], envelope.get("result") or {"error": envelope.get("error")}


def _call(name: str, args: dict[str, Any], text: str = "") -> dict[str, Any]:
    return completion(text, [function_call(f"c-{name}", name, json.dumps(args))], "tool_calls")


@dataclass
class TeamChat:
    """Answers `lead` and its child by what each request ends with. It remembers the delegation
    and the bound item as a model would read them in its summary, so a turn retried after a
    crash goes on with them instead of starting over."""

    child: str
    base_url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    delegation: str | None = None
    bound: str | None = None

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        agent = _agent_of(request)
        last = _last_tool(request)
        if agent == "lead":
            return self._lead(request, last)
        return self._child(request, last)

    def _wait(self) -> dict[str, Any]:
        wait = {"wake": "task_result", "resource": self.delegation, "reason": "the finding"}
        return _call("WaitFor", wait)

    def _lead(
        self, request: dict[str, Any], last: tuple[str, dict[str, Any]] | None
    ) -> dict[str, Any]:
        if last is None and self.delegation is None:
            return _call("CreateWorkItem", {"objective": "Find why the build is red"})
        if last is None:
            done = "Delegation result" in json.dumps(request)
            return completion("Noted.") if done else self._wait()
        tool, result = last
        if tool == "CreateWorkItem" and "work_item" in result:
            return _call("PickWorkItem", {"work_item_id": result["work_item"]["id"]})
        if tool == "PickWorkItem":
            args = {
                "kind": "private_child",
                "agent_id": self.child,
                "initial_message": "Find the flaky test behind the red build.",
                "preset": "researcher",
            }
            return _call("SpawnAgent", args)
        if tool == "SpawnAgent" and "delegation" in result:
            self.delegation = result["delegation"]["id"]
            return self._wait()
        return completion("Noted.")

    def _child(self, request: dict[str, Any], last: tuple[str, dict[str, Any]] | None) -> Any:
        if last is None and self.bound is not None:
            return _call("PickWorkItem", {"work_item_id": self.bound})
        if last is None and "spawned you" in json.dumps(request["messages"]):
            return _call("CreateWorkItem", {"objective": "Find the flaky test"})
        if last is not None:
            tool, result = last
            if tool == "CreateWorkItem" and "work_item" in result:
                item = result["work_item"]
                if item["delegated_from"] is not None:
                    self.bound = item["id"]
                return _call("PickWorkItem", {"work_item_id": item["id"]})
            if tool == "PickWorkItem" and "current_work_item" in result:
                item = result["current_work_item"]["id"]
                return _call("CompleteWorkItem", {"work_item_id": item}, "It was the clock test.")
        return completion("Done.")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        request = json.loads(body or b"{}")
        self.requests.append(request)
        raw = json.dumps(self.answer(request)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


def stub_env(base_url: str) -> dict[str, str]:
    return {
        "LONGRUN_PROVIDER": "openai",
        "LONGRUN_OPENAI_BASE_URL": base_url,
        "LONGRUN_OPENAI_API_KEY": "stub",
        "LONGRUN_MODEL": "stub-model",
        **STEADY_LEASE,
    }


async def _events(http: Any, agent: str, kind: str, count: int = 1) -> list[dict[str, Any]]:
    found = of_type(await history(http, agent), kind)
    return found if len(found) >= count else []


async def _shown_report(chat: TeamChat) -> bool:
    """A request of the parent shows the child's report (its task_result message)."""
    shown = [json.dumps(r) for r in chat.requests if _agent_of(r) == "lead"]
    return any("Delegation result" in s and "It was the clock test." in s for s in shown)


async def _exists(http: Any, agent: str) -> bool:
    return (await http.get(f"/v1/agents/{agent}")).status_code == 200


@pytest.mark.timeout(300)  # four service processes on a loaded machine
@pytest.mark.parametrize("crash", [False, True], ids=["steady", "kill9-after-spawn"])
async def test_a_spawned_childs_bound_item_reports_to_the_parent_once(
    spawn: Any, crash: bool
) -> None:
    child = other_partition("lead", "lead--finder-")
    chat = TeamChat(child=child)
    async with serving(chat) as model:
        stack = Stack(spawn, env={"LONGRUN_OUTBOX_RETRY_MS": "500"})
        await stack.start(**stub_env(model.base_url))
        async with stack.http() as http:
            put = await http.put("/v1/presets/researcher", json={"spec": RESEARCHER})
            assert put.status_code == 201, put.text
            assert (await http.put("/v1/agents/lead")).status_code == 201
            said = await http.post("/v1/agents/lead/messages", json={"text": "The build is red."})
            assert said.status_code == 202, said.text
            (spawned,) = await poll(lambda: _events(http, "lead", "agent_spawned"), "the spawn")
            if crash:
                ledger, executor = stack.services[0], stack.executors[0]
                for process in (ledger, executor):
                    process.kill9()
                for process in (ledger, executor):
                    process.start()
                for process in (ledger, executor):
                    await process.wait_ready()
            dlg = spawned["data"]["delegation"]["id"]
            await poll(lambda: _exists(http, child), "the child agent")
            (finished,) = await poll(
                lambda: _events(http, "lead", "delegation_finished"), "the result at the parent"
            )
            assert finished["data"]["status"] == "succeeded"
            assert finished["data"]["report"] == "It was the clock test."
            await poll(lambda: _shown_report(chat), "the parent's turn shown the report")
            lead = await history(http, "lead")
            kid = await history(http, child)
            records = (await http.get("/v1/agents/lead/delegations")).json()["delegations"]
            shown = (await http.get(f"/v1/agents/{child}")).json()
    # One child, created once, with the preset's spec and no WorkItem made for it.
    assert len(of_type(kid, "agent_created")) == 1
    assert shown["spec"]["instructions"] == RESEARCHER["instructions"]
    created = of_type(kid, "work_item_created")
    assert len(created) == 1
    bound_item = created[0]["work_item_id"]
    assert created[0]["data"]["work_item"]["delegated_from"]["delegation_id"] == dlg
    # One binding on each side, naming the same item.
    assert [e["data"]["child_work_item_id"] for e in of_type(kid, "delegation_bound")] == [
        bound_item
    ]
    assert [e["data"]["child_work_item_id"] for e in of_type(lead, "delegation_bound")] == [
        bound_item
    ]
    (record,) = [r for r in records if r["id"] == dlg]
    assert (record["status"], record["child_work_item_id"]) == ("succeeded", bound_item)
    # One result: one finished delegation; the parent's wait triggered once (a turn retried
    # after the crash may make its wait only after the result came).
    assert len(of_type(lead, "delegation_finished")) == 1
    triggers = [e for e in of_type(lead, "wait_triggered") if e["data"]["source"] == "task_result"]
    assert len(triggers) <= 1 if crash else len(triggers) == 1
    assert len(of_type(lead, "agent_spawned")) == 1
