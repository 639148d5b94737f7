"""The console feed's pure parts: stream ids (the SSE resume points), entries of a partition's
event stream, what a page is sent, and a watcher that falls behind."""

from __future__ import annotations

import asyncio

import orjson

from services.ingress.console.events import frame
from services.ingress.console.live import (
    QUEUE_MAX,
    FeedEntry,
    Watcher,
    WatcherSet,
    parse_entry,
    stream_id_key,
    valid_stream_id,
)


def entry_fields(agent_id: str, *seqs: int) -> dict[bytes, bytes]:
    events = [
        {"seq": s, "type": "work_item_created", "at": "2026-11-27T03:00:00Z",
         "work_item_id": "wi_1", "data": {"objective": "<script>x</script>"}}
        for s in seqs
    ]  # fmt: skip
    body = {"agent_id": agent_id, "command_id": "c1", "events": events}
    return {b"m": orjson.dumps({"type": "ledger_events", "body": body}), b"k": agent_id.encode()}


def test_stream_ids_order_numerically_not_as_text() -> None:
    assert stream_id_key("10-0") > stream_id_key("9-5")
    assert stream_id_key("5-10") > stream_id_key("5-9")


def test_only_redis_stream_ids_are_resume_points() -> None:
    assert valid_stream_id("1764212345678-3") == "1764212345678-3"
    for bad in (None, "", "abc", "1-", "-1", "1-2-3", "1 -2", "9" * 50 + "-1", "$", "+"):
        assert valid_stream_id(bad) is None, bad


def test_an_entry_becomes_a_summary_without_the_event_data() -> None:
    entry = parse_entry(b"5-1", entry_fields("a1", 7, 8))
    assert entry is not None
    assert entry.entry_id == "5-1"
    assert entry.agent_id == "a1"
    sent = orjson.loads(entry.summary())
    assert [e["seq"] for e in sent["events"]] == [7, 8]
    assert "data" not in sent["events"][0]
    assert frame(entry, with_id=True).startswith(b"id: 5-1\nevent: ledger\ndata: {")
    assert b"id:" not in frame(entry, with_id=False)


def test_an_entry_that_is_not_a_ledger_entry_is_skipped() -> None:
    assert parse_entry(b"1-1", {b"k": b"a1"}) is None
    assert parse_entry(b"1-1", {b"k": b"a1", b"m": b"not json"}) is None


async def test_a_watcher_gets_only_its_agent_and_stops_when_it_falls_behind() -> None:
    watcher = Watcher("a1")
    watcher.offer(FeedEntry("1-0", "a2", ()))
    assert watcher.queue.empty()
    for n in range(QUEUE_MAX + 1):
        watcher.offer(FeedEntry(f"{n + 2}-0", "a1", ()))
    assert watcher.overflowed
    assert watcher.queue.qsize() == QUEUE_MAX
    await asyncio.sleep(0)


def test_a_reader_offers_an_entry_to_its_agents_watchers_and_the_all_agent_ones_only() -> None:
    watchers: WatcherSet[FeedEntry] = WatcherSet()
    a1, a1_again, a2, everyone = Watcher("a1"), Watcher("a1"), Watcher("a2"), Watcher(None)
    for watcher in (a1, a1_again, a2, everyone, a1):
        watchers.add(watcher)
    assert len(watchers) == 4
    assert set(watchers.of("a1")) == {a1, a1_again, everyone}
    assert set(watchers.of("a3")) == {everyone}
    watchers.discard(a1)
    watchers.discard(a1)
    assert set(watchers.of("a1")) == {a1_again, everyone}
    assert set(watchers) == {a1_again, a2, everyone}
    watchers.clear()
    assert not watchers
    assert watchers.of("a1") == ()
