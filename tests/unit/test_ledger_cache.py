"""The ledger's slice cache keeps a bounded slice per agent (services.ledger.cache.trimmed)."""

from __future__ import annotations

from services.ledger.cache import KEEP_RECENT, TRIM_AT, SliceCache, trimmed
from services.ledger.rules.state import LedgerState
from services.ledger.store import Loaded
from shared.domain.stored import AgentRecord
from tests.builders import at, make_agent, make_wait, make_work_item, work_item_id

AGENT = "agent-cache"


def slice_with(count: int, current: int, waited: int) -> Loaded:
    """`count` items updated a minute apart (item 1 oldest), one current, one with a wait."""
    items = {
        work_item_id(n): make_work_item(
            id=work_item_id(n), agent_id=AGENT, updated_at=at(minutes=n)
        )
        for n in range(1, count + 1)
    }
    wait = make_wait(work_item_id=work_item_id(waited), agent_id=AGENT)
    agent = AgentRecord(
        state=make_agent(agent_id=AGENT, current_work_item_id=work_item_id(current)),
        version=4,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
    )
    state = LedgerState(agent_id=AGENT, agent=agent, items=items, waits={wait.id: wait})
    return Loaded(stored_reply=None, state=state, version=4)


def test_a_large_slice_keeps_the_recent_the_current_and_the_waited_items() -> None:
    loaded = slice_with(40, current=1, waited=2)
    kept = trimmed(loaded).state.items
    recent = {work_item_id(n) for n in range(40 - KEEP_RECENT + 1, 41)}
    assert set(kept) == recent | {work_item_id(1), work_item_id(2)}
    assert all(kept[i] is loaded.state.items[i] for i in kept)
    assert trimmed(loaded).version == loaded.version


def test_a_small_slice_is_kept_whole_and_the_cache_stores_the_trimmed_one() -> None:
    small = slice_with(TRIM_AT, current=1, waited=2)
    assert trimmed(small) is small
    assert len(trimmed(slice_with(TRIM_AT + 1, current=1, waited=2)).state.items) == KEEP_RECENT + 2
    cache = SliceCache()
    cache.remember(AGENT, slice_with(3 * KEEP_RECENT, current=5, waited=6))
    stored = cache._slices[AGENT]
    assert len(stored.state.items) == KEEP_RECENT + 2
