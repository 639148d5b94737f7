"""A turn driven by the openai provider against a local chat-completions server: the tool calls
run against the real ledger, and their answers (malformed JSON included) go back to the model in
the next request, in the wire format."""

from __future__ import annotations

import json

import pytest

from services.turn_executor.providers import ProviderConfig, build_provider
from shared.wire import commands as c
from tests.integration.test_executor_turns import (
    AGENT,
    ensure_agent,
    executor,
    history,
    owned_redis,  # noqa: F401
    say,
)
from tests.unit.test_provider_openai import ChatServer, completion, function_call, serving


@pytest.mark.usefixtures("pump")
async def test_an_openai_turn_runs_tools_and_returns_their_answers_to_the_model(
    redis, names, client, tmp_path
) -> None:
    calls = [
        function_call("call_1", "CreateWorkItem", json.dumps({"objective": "Ship the notes"})),
        function_call("call_2", "GetWorkItem", '{"work_item_id": '),
    ]
    app = ChatServer()
    app.replies.append((200, completion("Recording it.", calls, "tool_calls"), {}))
    app.replies.append((200, completion("Recorded; more next turn."), {}))
    async with serving(app) as server:
        provider = build_provider(
            ProviderConfig(kind="openai", base_url=server.base_url, model="stub", max_retries=0)
        )
        run = executor(redis, names, client, tmp_path / "home", provider)
        await ensure_agent(client)
        await say(client, "Please ship the notes.")
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await provider.close()

    first, second = app.requests
    assert first["messages"][0]["role"] == "system"
    assert any("Operator message" in str(m["content"]) for m in first["messages"])
    assistant, created, malformed = second["messages"][-3:]
    assert assistant["role"] == "assistant"
    assert [t["id"] for t in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert (created["role"], created["tool_call_id"]) == ("tool", "call_1")
    assert json.loads(created["content"])["status"] == "success"
    assert malformed["tool_call_id"] == "call_2"
    assert json.loads(malformed["content"])["error"]["kind"] == "invalid_tool_input"
    (item,) = await run.reads.all_items(AGENT)
    assert item.objective == "Ship the notes"
    events = [e["type"] for e in await history(run.reads)]
    assert events[-2:] == ["turn_finished", "brief_recorded"]  # its final text, a reply
    assert await run.reads.inbox(AGENT) == []
