"""Signed history heads: keys, signatures, and the check that a history still passes through a
head saved earlier (an anchor), including a whole history rewritten and re-chained."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from services.ledger.app import LedgerSettings, signing_key_of
from services.ledger.rules import Context, decide
from shared.domain.history import GENESIS_HASH, verify
from shared.domain.signing import (
    AnchorFailure,
    SignedHead,
    SigningKey,
    SigningKeyError,
    check_chain_through,
    parse_anchor,
    public_key_id,
    signature_valid,
)
from shared.wire.commands import SignHistoryHead
from tests.builders import AGENT_ID
from tests.strategies import seal
from tests.unit.ledger_kit import NOW, ledger_state, new_id

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
AGENT = "agent-1"


def chain_of(texts: list[str]) -> list[dict[str, Any]]:
    """A history whose events carry `texts`, sealed the way the ledger seals them."""
    docs, prev = [], GENESIS_HASH
    for seq, text in enumerate(texts, start=1):
        doc = seal(
            seq=seq,
            event_type="operator_message_appended",
            at=T0,
            agent_id=AGENT,
            work_item_id=None,
            data={"text": text},
            prev_hash=prev,
        )
        prev = doc["hash"]
        docs.append(doc)
    return docs


def head_of(key: SigningKey, chain: list[dict[str, Any]], seq: int | None = None) -> SignedHead:
    seq = len(chain) if seq is None else seq
    head_hash = GENESIS_HASH if seq == 0 else chain[seq - 1]["hash"]
    return key.sign_head(AGENT, seq, head_hash, T0)


def test_a_key_round_trips_through_base64_and_names_itself_by_its_public_half() -> None:
    key = SigningKey.generate()
    again = SigningKey.from_base64(key.private_base64())
    assert again.key_id == key.key_id == public_key_id(key.public_key)
    assert len(key.key_id) == 16
    assert SigningKey.generate().key_id != key.key_id


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not base64 at all!", "not base64"),
        (base64.b64encode(b"short").decode(), "5 bytes, not 32"),
    ],
)
def test_a_malformed_key_is_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(SigningKeyError, match=says):
        SigningKey.from_base64(text)


def test_a_head_verifies_with_its_key_and_fails_with_another() -> None:
    key, other = SigningKey.generate(), SigningKey.generate()
    head = head_of(key, chain_of(["a", "b"]))
    assert signature_valid(head, key.public_key)
    assert not signature_valid(head, other.public_key)


def test_a_head_signed_by_another_key_under_this_keys_id_fails() -> None:
    """A forger re-signs a head with its own key but keeps the victim's key id."""
    key, forger = SigningKey.generate(), SigningKey.generate()
    forged = head_of(forger, chain_of(["a"])).model_copy(update={"key_id": key.key_id})
    assert not signature_valid(forged, key.public_key)


@pytest.mark.parametrize("field", ["seq", "hash", "at", "agent_id"])
def test_any_edited_field_of_a_signed_head_breaks_its_signature(field: str) -> None:
    key = SigningKey.generate()
    head = head_of(key, chain_of(["a", "b", "c"]), seq=2)
    edits: dict[str, Any] = {
        "seq": 3,
        "hash": "0" * 64,
        "at": datetime(2026, 11, 28, tzinfo=UTC),
        "agent_id": "agent-2",
    }
    assert not signature_valid(head.model_copy(update={field: edits[field]}), key.public_key)


def test_signing_is_deterministic_for_the_same_head() -> None:
    key = SigningKey.generate()
    chain = chain_of(["a"])
    assert head_of(key, chain).signature == head_of(key, chain).signature


def test_the_history_passes_through_an_earlier_anchor_as_it_grows() -> None:
    chain = chain_of(["a", "b", "c"])
    anchor = head_of(SigningKey.generate(), chain, seq=2)
    check = check_chain_through(chain_of(["a", "b", "c", "d", "e"]), anchor)
    assert check.ok, check.message
    assert check.count == 5


def test_a_whole_history_rewritten_and_rechained_verifies_alone_but_fails_the_anchor() -> None:
    original = chain_of(["pay 10", "ship", "close"])
    anchor = head_of(SigningKey.generate(), original)
    rewritten = chain_of(["pay 1000", "ship", "close"])
    assert verify(rewritten).ok  # consistent on its own: the chain cannot tell
    check = check_chain_through(rewritten, anchor)
    assert not check.ok
    assert check.failure is AnchorFailure.NOT_ON_CHAIN
    assert "head not on the chain" in check.message
    assert "seq 3" in check.message


def test_a_history_cut_below_the_anchor_fails_as_not_on_the_chain() -> None:
    anchor = head_of(SigningKey.generate(), chain_of(["a", "b", "c"]))
    check = check_chain_through(chain_of(["a", "b"]), anchor)
    assert check.failure is AnchorFailure.NOT_ON_CHAIN
    assert "has 2 events" in check.message


def test_tampering_after_the_anchor_is_found_at_its_index() -> None:
    chain = chain_of(["a", "b", "c", "d", "e"])
    anchor = head_of(SigningKey.generate(), chain, seq=2)
    chain[3] = {**chain[3], "data": {"text": "edited"}}
    check = check_chain_through(chain, anchor)
    assert check.failure is AnchorFailure.CHAIN_BROKEN
    assert check.first_bad_index == 3
    assert "after the anchor" in check.message


def test_tampering_before_the_anchor_without_rechaining_is_found_at_its_index() -> None:
    chain = chain_of(["a", "b", "c", "d"])
    anchor = head_of(SigningKey.generate(), chain, seq=3)
    chain[0] = {**chain[0], "data": {"text": "edited"}}
    check = check_chain_through(chain, anchor)
    assert check.failure is AnchorFailure.CHAIN_BROKEN
    assert check.first_bad_index == 0
    assert "before the anchor" in check.message


def test_an_anchor_at_seq_zero_is_the_genesis_hash() -> None:
    anchor = head_of(SigningKey.generate(), [], seq=0)
    assert anchor.hash == GENESIS_HASH
    assert check_chain_through(chain_of(["a"]), anchor).ok


def test_an_anchor_file_that_is_not_a_signed_head_says_which_field() -> None:
    good = head_of(SigningKey.generate(), chain_of(["a"])).model_dump(mode="json")
    assert parse_anchor(good).seq == 1
    with pytest.raises(ValueError, match="hash"):
        parse_anchor({**good, "hash": "xyz"})
    with pytest.raises(ValueError, match="signature"):
        parse_anchor({k: v for k, v in good.items() if k != "signature"})


# ---------------------------------------------------------------- the ledger's rule


def test_the_ledger_signs_the_committed_tip_and_changes_nothing() -> None:
    key = SigningKey.generate()
    state = ledger_state()
    assert state.agent is not None
    tip = state.agent.model_copy(update={"history_seq": 7, "history_head": "ab" * 32})
    state = state.with_agent(tip)
    ctx = Context(now=NOW, new_id=new_id, wake_limit=25, signing_key=key)
    decision = decide(state, SignHistoryHead(command_id="c1", agent_id=AGENT_ID), ctx)
    assert decision.events == ()
    assert decision.state is state
    head = SignedHead.model_validate(decision.result)
    assert (head.agent_id, head.seq, head.hash, head.at) == (AGENT_ID, 7, "ab" * 32, NOW)
    assert signature_valid(head, key.public_key)


def test_the_ledger_setting_takes_a_key_treats_blank_as_unset_and_refuses_junk() -> None:
    key = SigningKey.generate()
    given = LedgerSettings(signing_key=key.private_base64())
    assert signing_key_of(given).key_id == key.key_id
    assert LedgerSettings(signing_key="  ").signing_key is None
    assert signing_key_of(LedgerSettings()).key_id != key.key_id  # ephemeral
    with pytest.raises(ValidationError, match="not base64"):
        LedgerSettings(signing_key="junk!")
