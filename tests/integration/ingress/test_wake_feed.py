"""The per-agent wake feed (`GET /v1/agents/{id}/wakes`) of an ingress process beside a real
ledger: Server-Sent Events and long poll, each agent's own ticks only, resumable by tick id,
bad input refused, a disconnect mid-stream leaves nothing behind, and a stopping ingress ends
its open feeds. Ticks are written to `<prefix>:wakes` as the scheduler writes them (the stack
test with a real scheduler is tests/integration/test_external_loop.py)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from services.ingress.wake_feed import WakeFeed
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration.ingress.conftest import (
    OPERATOR_TOKEN,
    STOPPED,
    new_agent_id,
    stack_env,
    start_ingress,
)

pytestmark = pytest.mark.timeout(300)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def external_agent(http: httpx.AsyncClient) -> tuple[str, str]:
    agent_id = new_agent_id()
    answer = await http.put(
        f"/v1/agents/{agent_id}", headers=bearer(OPERATOR_TOKEN), json={"loop": "external"}
    )
    assert answer.status_code == 201, answer.text
    return agent_id, answer.json()["agent_token"]


async def publish(redis: AnyRedis, names: Names, agent_id: str, n: int) -> str:
    """One tick on `<prefix>:wakes` in the scheduler's fields; its entry id."""
    candidates = [{"work_item_id": f"wi_{n}", "candidate_class": "queued"}]
    fields = {
        "agent_id": agent_id,
        "kind": "pick_queued",
        "work_item_id": "",
        "candidates": orjson.dumps(candidates),
        "tick_id": f"tk_{agent_id}_{n}",
    }
    entry_id: Any = await redis.xadd(names.wakes, fields)
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def poll(http: httpx.AsyncClient, agent_id: str, token: str, **params: Any) -> httpx.Response:
    return await http.get(f"/v1/agents/{agent_id}/wakes", headers=bearer(token), params=params)


async def sse_ticks(
    http: httpx.AsyncClient, agent_id: str, token: str, count: int, last_event_id: str | None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(id, tick) of the first `count` events of a stream, then the stream is dropped."""
    headers = bearer(token) | ({"Last-Event-ID": last_event_id} if last_event_id else {})
    async with http.stream("GET", f"/v1/agents/{agent_id}/wakes", headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        got = 0
        event_id: str | None = None
        async for line in answer.aiter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                assert event_id is not None
                yield event_id, orjson.loads(line[6:])
                got += 1
                if got == count:
                    return


async def test_a_long_poll_answers_its_own_agents_ticks_from_the_cursor_on(
    http: httpx.AsyncClient, redis: AnyRedis, names: Names
) -> None:
    ada, ada_token = await external_agent(http)
    bob, bob_token = await external_agent(http)
    start = await poll(http, ada, ada_token, wait_s=0)
    assert start.status_code == 200, start.text
    assert start.json()["ticks"] == []
    cursor = start.json()["next_cursor"]
    mine = [await publish(redis, names, ada, 1)]
    await publish(redis, names, bob, 1)
    mine.append(await publish(redis, names, ada, 2))

    page = (await poll(http, ada, ada_token, wait_s=0, cursor=cursor)).json()
    assert [t["id"] for t in page["ticks"]] == mine
    assert {t["agent_id"] for t in page["ticks"]} == {ada}
    first = page["ticks"][0]
    assert first["tick_id"] == f"tk_{ada}_1"
    assert first["kind"] == "pick_queued"
    assert first["work_item_id"] is None
    assert first["candidates"] == [{"work_item_id": "wi_1", "candidate_class": "queued"}]
    assert page["next_cursor"] == mine[-1]
    again = (await poll(http, ada, ada_token, wait_s=0, cursor=page["next_cursor"])).json()
    assert again == {"ticks": [], "next_cursor": mine[-1]}
    theirs = (await poll(http, bob, bob_token, wait_s=0, cursor=cursor)).json()
    assert [t["tick_id"] for t in theirs["ticks"]] == [f"tk_{bob}_1"]


async def test_a_long_poll_waits_for_the_next_tick(
    http: httpx.AsyncClient, redis: AnyRedis, names: Names
) -> None:
    ada, token = await external_agent(http)
    cursor = (await poll(http, ada, token, wait_s=0)).json()["next_cursor"]
    waiting = asyncio.create_task(poll(http, ada, token, wait_s=60, cursor=cursor))
    await asyncio.sleep(0.5)  # the poll is most likely waiting; either way it must answer
    await publish(redis, names, new_agent_id(), 1)  # someone else's tick does not end it
    sent = await publish(redis, names, ada, 7)
    answer = await asyncio.wait_for(waiting, 60)
    assert [t["id"] for t in answer.json()["ticks"]] == [sent]


async def test_only_the_agents_own_token_opens_its_feed(http: httpx.AsyncClient) -> None:
    ada, _ = await external_agent(http)
    _, bob_token = await external_agent(http)
    other = await poll(http, ada, bob_token, wait_s=0)
    assert other.status_code == 403
    assert other.json()["error"]["kind"] == "forbidden"
    operator = await poll(http, ada, OPERATOR_TOKEN, wait_s=0)
    assert operator.status_code == 403
    assert (await http.get(f"/v1/agents/{ada}/wakes", params={"wait_s": 0})).status_code == 401
    assert (await poll(http, ada, "nope", wait_s=0)).status_code == 401


@pytest.mark.parametrize(
    "params",
    [
        {"wait_s": 61},
        {"wait_s": -1},
        {"wait_s": "soon"},
        {"wait_s": 0, "cursor": "not-an-id"},
        {"wait_s": 0, "cursor": "99999999999999-0"},
        {"wait_s": 0, "cursor": "1-2-3"},
        {"cursor": "1-0"},
    ],
)
async def test_bad_feed_input_is_400(http: httpx.AsyncClient, params: dict[str, Any]) -> None:
    ada, token = await external_agent(http)
    answer = await poll(http, ada, token, **params)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["kind"] == "invalid_request"


@pytest.mark.parametrize("forged", ["$", "0-0-0", "abc", "99999999999999-0", "1" * 42])
async def test_a_forged_last_event_id_is_400(http: httpx.AsyncClient, forged: str) -> None:
    ada, token = await external_agent(http)
    answer = await http.get(
        f"/v1/agents/{ada}/wakes", headers=bearer(token) | {"Last-Event-ID": forged}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["kind"] == "invalid_request"


async def test_server_sent_events_resume_after_the_last_event_id(
    http: httpx.AsyncClient, redis: AnyRedis, names: Names
) -> None:
    ada, token = await external_agent(http)
    start = (await poll(http, ada, token, wait_s=0)).json()["next_cursor"]
    sent = [await publish(redis, names, ada, n) for n in range(3)]
    await publish(redis, names, new_agent_id(), 9)

    first = [e async for e in sse_ticks(http, ada, token, 2, start)]
    assert [i for i, _ in first] == sent[:2]
    assert [t["tick_id"] for _, t in first] == [f"tk_{ada}_0", f"tk_{ada}_1"]
    # Dropped after two: the missed tick and a new one come after a reconnect.
    sent.append(await publish(redis, names, ada, 3))
    rest = [e async for e in sse_ticks(http, ada, token, 2, first[-1][0])]
    assert [i for i, _ in rest] == sent[2:]
    assert {t["agent_id"] for _, t in rest} == {ada}


async def test_a_stream_opened_without_a_resume_point_starts_at_the_live_tail(
    http: httpx.AsyncClient, redis: AnyRedis, names: Names
) -> None:
    ada, token = await external_agent(http)
    await publish(redis, names, ada, 0)  # before the stream opened: not sent

    async def first() -> tuple[str, dict[str, Any]]:
        async for event in sse_ticks(http, ada, token, 1, None):
            return event
        raise AssertionError("the stream ended")

    reading = asyncio.create_task(first())
    # Publish until the open stream has joined the live tail and sends one.
    while not reading.done():
        await publish(redis, names, ada, 1)
        await asyncio.wait({reading}, timeout=0.5)
    _, tick = reading.result()
    assert tick["tick_id"] == f"tk_{ada}_1"


async def test_a_disconnect_mid_stream_leaves_no_watcher(redis: AnyRedis, names: Names) -> None:
    feed = WakeFeed(redis, names)
    after = await feed.tail("ag-gone")
    got: list[str] = []

    async def read() -> None:
        async for entry in feed.watch("ag-gone", after):
            if entry is not None:
                got.append(entry.entry_id)

    reading = asyncio.create_task(read())
    sent = await publish(redis, names, "ag-gone", 1)
    async with asyncio.timeout(30):
        while not got:  # noqa: ASYNC110 - the feed offers nothing to await
            await asyncio.sleep(0.01)
    assert got == [sent]
    reader = feed._readers[0]
    reading.cancel()  # what a client closing its connection does to the response's generator
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert not reader.watchers
    assert reader.task is not None
    async with asyncio.timeout(30):
        await reader.task  # with no watcher left, the reader stops by itself
    assert not feed._readers
    await feed.stop()


async def test_a_stop_signal_before_a_new_stream_joined_still_ends_it(
    redis: AnyRedis, names: Names
) -> None:
    """The signal lands while a stream has sent its first frame but its watcher has not yet
    joined a reader (no loop known to the feed): the stream still ends (it streamed on for
    ever before, holding the ingress's shutdown)."""
    feed = WakeFeed(redis, names)
    after = await feed.tail("ag-early")

    async def drain() -> list[Any]:
        return [entry async for entry in feed.watch("ag-early", after)]

    watching = asyncio.create_task(drain())
    feed.close_soon()  # before the task first ran: the feed has no loop yet
    async with asyncio.timeout(10):
        assert await watching == []
    async with asyncio.timeout(10):
        assert await feed.poll("ag-early", after, 30, 10) == []
    await feed.stop()


async def test_a_stopping_ingress_ends_its_open_feeds(
    redis_url: str,
    stack_prefix: str,
    agent_home: Path,
    http: httpx.AsyncClient,
    tmp_path: Path,
) -> None:
    ada, token = await external_agent(http)
    proc = start_ingress(stack_env(redis_url, stack_prefix, agent_home), tmp_path / "ingress.log")
    try:
        await proc.wait_ready()
        url = f"http://127.0.0.1:{proc.port}/v1/agents/{ada}/wakes"
        async with (
            httpx.AsyncClient(timeout=60) as client,
            client.stream("GET", url, headers=bearer(token)) as answer,
        ):
            assert answer.status_code == 200
            lines = answer.aiter_lines()
            assert await anext(lines) == "retry: 1000"
            assert proc.proc is not None
            proc.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(60):  # ends: closed by the server, not cut by a timeout
                rest = [line async for line in lines]
            assert "data:" not in "".join(rest)
        code = await asyncio.to_thread(proc.proc.wait, 60)
        assert code in STOPPED, (tmp_path / "ingress.log").read_text()
    finally:
        proc.stop()
