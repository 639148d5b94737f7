"""The list routes' cursors (pure): a sealed position opens only for its list and agent under the
same key, and any edit is refused naming `cursor`; page_after pages rows in either order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.ingress.errors import ApiError
from services.ingress.paging import Cursors, Source, page_after, page_limit, page_sources

KEY = Cursors.from_secret(b"operator-token")
positions = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=8,
)


def _refused(call: object, field: str = "cursor") -> str:
    with pytest.raises(ApiError) as caught:
        call()  # type: ignore[operator]
    assert (caught.value.status, caught.value.details) is not None
    assert caught.value.status == 400
    assert caught.value.details is not None
    assert caught.value.details["field"] == field
    return caught.value.message


@given(position=positions)
def test_a_cursor_opens_to_its_position_for_its_list_and_agent(position: object) -> None:
    cursor = KEY.seal("briefs?kind=", "ag-1", position)
    assert KEY.open("briefs?kind=", "ag-1", cursor) == position
    assert "another agent" in _refused(lambda: KEY.open("briefs?kind=", "ag-2", cursor))
    assert "another list" in _refused(lambda: KEY.open("briefs?kind=result", "ag-1", cursor))
    other_key = Cursors.from_secret(b"another deployment")
    _refused(lambda: other_key.open("briefs?kind=", "ag-1", cursor))


@given(position=positions, at=st.integers(min_value=0), flip=st.integers(1, 255))
def test_any_edited_byte_is_refused(position: object, at: int, flip: int) -> None:
    cursor = KEY.seal("history", "ag-1", position)
    raw = bytearray(cursor.encode())
    raw[at % len(raw)] ^= flip
    try:
        edited = raw.decode()
    except UnicodeDecodeError:
        return
    # Base64 padding bits can change without changing the bytes: then it still opens, to the
    # same position; any other edit is refused.
    try:
        opened = KEY.open("history", "ag-1", edited)
    except ApiError as exc:
        refused: ApiError | None = exc
    else:
        refused = None
        assert opened == position
    if refused is not None:
        assert (refused.status, (refused.details or {}).get("field")) == (400, "cursor")


def test_page_after_in_both_orders() -> None:
    rows = list(range(10))
    assert page_after(rows, lambda r: r, None, 4) == ([0, 1, 2, 3], 3)
    assert page_after(rows, lambda r: r, 3, 4) == ([4, 5, 6, 7], 7)
    assert page_after(rows, lambda r: r, 7, 4) == ([8, 9], None)
    assert page_after(rows, lambda r: r, 5, 4, descending=False) == ([6, 7, 8, 9], None)
    newest = rows[::-1]
    assert page_after(newest, lambda r: r, None, 3, descending=True) == ([9, 8, 7], 7)
    assert page_after(newest, lambda r: r, 7, 3, descending=True) == ([6, 5, 4], 4)


def test_limit_bounds() -> None:
    assert page_limit(None) == 100
    assert page_limit(1000) == 1000
    for bad in (0, -1, 1001):
        _refused(lambda bad=bad: page_limit(bad), "limit")


async def test_page_sources_reads_a_source_only_when_the_page_reaches_it() -> None:
    data: dict[object, list[int]] = {"hot": [9, 8, 7], 1: [6, 5], 0: [4, 3, 2, 1]}
    loaded: list[object] = []

    def source(source_id: object) -> Source[int]:
        async def load() -> list[int]:
            loaded.append(source_id)
            return data[source_id]

        return source_id, load

    sources = [source("hot"), source(1), source(0)]
    for limit in range(1, 11):
        walked: list[int] = []
        after = None
        pages = 0
        while True:
            loaded.clear()
            page, after = await page_sources(
                sources,
                lambda r: r,
                after,
                limit,
                descending=True,
            )
            walked += page
            pages += 1
            assert len(page) <= limit
            if after is None:
                break
        assert walked == list(range(9, 0, -1)), limit
        assert pages <= -(-9 // limit) + 1
    loaded.clear()
    first, after = await page_sources(sources, lambda r: r, None, 2, descending=True)
    assert (first, after, loaded) == ([9, 8], ["hot", 8], ["hot"])
    exact, after = await page_sources(sources, lambda r: r, None, 3, descending=True)
    assert (exact, after) == ([9, 8, 7], [1, None])
