"""Class-index scores order items exactly as the ranking does (shared.domain.index.score_of)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.index import index_of, score_of
from shared.domain.views import classify, rank_key
from tests.builders import at, make_wait, make_work_item, work_item_id


@settings(deadline=None, max_examples=200)
@given(
    gaps=st.lists(st.integers(min_value=0, max_value=3_000), min_size=2, max_size=6),
    blocked=st.booleans(),
)
def test_scores_order_an_index_as_the_ranking_does(gaps: list[int], blocked: bool) -> None:
    """Items updated microseconds apart (the ledger commits that fast) sort in their index by
    (score, id) exactly as rank_key sorts them; with millisecond scores they tied."""
    items, moment = [], at()
    for n, gap in enumerate(gaps, start=1):
        moment += timedelta(microseconds=gap)
        changes = {"blocked_by": "Waiting for CI"} if blocked else {}
        items.append(make_work_item(id=work_item_id(n), updated_at=moment, **changes))
    ranked = classify(items, [], current_work_item_id=None)
    assert len({index_of(e) for e in ranked}) == 1
    by_index = sorted(ranked, key=lambda e: (score_of(e), e.item.id))
    assert [e.item.id for e in by_index] == [e.item.id for e in sorted(ranked, key=rank_key)]


def test_triggered_items_are_scored_by_their_last_trigger_to_the_microsecond() -> None:
    first = make_work_item(id=work_item_id(1), blocked_by="Waiting for CI")
    second = make_work_item(id=work_item_id(2), blocked_by="Waiting for CI")
    waits = [
        make_wait(work_item_id=first.id, trigger_count=1, last_triggered_at=at(minutes=1)),
        make_wait(
            work_item_id=second.id,
            trigger_count=1,
            last_triggered_at=at(minutes=1) + timedelta(microseconds=1),
        ),
    ]
    one, two = classify([first, second], waits, current_work_item_id=None)
    assert score_of(two) == score_of(one) - 1  # newest trigger first
