"""The lean parsing of stream entries every service's subscribers use (shared.streams): faststream
never renders the entries' values, and the handler gets them raw."""

from __future__ import annotations

from typing import Any

from shared.streams import lean_batch, lean_entry, raw_batch, raw_fields

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
    assert await raw_fields(parsed) is NOT_UTF8
