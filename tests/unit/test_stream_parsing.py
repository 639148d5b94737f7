"""The lean parsing of stream entries every service's subscribers use (shared.streams): faststream
never renders the entries' values, and the handler gets them raw."""

from __future__ import annotations

from typing import Any

from faststream import AckPolicy
from faststream.redis import RedisBroker

from shared.streams import (
    Subscription,
    lean_batch,
    lean_entry,
    raw_batch,
    stream_subscribers,
    the_message,
)

NOT_UTF8 = {b"token": b"x", b"body": b"\xff\xfe", b"__data__": b"\x89junk"}


class Parsed:
    raw_message: Any = None


async def test_a_batch_reaches_faststream_without_its_entries_and_the_handler_raw() -> None:
    raw = {"type": "bstream", "channel": "t:c", "message_ids": [b"1-0", b"2-0"], "data": [NOT_UTF8]}
    given: list[Any] = []

    async def original(message: Any) -> Parsed:
        given.append(message)
        return Parsed()

    parsed = await lean_batch(raw, original)
    assert given[0]["data"] == []  # nothing for faststream to render (or to fail on)
    assert given[0]["message_ids"] == [b"1-0", b"2-0"]  # what its acknowledgement uses
    assert parsed.raw_message is raw
    assert await raw_batch(parsed) is raw


async def test_a_single_entry_reaches_faststream_without_its_fields_and_the_handler_raw() -> None:
    raw = {"type": "stream", "channel": "t:c", "message_ids": [b"1-0"], "data": NOT_UTF8}
    given: list[Any] = []

    async def original(message: Any) -> Parsed:
        given.append(message)
        return Parsed()

    parsed = await lean_entry(raw, original)
    assert given[0]["data"] == {}
    assert parsed.raw_message is raw
    assert await the_message(parsed) is parsed


async def _consume(_stream: str, _ids: Any, _entries: Any, *, consumer: str) -> None:
    return None


async def _reclaimed(_stream: str, _id: str, _fields: Any, _count: int, *, consumer: str) -> None:
    return None


def test_a_subscriber_reads_with_its_subscription_itself_not_a_copy_per_read() -> None:
    broker = RedisBroker()
    subs = stream_subscribers(
        broker,
        "t:{p000}:events",
        group="g",
        consumer="c",
        size=10,
        idle_ms=1000,
        ack_policy=AckPolicy.REJECT_ON_ERROR,
        consume=_consume,
        reclaimed=_reclaimed,
        batches=2,
    )
    for sub in subs:
        first = sub.stream_sub  # what faststream asks for on each read and each log line
        assert sub.stream_sub is first
        assert first.name == "t:{p000}:events"
    assert [s.stream_sub.batch for s in subs] == [True, True, False]
    assert subs[2].stream_sub.min_idle_time == 1000


def test_a_prefix_still_gets_its_own_copy() -> None:
    mine = Subscription("s", group="g", consumer="c", batch=True, max_records=5)
    prefixed = mine.add_prefix("pre:")
    assert prefixed is not mine
    assert (prefixed.name, mine.name) == ("pre:s", "s")
    assert prefixed.batch
    assert prefixed.max_records == 5
