"""Talking to an agent on real turns: a turn's final text becomes a `reply` brief naming the
messages it was shown, and operator messages that arrive while a turn runs join its next model
request (callbacks' evidence waits for the next turn), against a chat-completions server on
loopback that records every request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from services.ledger import store as ledger_store
from services.turn_executor.providers.scripted import ScriptedProvider
from shared.domain.records import BriefKind
from shared.ledger_client import LedgerClient
from shared.runtime import new_id
from shared.wire import commands as c
from tests.integration.test_executor_turns import (
    AGENT,
    ensure_agent,
    executor,
    owned_redis,  # noqa: F401
    say,
    token_hash,
)
from tests.integration.test_model_calls import openai_config, run_on, used
from tests.unit.test_provider_openai import ChatServer, completion, function_call, serving

pytestmark = pytest.mark.usefixtures("pump")


def listing(round_no: int) -> dict[str, Any]:
    """A round that calls one harmless tool, so the turn goes on."""
    calls = [function_call(f"call_{round_no}", "ListWorkItems", "{}")]
    return completion(f"Looking ({round_no}).", calls, "tool_calls")


async def requests_seen(app: ChatServer, count: int) -> None:
    """Return once the server has received `count` requests (polled: it has no event)."""
    async with asyncio.timeout(30):
        while len(app.requests) < count:  # noqa: ASYNC110 - the server offers nothing to await
            await asyncio.sleep(0.01)


async def deliver_to_inbox(client: LedgerClient, body: str) -> None:
    """A callback to the agent-scope URL with no external wait to trigger: external evidence
    delivered to the inbox."""
    delivery = new_id("d_")
    cmd = c.RecordCallback(
        command_id=delivery,
        agent_id=AGENT,
        token_hash=token_hash(f"callback-{AGENT}"),
        delivery_id=delivery,
        content_type="text/plain",
        body=body,
        source=c.CallbackSource.STREAM,
    )
    reply = await client.send(cmd)
    assert reply.result is not None
    assert reply.result["disposition"] == "delivered_to_inbox"


def user_texts(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "user")


async def test_a_turns_final_text_is_a_reply_brief_naming_the_message_it_answers(
    redis, names, client, tmp_path
) -> None:
    answer = used(80, 0, 6, text="  The deploy window is Tuesday 14:00 UTC.  ")
    async with serving(ChatServer(replies=[(200, answer, {})])) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app))
        await ensure_agent(client)
        await say(client, "When is the deploy window?")
        (message,) = await run.reads.inbox(AGENT)
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    assert "When is the deploy window?" in user_texts(app.requests[0])
    (brief,) = (await run.reads.briefs(AGENT))[0]
    assert brief.kind is BriefKind.REPLY
    assert brief.text == "The deploy window is Tuesday 14:00 UTC."
    assert brief.in_reply_to == (message.id,)
    events = await run.reads.history(AGENT, limit=1000)
    (recorded,) = [e for e in events if e["type"] == "brief_recorded"]
    assert recorded["data"]["brief"]["kind"] == "reply"


async def test_a_turn_without_final_text_or_that_failed_records_no_reply(
    redis, names, client, tmp_path
) -> None:
    refused = (400, {"error": {"message": "bad request", "type": "invalid_request_error"}}, {})
    replies = [(200, completion(""), {}), refused]
    async with serving(ChatServer(replies=replies)) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app))
        await ensure_agent(client)
        await say(client, "Anything?")
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await say(client, "Still there?")
        assert await run.tick("input") is c.TurnOutcome.FAILED
        await run.service.models.close()
    briefs, _ = await run.reads.briefs(AGENT)
    assert [b.kind for b in briefs] == [BriefKind.FAILURE]


async def test_a_promoted_report_is_the_answer_and_no_reply_is_recorded(
    redis, names, client, tmp_path
) -> None:
    run = executor(redis, names, client, tmp_path, ScriptedProvider())
    await ensure_agent(client)
    await say(client, "Write the summary.")
    outcomes = [await run.tick("input")]
    while outcomes[-1] is not c.TurnOutcome.COMPLETED and len(outcomes) < 10:
        outcomes.append(await run.tick())
    (item,) = await run.reads.all_items(AGENT)
    briefs, _ = await run.reads.briefs(AGENT, item.id)
    last_turn = [b for b in briefs if b.turn_id == briefs[-1].turn_id]
    assert [b.kind for b in last_turn] == [BriefKind.RESULT]
    # The yielded turns before it ended with text: each left one reply.
    replies = [b for b in (await run.reads.briefs(AGENT))[0] if b.kind is BriefKind.REPLY]
    assert len(replies) == len(outcomes) - 1


async def test_a_message_sent_while_a_ten_round_turn_runs_is_in_its_next_request(
    redis, names, client, tmp_path
) -> None:
    replies = [(200, listing(n), {}) for n in range(1, 10)]
    replies.append((200, used(20, 0, 4, text="Done; noted the new deadline."), {}))
    server = ChatServer(replies=replies, delay_s=0.15)
    async with serving(server) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app))
        await ensure_agent(client)
        await say(client, "Survey the work items, ten rounds' worth.")
        (first,) = await run.reads.inbox(AGENT)
        turn = asyncio.create_task(run.tick("input"))
        await requests_seen(app, 3)
        await say(client, "New deadline: Friday noon.")
        landed = len(app.requests)  # the request in flight cannot carry it
        assert await turn is c.TurnOutcome.YIELDED
        await run.service.models.close()
    assert len(app.requests) == 10
    carrying = [n for n, r in enumerate(app.requests) if "Friday noon" in user_texts(r)]
    assert carrying == list(range(landed, 10))  # from the next request on, once
    assert sum("Friday noon" in str(m["content"]) for m in app.requests[-1]["messages"]) == 1
    assert await run.reads.inbox(AGENT) == []  # consumed by the turn that saw it
    (reply,) = (await run.reads.briefs(AGENT))[0]
    assert reply.text == "Done; noted the new deadline."
    assert reply.in_reply_to[0] == first.id
    assert len(reply.in_reply_to) == 2
    entries = await run.reads.transcript(AGENT)
    assert any("Friday noon" in e["content"] and e["role"] == "user" for e in entries)


async def test_a_callback_delivered_during_a_turn_and_what_follows_wait_for_the_next_turn(
    redis, names, client, tmp_path
) -> None:
    replies = [(200, listing(1), {}), (200, listing(2), {}), (200, used(10, 0, 2), {})]
    replies.append((200, used(10, 0, 2, text="Read the evidence."), {}))
    async with serving(ChatServer(replies=replies, delay_s=0.15)) as app:
        run = run_on(redis, names, client, tmp_path, openai_config(app))
        await ensure_agent(client)
        await say(client, "Go.")
        turn = asyncio.create_task(run.tick("input"))
        await requests_seen(app, 1)
        await deliver_to_inbox(client, "build 7 passed")
        await say(client, "And after the evidence, this.")
        assert await turn is c.TurnOutcome.YIELDED
        assert not any("build 7 passed" in json.dumps(r["messages"]) for r in app.requests)
        # The operator message behind the evidence waits with it: the inbox is consumed in order.
        assert not any("after the evidence" in json.dumps(r["messages"]) for r in app.requests)
        assert len(await run.reads.inbox(AGENT)) == 2
        assert await run.tick("input") is c.TurnOutcome.YIELDED
        await run.service.models.close()
    last = json.dumps(app.requests[-1]["messages"])
    assert "build 7 passed" in last
    assert "after the evidence" in last
    assert await run.reads.inbox(AGENT) == []


async def test_replies_are_kept_to_the_newest_while_results_and_failures_stay(
    redis, names, client, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(ledger_store, "REPLIES_KEEP", 1)
    run = executor(redis, names, client, tmp_path, ScriptedProvider())
    await ensure_agent(client)
    await say(client, "Write the summary.")
    outcomes = [await run.tick("input")]
    while outcomes[-1] is not c.TurnOutcome.COMPLETED and len(outcomes) < 10:
        outcomes.append(await run.tick())
    assert len(outcomes) - 1 > 1  # more replies were written than are kept
    briefs, _ = await run.reads.briefs(AGENT)
    assert [b.kind for b in briefs] == [BriefKind.REPLY, BriefKind.RESULT]
    assert await redis.llen(names.reply_briefs(AGENT)) == 1
    events = await run.reads.history(AGENT, limit=1000)
    recorded = [e for e in events if e["type"] == "brief_recorded"]
    assert len(recorded) == len(outcomes)  # the history keeps every one
