"""The agent spec reaches the model side of real turns: `spec.model` picks the provider and model
a turn talks to, and `limits.daily_token_budget` is the budget the scheduler holds the agent by."""

from __future__ import annotations

import pytest

from services.turn_executor.models import SCRIPTED_MODEL, Models
from services.turn_executor.providers import ProviderConfig
from shared.domain.scheduling import Hold, decide
from shared.runtime import utc_now
from shared.store.snapshots import SnapshotReader
from shared.wire import commands as c
from tests.integration.test_executor_specs import FRENCH, put_spec
from tests.integration.test_executor_turns import (
    AGENT,
    executor,
    owned_redis,  # noqa: F401
    say,
)
from tests.integration.test_model_calls import anthropic_message, openai_config, used
from tests.unit.test_provider_openai import ChatServer, serving

pytestmark = pytest.mark.usefixtures("pump")


async def test_the_specs_model_picks_provider_model_and_temperature(
    redis, names, client, tmp_path
) -> None:
    async with serving(ChatServer(replies=[(200, used(30, 0, 3), {})])) as app:
        # The executor's default is the scripted provider: only the spec sends the turn to openai.
        default = ProviderConfig(kind="scripted", model=SCRIPTED_MODEL)
        models = Models(default, {"openai": openai_config(app, "env-model")})
        run = executor(redis, names, client, tmp_path, None, models=models)
        model = {"provider": "openai", "name": "spec-model", "temperature": 0.25}
        await put_spec(client, {"model": model}, "spec-1")
        await say(client, "Please note this.")
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    (request,) = app.requests
    assert (request["model"], request["temperature"]) == ("spec-model", 0.25)
    calls = "longrun_model_calls_total"
    assert run.metric(calls, provider="openai", model="spec-model", outcome="success") == 1


async def test_the_specs_daily_token_budget_holds_the_agent_once_spent(
    redis, names, client, tmp_path
) -> None:
    await put_spec(client, {"limits": {"daily_token_budget": 100}}, "spec-1")
    async with serving(ChatServer(replies=[(200, used(90, 0, 20), {})])) as app:
        run = executor(redis, names, client, tmp_path, None, models=Models(openai_config(app), {}))
        record = await run.reads.agent_record(AGENT)
        assert record is not None
        assert record.daily_token_budget == 100
        await say(client, "Please note this.")
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    view = (await SnapshotReader(redis, names).load([AGENT]))[AGENT]
    held = decide(view.snapshot, utc_now())
    assert (held.hold, held.tick) == (Hold.TOKEN_BUDGET_EXHAUSTED, None)
    assert held.token_budget is not None
    assert (held.token_budget.used, held.token_budget.limit) == (110, 100)

    # A raised limit in a new spec version reaches the record and lifts the hold.
    await put_spec(client, {"limits": {"daily_token_budget": 1000}}, "spec-2")
    record = await run.reads.agent_record(AGENT)
    assert record is not None
    assert record.daily_token_budget == 1000
    await say(client, "Go on.")
    view = (await SnapshotReader(redis, names).load([AGENT]))[AGENT]
    woken = decide(view.snapshot, utc_now())
    assert woken.tick is not None
    assert woken.tick.kind.value == "input"


async def test_the_specs_instructions_and_model_reach_the_openai_request_byte_stable(
    redis, names, client, tmp_path
) -> None:
    async with serving(ChatServer(replies=[(200, used(30, 0, 3), {})] * 2)) as app:
        default = ProviderConfig(kind="scripted", model=SCRIPTED_MODEL)
        models = Models(default, {"openai": openai_config(app, "env-model")})
        run = executor(redis, names, client, tmp_path, None, models=models)
        spec = {"instructions": FRENCH, "model": {"provider": "openai", "name": "gpt-spec"}}
        await put_spec(client, spec, "spec-1")
        for text in ("Please note this.", "And this."):
            await say(client, text)
            assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    first, second = app.requests
    assert (first["model"], second["model"]) == ("gpt-spec", "gpt-spec")
    system = first["messages"][0]
    assert system["role"] == "system"
    assert system["content"].endswith(f"{FRENCH}\n")
    assert (first["messages"][0], first["tools"]) == (second["messages"][0], second["tools"])


async def test_the_specs_instructions_and_model_reach_the_anthropic_request_byte_stable(
    redis, names, client, tmp_path
) -> None:
    usage = {"input_tokens": 50, "output_tokens": 4}
    answer = anthropic_message([{"type": "text", "text": "Noted."}], "end_turn", usage)
    async with serving(ChatServer(replies=[(200, answer, {})] * 2)) as app:
        anthropic = ProviderConfig(
            kind="anthropic",
            base_url=app.base_url.removesuffix("/v1"),
            api_key="sk-ant-test",
            model="claude-env",
            max_retries=0,
        )
        models = Models(
            ProviderConfig(kind="scripted", model=SCRIPTED_MODEL), {"anthropic": anthropic}
        )
        run = executor(redis, names, client, tmp_path, None, models=models)
        spec = {"instructions": FRENCH, "model": {"provider": "anthropic", "name": "claude-spec"}}
        await put_spec(client, spec, "spec-1")
        for text in ("Please note this.", "And this."):
            await say(client, text)
            assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    first, second = app.requests
    assert (first["model"], second["model"]) == ("claude-spec", "claude-spec")
    assert FRENCH in first["system"][-1]["text"]
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert (first["system"], first["tools"]) == (second["system"], second["tools"])
