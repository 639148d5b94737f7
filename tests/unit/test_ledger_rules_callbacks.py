"""Callbacks: a capability names a wait or the agent; a delivery triggers one wait, lands in the
inbox when no single wait is meant, and counts once. Pure: `decide` at a fixed instant."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from shared.domain.stored import CapabilityRecord
from shared.wire.events import CallbackDeliveredToInbox, WaitTriggered
from tests.builders import AGENT_ID, make_wait, make_work_item, wait_id
from tests.unit.ledger_kit import ITEM, NOW, OTHER, callback, ledger_state, only, run, token_hash

HOOK, ASK, SECOND_HOOK = wait_id(1), wait_id(2), wait_id(3)
WAITS = {
    HOOK: make_wait(id=HOOK, work_item_id=ITEM, wake="external", reason="hook"),
    ASK: make_wait(id=ASK, work_item_id=ITEM, wake="operator_input", reason="ask"),
    SECOND_HOOK: make_wait(id=SECOND_HOOK, work_item_id=OTHER, wake="external", reason="hook"),
}


def capability(wait: str | None) -> CapabilityRecord:
    """A wait's capability, or the agent's own callback capability for None."""
    return CapabilityRecord(token_id=f"cap-{wait}", agent_id=AGENT_ID, wait_id=wait)


@dataclass(frozen=True)
class Delivery:
    waits: tuple[str, ...]
    capability_of: str | None
    """The wait the token's capability names (None: the agent's callback token)."""
    disposition: str
    triggered: str | None = None


DELIVERIES = {
    "a wait's token triggers that wait": Delivery((HOOK,), HOOK, "triggered", HOOK),
    "the agent's token triggers the single external wait": Delivery(
        (HOOK,), None, "triggered", HOOK
    ),
    "the agent's token with no external wait goes to the inbox": Delivery(
        (ASK,), None, "delivered_to_inbox"
    ),
    "the agent's token with two external waits goes to the inbox": Delivery(
        (HOOK, SECOND_HOOK), None, "delivered_to_inbox"
    ),
}


@pytest.mark.parametrize("case", DELIVERIES.values(), ids=DELIVERIES.keys())
def test_a_callback_triggers_one_wait_or_lands_in_the_inbox(case: Delivery) -> None:
    waits = [WAITS[w] for w in case.waits]
    items = (make_work_item(id=ITEM, blocked_by="hook"), make_work_item(id=OTHER))
    state = ledger_state(*items, waits=waits, capability=capability(case.capability_of))
    decision = run(state, callback("x", "d1"))
    assert decision.result is not None
    assert decision.result["disposition"] == case.disposition
    counts = {w.id: w.trigger_count for w in decision.state.active_waits()}
    assert counts == {w: int(w == case.triggered) for w in case.waits}
    assert decision.side.delivery_mark == (token_hash("x"), "d1")
    (evidence,) = decision.side.evidence
    assert (evidence.origin, evidence.delivery_id, evidence.body) == ("callback", "d1", "hi")
    assert evidence.wait_id == case.triggered
    if case.triggered is not None:
        assert decision.result["wait_id"] == case.triggered
        assert [e.wait_id for e in only(decision.events, WaitTriggered)] == [case.triggered]
        assert decision.side.inbox_push == ()
        assert decision.state.items[ITEM].blocked_by == "hook"
        return
    assert only(decision.events, WaitTriggered) == []
    assert len(only(decision.events, CallbackDeliveredToInbox)) == 1
    (message,) = decision.side.inbox_push
    assert (message.origin.value, message.text, message.delivery_id) == ("callback", "hi", "d1")
    assert message.created_at == NOW


def test_a_binary_callback_in_the_inbox_keeps_its_base64_encoding() -> None:
    state = ledger_state(capability=capability(None))
    decision = run(state, callback("x", "d1", body="AAEC", encoding="base64"))
    assert decision.result is not None
    assert decision.result["disposition"] == "delivered_to_inbox"
    (message,) = decision.side.inbox_push
    assert (message.text, message.body_encoding) == ("AAEC", "base64")
    assert decision.side.evidence[0].body_encoding == "base64"


def test_a_delivery_already_seen_is_a_duplicate_that_changes_nothing() -> None:
    state = ledger_state(
        make_work_item(id=ITEM),
        waits=[WAITS[HOOK]],
        capability=capability(HOOK),
        delivery_seen=True,
    )
    decision = run(state, callback("x", "d1"))
    assert decision.result == {"delivery_id": "d1", "disposition": "duplicate"}
    assert decision.events == ()
    assert decision.state is state
    assert decision.side.evidence == ()
    assert decision.side.delivery_mark is None
