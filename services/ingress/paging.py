"""Paging of the HTTP list routes: `limit` (default 100, 1..1,000; out of range is 400) and an
opaque `cursor`, answers with `next_cursor` (null at the end).

A cursor is a position the route chose (any JSON: a seq, an id, a sort key, a store's own
token) sealed with the route and the agent it was handed out for, and an HMAC over the three
under a key derived from the ingress's secret (the operator token), so every ingress of one
deployment reads the others' cursors. A cursor that was edited, forged, cut, handed out by
another list or for another agent is 400 `invalid_request` naming the field (`details.field:
"cursor"`). The paging is generic over where the rows come from: a route reads its rows in
a fixed order by any means (Redis, archive files, both) and pages them with `page_after`."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Query
from pydantic import BaseModel, Field

from services.ingress.errors import INVALID_REQUEST, ApiError

T = TypeVar("T")
PAGE_DEFAULT = 100
PAGE_MAX = 1000
CURSOR_MAX_CHARS = 1024
_MAC_BYTES = 16

LimitQuery = Annotated[
    int | None,
    Query(
        ge=1,
        le=PAGE_MAX,
        description=f"Rows per page: 1..{PAGE_MAX:,} (default {PAGE_DEFAULT}); out of range is "
        "400.",
    ),
]
CursorQuery = Annotated[
    str | None,
    Query(
        max_length=CURSOR_MAX_CHARS,
        description="The `next_cursor` of the page before (opaque; only for this list, this "
        "agent and these filters).",
    ),
]


class Paged(BaseModel):
    next_cursor: str | None = Field(
        default=None, description="Pass it as `cursor` for the next page; null at the end."
    )


def bad_field(field: str, message: str) -> ApiError:
    """400 `invalid_request` that names the query field at fault."""
    errors = [{"loc": ["query", field], "msg": message}]
    return ApiError(400, INVALID_REQUEST, message, details={"field": field, "errors": errors})


def page_limit(limit: int | None, *, default: int = PAGE_DEFAULT, most: int = PAGE_MAX) -> int:
    size = default if limit is None else limit
    if not 1 <= size <= most:
        raise bad_field("limit", f"limit must be in 1..{most}, got {size}")
    return size


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Cursors:
    """Seals and opens the cursors of every list route with one key."""

    key: bytes

    @classmethod
    def from_secret(cls, secret: bytes) -> Cursors:
        return cls(hmac.new(secret, b"longrun page cursor", hashlib.sha256).digest())

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self.key, body, hashlib.sha256).digest()[:_MAC_BYTES]

    def seal(self, route: str, agent_id: str, position: Any) -> str:
        """The cursor for `position` of `route` (the list and its filters) for `agent_id`
        ("" for a list that is no agent's)."""
        body = orjson.dumps({"r": route, "a": agent_id, "p": position})
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def open(self, route: str, agent_id: str, cursor: str) -> Any:
        """The position `cursor` holds; 400 naming `cursor` unless this ingress sealed it for
        this very route and agent."""
        forged = bad_field("cursor", "cursor is not one this server handed out")
        body_text, dot, mac_text = cursor.partition(".")
        if not dot:
            raise forged
        try:
            body, mac = _unb64(body_text), _unb64(mac_text)
        except (binascii.Error, ValueError):
            raise forged from None
        if not hmac.compare_digest(mac, self._mac(body)):
            raise forged
        doc = orjson.loads(body)
        if doc.get("a") != agent_id:
            raise bad_field("cursor", "cursor was handed out for another agent")
        if doc.get("r") != route:
            raise bad_field("cursor", "cursor was handed out for another list or other filters")
        return doc.get("p")

    def position(self, route: str, agent_id: str, cursor: str | None) -> Any:
        """`open`, or None without a cursor (the first page)."""
        return None if cursor is None else self.open(route, agent_id, cursor)


def page_after(
    rows: Iterable[T],
    key: Callable[[T], Any],
    after: Any,
    limit: int,
    *,
    descending: bool = False,
) -> tuple[list[T], Any]:
    """The first `limit` rows whose key is past `after` (None: from the first), and the key to
    page on from (None when no row is left). `rows` must be sorted by `key` (ascending, or
    descending with `descending`); keys are JSON values (lists, not tuples), as a cursor
    gives them back."""
    page: list[T] = []
    for row in rows:
        if after is not None and (key(row) >= after if descending else key(row) <= after):
            continue
        if len(page) == limit:
            return page, key(page[-1])
        page.append(row)
    return page, None


Source = tuple[Any, Callable[[], Awaitable[list[T]]]]
"""One place rows come from: its id (a JSON value, stable while a reader walks) and how to read
its rows, sorted by the list's key."""


async def page_sources(
    sources: Sequence[Source[T]],
    key: Callable[[T], Any],
    after: Any,
    limit: int,
    *,
    descending: bool = False,
) -> tuple[list[T], Any]:
    """`page_after` over several sources read one after the other (Redis, then archive files,
    ...), each only when the page reaches it; the position is `[source id, key]` (key None:
    from that source's first row). None: the end. A position whose source is gone gives an
    empty last page."""
    start = after[0] if isinstance(after, list) and len(after) == 2 else None
    started = after is None
    page: list[T] = []
    for index, (source_id, load) in enumerate(sources):
        from_key = None
        if not started:
            if source_id != start:
                continue
            started, from_key = True, after[1]
        rows, last = page_after(
            await load(), key, from_key, limit - len(page), descending=descending
        )
        page += rows
        if last is not None:
            return page, [source_id, last]
        if len(page) == limit:
            following = sources[index + 1][0] if index + 1 < len(sources) else None
            return page, None if following is None else [following, None]
    return page, None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant_key(at: datetime) -> int:
    """An instant as a sort key that survives JSON exactly: microseconds since the epoch."""
    return (at - _EPOCH) // timedelta(microseconds=1)
