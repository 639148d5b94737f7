"""What turns leave, on the console in a real browser: the WorkItem page's process notes and the
recent process trace its next turn starts from, and the agent page's replies beside the reports,
escaped and updated in place as turns record rounds, write notes and finish."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from services.turn_executor.lease import Leases
from shared.domain.records import NoteCovers, ProcessNote
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.wire import commands as c
from shared.wire.names import Names
from tests.browser.conftest import Stack, new_agent_id, sign_in, wait
from tests.browser.test_console import signed_in_http, still_same_page, text_of

ATTACK = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def names_of(stack: Stack) -> Names:
    return Names(prefix=stack.env["LONGRUN_PREFIX"], partitions=4)


def take_lease(stack: Stack, redis_url: str, agent_id: str) -> int:
    """The fencing token of a turn lease on the agent, taken as a turn executor takes it."""

    async def go() -> int | None:
        redis = aioredis.from_url(redis_url)
        try:
            return await Leases(redis, names_of(stack), ttl_ms=60_000).acquire(agent_id, "test")
        finally:
            await redis.aclose()

    token = asyncio.run(go())
    assert token is not None
    return token


def send(stack: Stack, redis_url: str, *commands: c.Command) -> None:
    """Commands straight to the ledger process, as a turn executor sends them."""

    async def go() -> None:
        redis = aioredis.from_url(redis_url)
        client = LedgerClient(redis, names_of(stack), clock=utc_now, new_id=new_id, timeout=10.0)
        try:
            for command in commands:
                reply = await client.send(command)
                assert reply.error is None, reply.error
        finally:
            await client.stop()
            await redis.aclose()

    asyncio.run(go())


def rounds(agent_id: str, turn_id: str, work_item_id: str, said: str) -> c.RecordTranscript:
    """One recorded round: a ReadFile call and its result, as a turn records them."""
    entries = [
        c.TranscriptEntry(role="user", content="the prompt is not part of the trace", round=1),
        c.TranscriptEntry(
            role="assistant", content='{"path": "notes.txt"}', round=1, tool_name="ReadFile"
        ),
        c.TranscriptEntry(role="tool", content=said, round=1, tool_name="ReadFile"),
    ]
    return c.RecordTranscript(
        command_id=f"{turn_id}:transcript",
        agent_id=agent_id,
        turn_id=turn_id,
        work_item_id=work_item_id,
        entries=tuple(entries),
    )


def test_the_work_item_page_shows_notes_and_trace_live_and_escaped(
    browser: WebDriver, stack: Stack, redis_url: str
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    item = stack.tool(agent_id, "CreateWorkItem", {"objective": "audit the vault"})
    item_id = item["result"]["work_item"]["id"]
    other = stack.tool(agent_id, "CreateWorkItem", {"objective": "another item"})
    other_id = other["result"]["work_item"]["id"]
    sign_in(browser, stack)
    browser.get(f"{stack.url}/ui/agents/{agent_id}")
    browser.find_element(By.CSS_SELECTOR, f"[data-work-item='{item_id}'] a.work-link").click()
    wait(browser).until(lambda d: d.current_url.endswith(f"/work-items/{item_id}"))
    wait(browser).until(lambda d: d.execute_script("return window.longrunLive.opened") >= 1)
    browser.execute_script("window.__not_reloaded = true;")
    assert "No process notes yet" in text_of(browser, ".notes")
    assert "Nothing recorded" in text_of(browser, ".trace")

    first, second = new_id("turn_"), new_id("turn_")
    send(
        stack,
        redis_url,
        rounds(agent_id, first, item_id, f"{ATTACK} vault code 7319"),
        rounds(agent_id, second, item_id, "second turn read the log"),
        rounds(agent_id, new_id("turn_"), other_id, "a round of another item"),
    )
    wait(browser).until(lambda d: "second turn read the log" in text_of(d, ".trace"))
    trace = text_of(browser, ".trace")
    assert f"{ATTACK} vault code 7319" in trace
    assert "call ReadFile" in trace
    assert "a round of another item" not in trace
    assert "the prompt is not part of the trace" not in trace

    note = ProcessNote(
        id=new_id("note_"),
        work_item_id=item_id,
        text=f"{ATTACK} the vault code is 7319",
        covers=NoteCovers(from_turn=first, to_turn=first),
        created_at=utc_now(),
    )
    send(
        stack,
        redis_url,
        c.CompactWorkItem(
            command_id=f"{second}:compact",
            agent_id=agent_id,
            turn_id=second,
            fencing_token=take_lease(stack, redis_url, agent_id),
            work_item_id=item_id,
            notes=(note,),
        ),
    )
    wait(browser).until(lambda d: "the vault code is 7319" in text_of(d, ".notes"))
    assert f"{ATTACK} the vault code is 7319" in text_of(browser, ".notes")
    # The note covers the first turn: the trace now starts after it.
    wait(browser).until(lambda d: "vault code 7319" not in text_of(d, ".trace"))
    assert "second turn read the log" in text_of(browser, ".trace")
    assert still_same_page(browser), "the page reloaded instead of updating in place"
    assert browser.find_elements(By.CSS_SELECTOR, ".memory script, .memory img") == []
    assert browser.execute_script("return window.__pwned === undefined") is True

    # Another agent's WorkItem, or no WorkItem at all, is not shown under this agent.
    stranger = new_agent_id()
    stack.create_agent(stranger, loop="external")
    with signed_in_http(browser, stack) as http:
        for wanted in (item_id, "wi_missing", "not-an-id"):
            answer = http.get(f"/ui/agents/{stranger}/work-items/{wanted}")
            assert answer.status_code == 404, (wanted, answer.status_code)


def test_the_agent_page_shows_a_turns_reply_beside_the_reports_live_and_escaped(
    browser: WebDriver, stack: Stack, redis_url: str
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id)
    item = stack.tool(agent_id, "CreateWorkItem", {"objective": "ship the notes"})
    item_id = item["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": item_id})
    stack.tool(
        agent_id, "CompleteWorkItem", {"work_item_id": item_id}, assistant_text="Notes shipped."
    )
    with stack.api() as api:
        answer = api.post(f"/v1/agents/{agent_id}/messages", json={"text": "Which notes?"})
    assert answer.status_code in (200, 201, 202), answer.text
    message_id = answer.json()["message_id"]
    sign_in(browser, stack)
    browser.get(f"{stack.url}/ui/agents/{agent_id}")
    wait(browser).until(lambda d: d.execute_script("return window.longrunLive.opened") >= 1)
    browser.execute_script("window.__not_reloaded = true;")
    assert "Notes shipped." in text_of(browser, "section.briefs")
    assert "result" in text_of(browser, "section.briefs")

    # A turn that answers the operator's message and promotes no report leaves a reply.
    turn_id = new_id("turn_")
    token = take_lease(stack, redis_url, agent_id)
    begin = c.BeginTurn(
        command_id=f"{turn_id}:begin", agent_id=agent_id, turn_id=turn_id, fencing_token=token,
        tick_id=new_id("tick_"), tick_kind="input", inbox_shown=(message_id,),
    )  # fmt: skip
    finish = c.FinishTurn(
        command_id=f"{turn_id}:finish", agent_id=agent_id, turn_id=turn_id, fencing_token=token,
        outcome=c.TurnOutcome.YIELDED, inbox_consumed=1, answered=(message_id,),
        reply_text=f"{ATTACK} The release notes for 1.2.",
    )  # fmt: skip
    send(stack, redis_url, begin, finish)

    wait(browser).until(lambda d: "release notes for 1.2" in text_of(d, "section.briefs"))
    newest = text_of(browser, "section.briefs li.brief")
    assert f"{ATTACK} The release notes for 1.2." in newest
    assert "reply" in newest
    assert f"answers {message_id}" in newest
    assert "Notes shipped." in text_of(browser, "section.briefs")
    assert still_same_page(browser), "the page reloaded instead of updating in place"
    assert browser.find_elements(By.CSS_SELECTOR, ".briefs script, .briefs img") == []
    assert browser.execute_script("return window.__pwned === undefined") is True
