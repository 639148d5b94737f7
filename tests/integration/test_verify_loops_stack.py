"""The verification loops closed, with every service a real process and the executor talking to
a chat-completions stub whose agents never learn: a worker that completes its item whatever it
is told, and a reviewer that rejects every report. The model requests are counted.

- A webhook check that always fails: after 3 failed attempts the item is blocked for the
  operator and no further turn runs (before: a model turn and a webhook call each cycle, for
  ever, since the failure message woke the agent without spending its wake budget).
- A worker/reviewer pair that always rejects (the attempt limit set far away): each side's
  turns spend its wake budget, so the pair stops when the worker's budget is spent (before:
  every review item reset the reviewer's budget and every failure message was free, so the
  pair ping-ponged for ever)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.integration.stack import Stack, history, of_type, poll
from tests.integration.test_executor_search_bounds import STEADY_LEASE
from tests.integration.webhook_server import WebhookServer
from tests.unit.test_provider_openai import completion, function_call, serving

QUIET_S = 4.0
"""How long a stopped loop is watched for a turn it must not take (an absence has no event to
wait for; on an idle machine the next cycle would start within a second)."""
AGENT = re.compile(r"You are (\S+), a long-lived agent")
ARRIVED = re.compile(r"delegated WorkItem (wi_[0-9A-Za-z]+) to you")


@dataclass
class StubbornModel:
    """A chat-completions endpoint for two stubborn agents: `worker` picks and completes its
    item in every turn; `reviewer` picks the newest review item and rejects it. A request that
    follows tool results ends the turn with text."""

    worker: str
    reviewer: str = ""
    item: str = ""
    requests: dict[str, int] = field(default_factory=dict)
    base_url: str = ""

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        request = json.loads(body or b"{}")
        payload = self.answer(request.get("messages", []))
        raw = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})

    def answer(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        found = AGENT.search(str(messages[0].get("content", ""))) if messages else None
        agent = found.group(1) if found else "?"
        self.requests[agent] = self.requests.get(agent, 0) + 1
        if messages and messages[-1].get("role") == "tool":
            return completion("That is all for this turn.")
        if agent == self.worker:
            return self._calls(
                "Shipped: the change is in.",
                ("PickWorkItem", {"work_item_id": self.item}),
                ("CompleteWorkItem", {"work_item_id": self.item}),
            )
        if agent == self.reviewer:
            reviews = ARRIVED.findall(json.dumps(messages))
            if reviews:
                verdict = {
                    "work_item_id": reviews[-1],
                    "passed": False,
                    "reason": "not good enough",
                }
                return self._calls(
                    "Rejected.",
                    ("PickWorkItem", {"work_item_id": reviews[-1]}),
                    ("SubmitVerdict", verdict),
                )
        return completion("Nothing to do.")

    def _calls(self, text: str, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        made = [
            function_call(f"call_{n}_{sum(self.requests.values())}", name, json.dumps(args))
            for n, (name, args) in enumerate(calls)
        ]
        return completion(text, made, "tool_calls")


@pytest.fixture
async def hooks() -> AsyncIterator[WebhookServer]:
    started = await WebhookServer().start()
    yield started
    await started.stop()


def stub_env(base_url: str) -> dict[str, str]:
    return {
        "LONGRUN_PROVIDER": "openai",
        "LONGRUN_OPENAI_BASE_URL": base_url,
        "LONGRUN_OPENAI_API_KEY": "stub",
        "LONGRUN_MODEL": "stub-model",
        **STEADY_LEASE,
    }


async def operator_item(http: httpx.AsyncClient, agent: str, check: dict[str, Any]) -> str:
    args = {"objective": "Ship the change", "plan_status": "ready", "acceptance": [check]}
    made = await http.post(f"/v1/agents/{agent}/tools/CreateWorkItem", json={"args": args})
    assert made.status_code == 200, made.text
    return str(made.json()["result"]["work_item"]["id"])


async def work_item(http: httpx.AsyncClient, agent: str, item: str) -> dict[str, Any]:
    answer = await http.get(f"/v1/agents/{agent}/work-items/{item}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["work_item"])


async def settled(http: httpx.AsyncClient, agent: str) -> bool:
    """No turn running and none about to: every started turn finished, no tick outstanding."""
    events = await history(http, agent)
    started = len(of_type(events, "turn_started"))
    ended = len(of_type(events, "turn_finished"))
    view = (await http.get(f"/v1/agents/{agent}")).json()
    return started == ended and view["posture"] != "running"


@pytest.mark.timeout(300)  # four service processes on a loaded machine
async def test_a_webhook_that_always_fails_blocks_the_item_after_3_attempts(
    spawn: Any, hooks: WebhookServer
) -> None:
    model = StubbornModel(worker="hooked")
    async with serving(model):
        stack = Stack(spawn, env={"LONGRUN_WEBHOOK_SECRET": "stack-secret"})
        await stack.start(**stub_env(model.base_url))
        async with stack.http() as http:
            assert (await http.put("/v1/agents/hooked")).status_code == 201
            check = {"kind": "webhook", "url": hooks.url("/fail"), "timeout_s": 30}
            model.item = await operator_item(http, "hooked", check)

            async def held() -> dict[str, Any] | None:
                item = await work_item(http, "hooked", model.item)
                return item if (item.get("verification") or {}).get("held_for_operator") else None

            item = await poll(held, "the item held for the operator", within=180)
            assert item["blocked_by"] == "acceptance failed 3 times: webhook: 3 tests fail"
            assert item["state"] == "open"
            await poll(lambda: settled(http, "hooked"), "the agent to settle")
            requests = dict(model.requests)
            turns = len(of_type(await history(http, "hooked"), "turn_started"))
            await asyncio.sleep(QUIET_S)
            assert model.requests == requests, "a turn ran after the item was held"
            events = await history(http, "hooked")
            assert len(of_type(events, "turn_started")) == turns
            assert len(of_type(events, "acceptance_failed")) == 3
            assert len(hooks.received) == 3  # one webhook call per attempt, no more
            # Three turns completed it, one more was told it is blocked (its CompleteWorkItem
            # refused); at most two model requests each.
            assert turns == 4, turns
            assert set(requests) == {"hooked"}
            assert requests["hooked"] <= 2 * turns
            print(f"model requests in all: {requests['hooked']} over {turns} turns")
            view = (await http.get("/v1/agents/hooked")).json()
            assert view["posture"] == "dormant"
            # The operator moves it: approval completes it with the last report.
            verdict = await http.post(
                f"/v1/agents/hooked/work-items/{model.item}/verdict",
                json={"passed": True, "note": "the webhook is broken; approved by hand"},
            )
            assert verdict.status_code == 200, verdict.text
            done = await work_item(http, "hooked", model.item)
            assert done["outcome"] == "done"


@pytest.mark.timeout(300)
async def test_a_reviewer_that_always_rejects_stops_at_the_wake_budget(spawn: Any) -> None:
    model = StubbornModel(worker="writer", reviewer="critic")
    budget = {"spec": {"limits": {"wake_budget": 3}}}
    async with serving(model):
        # The attempt limit far away: only the wake budget can stop this pair.
        stack = Stack(spawn, env={"LONGRUN_MAX_VERIFY_ATTEMPTS": "100"})
        await stack.start(**stub_env(model.base_url))
        async with stack.http() as http:
            for agent in ("writer", "critic"):
                made = await http.put(f"/v1/agents/{agent}", json=budget)
                assert made.status_code == 201, made.text
            check = {"kind": "reviewer_agent", "agent_id": "critic"}
            model.item = await operator_item(http, "writer", check)

            async def spent() -> dict[str, Any] | None:
                view = (await http.get("/v1/agents/writer")).json()
                why = view.get("why_not_running") or {}
                return view if why.get("kind") == "wake_budget_exhausted" else None

            await poll(spent, "the writer's wake budget spent", within=240)
            for agent in ("writer", "critic"):
                await poll(lambda agent=agent: settled(http, agent), f"{agent} to settle")
            requests = dict(model.requests)
            await asyncio.sleep(QUIET_S)
            assert model.requests == requests, "the pair kept turning after the budget"
            writer = await history(http, "writer")
            critic = await history(http, "critic")
            # Each of the writer's 3 turns completed the item once; each attempt had one review.
            assert len(of_type(writer, "turn_started")) == 3
            assert len(of_type(writer, "acceptance_failed")) == 3
            assert len(of_type(critic, "turn_started")) == 3
            assert not of_type(critic, "wake_budget_reset")
            item = await work_item(http, "writer", model.item)
            assert item["verification"]["attempt"] == 3
            assert not item["verification"]["held_for_operator"]
            # An operator message is fresh input: it wakes the writer again.
            said = await http.post("/v1/agents/writer/messages", json={"text": "Try once more."})
            assert said.status_code == 202
            await poll(
                lambda: _more_turns(http, "writer", 3), "the writer's turn after the message"
            )


async def _more_turns(http: httpx.AsyncClient, agent: str, than: int) -> bool:
    return len(of_type(await history(http, agent), "turn_started")) > than
