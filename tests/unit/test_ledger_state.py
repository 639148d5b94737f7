"""LedgerState's copies: every field carried over, and the written-items set the commit reads."""

from __future__ import annotations

from dataclasses import fields

import orjson

from services.ledger.rules.state import LedgerState
from shared.domain.archive import item_batch, manifest_of
from shared.domain.stored import AgentRecord, CapabilityRecord
from tests.builders import at, make_agent, make_wait, make_work_item, work_item_id


def full_state() -> LedgerState:
    """A state where no field has its default value."""
    item = make_work_item(id=work_item_id(1))
    wait = make_wait(work_item_id=item.id)
    return LedgerState(
        agent_id=item.agent_id,
        agent=AgentRecord(
            state=make_agent(agent_id=item.agent_id),
            version=3,
            agent_token_hash="a" * 64,
            callback_token_id="cb_1",
            created_at=at(),
        ),
        fence=7,
        items={item.id: item},
        waits={wait.id: wait},
        capability=CapabilityRecord(token_id="cb_1", agent_id=item.agent_id),
        delivery_seen=True,
        foreign_items=frozenset({work_item_id(9)}),
        touched=frozenset({item.id}),
        agents_found=frozenset({"agent-2"}),
        archive_segment=manifest_of(item.agent_id, [_event(1), _event(2)]),
        archived_items=frozenset({work_item_id(8)}),
        item_batch=item_batch(
            item.agent_id,
            [(work_item_id(7), b'{"state":"completed"}', 1)],
            briefs=[],
            reply_briefs=[],
            summaries=[],
        ),
    )


def _event(seq: int) -> bytes:
    return orjson.dumps({"seq": seq, "prev_hash": "0" * 64, "hash": f"{seq:064x}"})


def test_a_copy_keeps_every_field() -> None:
    state = full_state()
    defaults = LedgerState(agent_id="someone-else", agent=None)
    for f in fields(LedgerState):
        assert getattr(state, f.name) != getattr(defaults, f.name), f"{f.name} left at default"
    assert state._copy() == state


def test_written_items_are_tracked_until_committed() -> None:
    state = full_state().committed()
    assert state.touched == frozenset()
    second = make_work_item(id=work_item_id(2))
    assert state.agent is not None
    after = state.with_item(second).with_agent(state.agent)
    assert after.touched == {second.id}
    assert after.items[second.id] is second
    assert after.committed().touched == frozenset()
    assert after.committed().items == after.items
