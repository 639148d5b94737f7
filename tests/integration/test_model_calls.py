"""Model calls of real turns against HTTP servers on loopback that speak the chat-completions and
the Anthropic Messages protocols: transient failures retried inside the turn, an outage that
outlasts the retries parks the agent without counting an attempt, a permanent failure counts one,
and every call's tokens are summed on the turn and per agent exactly as the server reported."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest

from services.turn_executor.models import Models
from services.turn_executor.providers import ProviderConfig
from shared.domain.model_failures import OutageBackoff, RetryPolicy
from shared.domain.scheduling import Hold, decide
from shared.domain.usage import sum_summaries
from shared.runtime import utc_now
from shared.store.snapshots import SnapshotReader
from shared.wire import commands as c
from tests.integration.test_executor_turns import (
    AGENT,
    current_item,
    ensure_agent,
    executor,
    history,
    owned_redis,  # noqa: F401
    say,
)
from tests.unit.test_provider_openai import ChatServer, completion, error_body, serving

pytestmark = pytest.mark.usefixtures("pump")


def used(prompt: int, cached: int, output: int, text: str = "Noted.") -> dict[str, Any]:
    """A final chat completion reporting these token counts."""
    body = completion(text)
    body["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return body


def openai_config(server: ChatServer, model: str = "stub-model") -> ProviderConfig:
    return ProviderConfig(kind="openai", base_url=server.base_url, model=model, max_retries=0)


def run_on(redis, names, client, home, config: ProviderConfig, **options: Any) -> Any:
    return executor(redis, names, client, home, None, models=Models(config, {}), **options)


async def test_three_429s_with_retry_after_then_success_complete_the_turn_once(
    redis, names, client, tmp_path
) -> None:
    busy = (429, error_body("slow down", "rate_limit"), {"Retry-After": "1"})
    async with serving(ChatServer(replies=[busy, busy, busy, (200, used(50, 0, 5), {})])) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app))
        await ensure_agent(client)
        await say(client, "Please note this.")
        started = time.monotonic()
        # Three waits of Retry-After's second each, longer than the 2 s lease: it is kept alive.
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        assert time.monotonic() - started >= 3.0
        await run.service.models.close()
    assert len(app.requests) == 4
    events = await history(run.reads)
    assert [e["data"]["outcome"] for e in events if e["type"] == "turn_finished"] == ["yielded"]
    calls = "longrun_model_calls_total"
    labels = {"provider": "openai", "model": "stub-model"}
    assert run.metric(calls, outcome="transient", **labels) == 3
    assert run.metric(calls, outcome="success", **labels) == 1


async def test_an_outage_longer_than_the_retries_parks_the_agent_without_an_attempt(
    redis, names, client, tmp_path
) -> None:
    down = (503, error_body("overloaded", "server_error"), {})
    retries = RetryPolicy(max_retries=2, base_s=0.01, cap_s=0.02)
    backoff = OutageBackoff(base_s=30, cap_s=1800)
    async with serving(ChatServer(replies=[down] * 3)) as app:
        config = openai_config(app)
        run = run_on(redis, names, client, tmp_path, config, retry=retries, backoff=backoff)
        await ensure_agent(client)
        item_id = await current_item(run)
        await say(client, "Keep going.")
        before = utc_now()
        assert await run.tick("input") is c.TurnOutcome.MODEL_UNAVAILABLE
        assert len(app.requests) == 3  # the first attempt and two retries

        record = await run.reads.agent_record(AGENT)
        assert record is not None
        assert record.failed_attempts.get(item_id, 0) == 0
        assert record.state.posture.value == "idle"
        outage = record.model_outage
        assert outage is not None
        assert (outage.provider, outage.status, outage.outages) == ("openai", 503, 1)
        assert (
            before + timedelta(seconds=30) <= outage.retry_at <= utc_now() + timedelta(seconds=30)
        )
        assert len(await run.reads.inbox(AGENT)) == 1  # shown again to the next turn
        events = await history(run.reads)
        (exhausted,) = [e for e in events if e["type"] == "model_retries_exhausted"]
        assert exhausted["data"]["retry_at"] == outage.retry_at.isoformat().replace("+00:00", "Z")
        briefs, _ = await run.reads.briefs(AGENT)
        assert [b.kind.value for b in briefs] == []

        # The scheduler holds the agent until retry_at, then wakes it.
        view = (await SnapshotReader(redis, names).load([AGENT]))[AGENT]
        held = decide(view.snapshot, utc_now())
        assert (held.hold, held.wake_at, held.tick) == (
            Hold.MODEL_UNAVAILABLE,
            outage.retry_at,
            None,
        )
        woken = decide(view.snapshot, outage.retry_at)
        assert woken.tick is not None
        assert woken.tick.kind.value == "input"

        app.replies.append((200, used(40, 0, 4), {}))
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    record = await run.reads.agent_record(AGENT)
    assert record is not None
    assert record.model_outage is None
    assert await run.reads.inbox(AGENT) == []
    assert run.metric("longrun_turns_total", outcome="model_unavailable") == 1


async def test_a_second_outage_in_a_row_waits_twice_as_long(redis, names, client, tmp_path) -> None:
    down = (500, error_body("boom", "server_error"), {})
    retries = RetryPolicy(max_retries=0)
    async with serving(ChatServer(replies=[down, down])) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app), retry=retries)
        await ensure_agent(client)
        await say(client, "Go.")
        assert await run.tick("input") is c.TurnOutcome.MODEL_UNAVAILABLE
        record = await run.reads.agent_record(AGENT)
        assert record is not None
        first = record.model_outage
        assert await run.tick("input") is c.TurnOutcome.MODEL_UNAVAILABLE
        record = await run.reads.agent_record(AGENT)
        assert record is not None
        second = record.model_outage
        await run.service.models.close()
    assert first is not None
    assert second is not None
    assert (first.outages, second.outages) == (1, 2)
    assert second.retry_at - first.retry_at >= timedelta(seconds=30)


async def test_a_400_fails_the_turn_and_counts_an_attempt(redis, names, client, tmp_path) -> None:
    refused = (400, error_body("context length exceeded", "invalid_request_error"), {})
    async with serving(ChatServer(replies=[refused])) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app))
        await ensure_agent(client)
        item_id = await current_item(run)
        assert await run.tick() is c.TurnOutcome.FAILED
        await run.service.models.close()
    assert len(app.requests) == 1  # never retried
    record = await run.reads.agent_record(AGENT)
    assert record is not None
    assert record.failed_attempts[item_id] == 1
    assert record.model_outage is None
    briefs, _ = await run.reads.briefs(AGENT, item_id)
    assert "context length exceeded" in briefs[-1].text
    assert "400" in briefs[-1].text


async def test_usage_sums_match_what_the_model_reported(redis, names, client, tmp_path) -> None:
    create = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "CreateWorkItem", "arguments": json.dumps({"objective": "Notes"})},
    }
    first = used(1200, 0, 30)
    first["choices"][0]["message"]["tool_calls"] = [create]
    first["choices"][0]["finish_reason"] = "tool_calls"
    replies = [(200, first, {}), (200, used(1300, 1024, 12), {}), (200, used(700, 512, 9), {})]
    async with serving(ChatServer(replies=replies)) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app, "m-1"))
        await ensure_agent(client)
        await say(client, "Take notes.")
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await say(client, "More notes.")
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    finished = [e for e in await history(run.reads) if e["type"] == "turn_finished"]
    assert [e["data"]["usage"]["input_tokens"] for e in finished] == [2500, 700]
    assert finished[0]["data"]["usage"]["by_model"] == {
        "openai/m-1": {
            "model_calls": 2,
            "input_tokens": 2500,
            "cached_input_tokens": 1024,
            "output_tokens": 42,
        }
    }
    # Both turns fell on today's row (a midnight between them would split them over two).
    summary = sum_summaries([d.summary() for d in await run.reads.usage_days(AGENT)])
    assert (summary.turns, summary.model_calls) == (2, 3)
    assert (summary.input_tokens, summary.cached_input_tokens, summary.output_tokens) == (
        3200,
        1536,
        51,
    )
    assert summary.by_model["openai/m-1"].model_calls == 3
    record = await run.reads.agent_record(AGENT)
    assert record is not None
    assert record.day_tokens is not None
    assert record.day_tokens.tokens == 3200 + 51
    tokens = "longrun_model_tokens_total"
    labels = {"provider": "openai", "model": "m-1"}
    assert run.metric(tokens, kind="input", **labels) == 3200
    assert run.metric(tokens, kind="cached_input", **labels) == 1536
    assert run.metric(tokens, kind="output", **labels) == 51


def anthropic_message(
    blocks: list[dict[str, Any]], stop: str, usage: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-stub",
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


async def test_an_anthropic_turn_caches_its_prefix_and_pairs_tool_results(
    redis, names, client, tmp_path
) -> None:
    tool_use = {
        "type": "tool_use",
        "id": "tu_1",
        "name": "CreateWorkItem",
        "input": {"objective": "Ship the notes"},
    }
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    replies = [
        (529, overloaded, {"retry-after-ms": "10"}),
        (
            200,
            anthropic_message(
                [{"type": "text", "text": "Recording it."}, tool_use],
                "tool_use",
                {
                    "input_tokens": 900,
                    "output_tokens": 40,
                    "cache_creation_input_tokens": 2000,
                    "cache_read_input_tokens": 0,
                },
            ),
            {},
        ),
        (
            200,
            anthropic_message(
                [{"type": "text", "text": "Recorded."}],
                "end_turn",
                {
                    "input_tokens": 120,
                    "output_tokens": 8,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 2000,
                },
            ),
            {},
        ),
    ]
    async with serving(ChatServer(replies=replies)) as app:
        config = ProviderConfig(
            kind="anthropic",
            base_url=app.base_url.removesuffix("/v1"),
            api_key="sk-ant-test",
            model="claude-stub",
            max_retries=0,
        )
        run = run_on(redis, names, client, tmp_path, config)
        await ensure_agent(client)
        await say(client, "Please ship the notes.")
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    _, first, second = app.requests
    assert first["path"] == "/v1/messages"
    assert first["model"] == "claude-stub"
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["system"] == second["system"]
    assert first["tools"] == second["tools"]
    assistant, results = second["messages"][-2:]
    assert assistant["content"][-1] == tool_use
    (result,) = results["content"]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", "tu_1")
    assert json.loads(result["content"])["status"] == "success"
    (item,) = await run.reads.all_items(AGENT)
    assert item.objective == "Ship the notes"
    (finished,) = [e for e in await history(run.reads) if e["type"] == "turn_finished"]
    assert finished["data"]["usage"]["by_model"]["anthropic/claude-stub"] == {
        "model_calls": 2,
        "input_tokens": 900 + 2000 + 120 + 2000,
        "cached_input_tokens": 2000,
        "output_tokens": 48,
    }
