"""The hash-chained history of docs/contract.md §8: seal, canonical form and verify."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.history import (
    GENESIS_HASH,
    HistoryEvent,
    canonical_json,
    chain_hash,
    seal_encoded,
    verify,
)
from shared.wire.events import Event
from tests import strategies as S
from tests.strategies import seal

_fast = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROPERTY = settings(_fast, max_examples=100)
CHAIN = settings(_fast, max_examples=50)
TAMPER = settings(_fast, max_examples=40)
"""Tampering needs varied positions more than varied payloads, so it draws small chains."""
HISTORY_FIELDS = ("seq", "type", "at", "agent_id", "work_item_id", "data", "prev_hash", "hash")
T0 = datetime(2025, 1, 1, tzinfo=UTC)

Doc = dict[str, Any]

# History data is what Event.data() produces: JSON without floats (no event has a float field).
_history_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | S.any_text
    | st.sampled_from(["é", "ß", "日本語", "😀", "\u2028", "\x00", "\x7f", '"\\'])
)
history_data: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    S.any_text,
    st.recursive(
        _history_scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(S.any_text, inner, max_size=3),
        max_leaves=6,
    ),
    max_size=4,
)
_event_types = st.sampled_from(
    ["work_item_created", "wait_triggered", "turn_started", "brief_recorded"]
)
_event_parts = st.tuples(
    _event_types,
    st.integers(min_value=0, max_value=10**6),
    st.none() | S.work_item_ids,
    history_data,
)
_small_parts = st.tuples(
    _event_types,
    st.integers(min_value=0, max_value=10**6),
    st.none() | S.work_item_ids,
    st.dictionaries(
        st.sampled_from(["text", "n", "ok"]), st.integers(0, 99) | S.any_text, max_size=2
    ),
)


def stdlib_canonical(doc: Doc) -> bytes:
    """The contract's canonical form, written with nothing but the standard library."""
    body = {k: v for k, v in doc.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def build_chain(parts: list[tuple[str, int, str | None, dict[str, Any]]], agent: str) -> list[Doc]:
    chain: list[Doc] = []
    prev = GENESIS_HASH
    for seq, (event_type, seconds, work_item_id, data) in enumerate(parts, start=1):
        doc = seal(
            seq=seq,
            event_type=event_type,
            at=T0 + timedelta(seconds=seconds),
            agent_id=agent,
            work_item_id=work_item_id,
            data=data,
            prev_hash=prev,
        )
        chain.append(doc)
        prev = doc["hash"]
    return chain


@st.composite
def chains(draw: st.DrawFn, min_size: int = 0, small: bool = False) -> list[Doc]:
    parts = draw(st.lists(_small_parts if small else _event_parts, min_size=min_size, max_size=6))
    return build_chain(parts, draw(S.agent_ids))


def _event_doc(event: Event, seq: int, prev_hash: str) -> Doc:
    return seal(
        seq=seq,
        event_type=event.message_type,
        at=T0,
        agent_id=event.agent_id,
        work_item_id=event.work_item_id,
        data=event.data(),
        prev_hash=prev_hash,
    )


def _assert_fails_at(chain: list[Doc], index: int) -> None:
    result = verify(chain)
    assert result.ok is False
    assert result.first_bad_index == index
    assert result.count == len(chain)


# ---------------------------------------------------------------- the chain


def test_genesis_hash_is_sha256_of_the_ledger_tag() -> None:
    assert GENESIS_HASH == "1376f91f68eab79c605aee9d96ef84e817a481b1b01b7e12065be43da6b0e1b0"
    assert hashlib.sha256(b"longrun-ledger-v1").hexdigest() == GENESIS_HASH
    assert len(GENESIS_HASH) == 64
    assert GENESIS_HASH.lower() == GENESIS_HASH


def test_empty_history_verifies_with_the_genesis_head() -> None:
    result = verify([])
    assert (result.ok, result.count, result.head, result.first_bad_index) == (
        True,
        0,
        GENESIS_HASH,
        None,
    )


def test_seal_builds_the_contract_document() -> None:
    doc = seal(
        seq=1,
        event_type="agent_created",
        at=datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
        agent_id="agent-1",
        work_item_id=None,
        data={"loop": "builtin"},
        prev_hash=GENESIS_HASH,
    )
    assert set(doc) == set(HISTORY_FIELDS)
    assert doc["at"] == "2025-01-02T03:04:05.678000Z"
    assert doc["prev_hash"] == GENESIS_HASH
    expected = hashlib.sha256(bytes.fromhex(GENESIS_HASH) + stdlib_canonical(doc)).hexdigest()
    assert doc["hash"] == expected
    assert HistoryEvent.model_validate(doc).hash == expected


@CHAIN
@given(chain=chains())
def test_a_sealed_chain_verifies_with_count_and_head(chain: list[Doc]) -> None:
    result = verify(chain)
    assert result.ok is True
    assert result.first_bad_index is None
    assert result.count == len(chain)
    assert result.head == (chain[-1]["hash"] if chain else GENESIS_HASH)


@CHAIN
@given(chain=chains(min_size=1))
def test_anyone_can_recompute_the_chain_with_the_standard_library(chain: list[Doc]) -> None:
    prev = GENESIS_HASH
    for seq, doc in enumerate(chain, start=1):
        assert doc["seq"] == seq
        assert doc["prev_hash"] == prev
        prev = hashlib.sha256(bytes.fromhex(prev) + stdlib_canonical(doc)).hexdigest()
        assert doc["hash"] == prev


@PROPERTY
@given(parts=_event_parts, agent=S.agent_ids)
def test_canonical_json_is_sorted_compact_utf8_json(
    parts: tuple[str, int, str | None, dict[str, Any]], agent: str
) -> None:
    doc = build_chain([parts], agent)[0]
    assert canonical_json(doc) == stdlib_canonical(doc)


@PROPERTY
@given(parts=_event_parts, agent=S.agent_ids, prev=st.sampled_from([GENESIS_HASH, "ab" * 32]))
def test_seal_encoded_stores_what_seal_builds(
    parts: tuple[str, int, str | None, dict[str, Any]], agent: str, prev: str
) -> None:
    """The ledger's one-pass form: same hash, and its bytes parse to the sealed document, also
    when a nested value arrives as a pre-serialised canonical fragment."""
    event_type, seq, work_item_id, data = parts
    common = dict(seq=seq + 1, event_type=event_type, at=T0, agent_id=agent)
    doc = seal(**common, work_item_id=work_item_id, data=data, prev_hash=prev)
    digest, stored = seal_encoded(**common, work_item_id=work_item_id, data=data, prev_hash=prev)
    assert digest == doc["hash"]
    assert json.loads(stored) == doc
    fragment = orjson.Fragment(orjson.dumps(data, option=orjson.OPT_SORT_KEYS))
    wrapped = {"nested": data}
    digest2, stored2 = seal_encoded(
        **common, work_item_id=work_item_id, data={"nested": fragment}, prev_hash=prev
    )
    assert (
        digest2 == seal(**common, work_item_id=work_item_id, data=wrapped, prev_hash=prev)["hash"]
    )
    assert verify([json.loads(stored2)]).ok is (seq == 0 and prev == GENESIS_HASH)


@PROPERTY
@given(event=S.events)
def test_canonical_json_of_every_event_matches_the_standard_library(event: Event) -> None:
    doc = _event_doc(event, seq=1, prev_hash=GENESIS_HASH)
    assert canonical_json(doc) == stdlib_canonical(doc)
    assert verify([doc]).ok


@CHAIN
@given(batch=S.history_events())
def test_typed_history_events_keep_the_hashed_form(batch: tuple[HistoryEvent, ...]) -> None:
    """A HistoryEvent carried on the wire dumps back to the exact document that was hashed."""
    docs = [event.model_dump(mode="json") for event in batch]
    assert verify(docs).ok
    assert verify(docs).head == (batch[-1].hash if batch else GENESIS_HASH)


def test_seal_writes_utc_with_z_for_any_offset() -> None:
    """History timestamps are RFC 3339 UTC with a Z (format_at's promise, contract §1)."""
    plus_two = timezone(timedelta(hours=2))
    doc = seal(
        seq=1,
        event_type="agent_created",
        at=datetime(2025, 1, 1, 14, 0, tzinfo=plus_two),
        agent_id="agent-1",
        work_item_id=None,
        data={},
        prev_hash=GENESIS_HASH,
    )
    assert doc["at"] == "2025-01-01T12:00:00Z"
    assert verify([HistoryEvent.model_validate(doc).model_dump(mode="json")]).ok


def test_canonical_json_keeps_non_ascii_as_utf8() -> None:
    doc = {"data": {"text": "Grüße, 日本 😀"}, "seq": 1}
    assert canonical_json(doc) == '{"data":{"text":"Grüße, 日本 😀"},"seq":1}'.encode()


def test_chain_hash_ignores_the_hash_field() -> None:
    doc = {"seq": 1, "data": {}}
    assert chain_hash(GENESIS_HASH, doc) == chain_hash(GENESIS_HASH, doc | {"hash": "x"})


# ---------------------------------------------------------------- tampering


def _changed(field: str, value: Any) -> Any:
    """A value for `field` that differs from `value` (and keeps the document JSON)."""
    replacements: dict[str, Any] = {
        "seq": value + 1 if isinstance(value, int) else 1,
        "type": f"{value}_forged",
        "at": "1999-12-31T23:59:59Z",
        "agent_id": f"{value}-forged",
        "work_item_id": None if value else "wi_00000000000000000000000000",
        "data": {"forged": value},
        "prev_hash": hashlib.sha256(str(value).encode()).hexdigest(),
        "hash": hashlib.sha256(str(value).encode()).hexdigest(),
    }
    return replacements[field]


@TAMPER
@given(chain=chains(min_size=1, small=True), data=st.data())
def test_editing_any_field_of_event_i_fails_at_i(chain: list[Doc], data: st.DataObject) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(chain) - 1))
    field = data.draw(st.sampled_from(HISTORY_FIELDS))
    tampered = copy.deepcopy(chain)
    tampered[index][field] = _changed(field, chain[index][field])

    _assert_fails_at(tampered, index)


@TAMPER
@given(chain=chains(min_size=1, small=True), data=st.data())
def test_editing_nested_data_of_event_i_fails_at_i(chain: list[Doc], data: st.DataObject) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(chain) - 1))
    tampered = copy.deepcopy(chain)
    tampered[index]["data"] = {"outer": {"inner": [chain[index]["data"], "forged"]}}

    _assert_fails_at(tampered, index)


@TAMPER
@given(chain=chains(min_size=2, small=True), data=st.data())
def test_editing_and_resealing_event_i_fails_at_the_next_link(
    chain: list[Doc], data: st.DataObject
) -> None:
    """A forger who recomputes event i's own hash still breaks event i+1's prev_hash."""
    index = data.draw(st.integers(min_value=0, max_value=len(chain) - 2))
    tampered = copy.deepcopy(chain)
    forged = tampered[index]
    forged["data"] = {"forged": forged["data"]}
    forged["hash"] = chain_hash(forged["prev_hash"], forged)

    _assert_fails_at(tampered, index + 1)


@TAMPER
@given(chain=chains(min_size=2, small=True), data=st.data())
def test_deleting_event_i_fails_at_i(chain: list[Doc], data: st.DataObject) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(chain) - 2))
    tampered = chain[:index] + chain[index + 1 :]

    _assert_fails_at(tampered, index)


@TAMPER
@given(chain=chains(min_size=1, small=True))
def test_dropping_the_tail_changes_the_head(chain: list[Doc]) -> None:
    """Truncation leaves a valid prefix; it shows only as a head that no longer matches."""
    result = verify(chain[:-1])
    assert result.ok is True
    assert result.head != verify(chain).head


@TAMPER
@given(chain=chains(min_size=2, small=True), data=st.data())
def test_swapping_two_events_fails_at_the_first(chain: list[Doc], data: st.DataObject) -> None:
    first = data.draw(st.integers(min_value=0, max_value=len(chain) - 2))
    second = data.draw(st.integers(min_value=first + 1, max_value=len(chain) - 1))
    tampered = list(chain)
    tampered[first], tampered[second] = tampered[second], tampered[first]

    _assert_fails_at(tampered, first)


def _sealed_at(
    index: int, prev_hash: str, agent: str, parts: tuple[str, int, str | None, dict[str, Any]]
) -> Doc:
    event_type, seconds, work_item_id, payload = parts
    return seal(
        seq=index + 1,
        event_type=event_type,
        at=T0 + timedelta(seconds=seconds),
        agent_id=agent,
        work_item_id=work_item_id,
        data=payload,
        prev_hash=prev_hash,
    )


@TAMPER
@given(chain=chains(min_size=1, small=True), data=st.data(), parts=_small_parts)
def test_inserting_a_foreign_event_fails_at_its_position(
    chain: list[Doc], data: st.DataObject, parts: tuple[str, int, str | None, dict[str, Any]]
) -> None:
    """The right seq and a valid own hash, but linked to another chain."""
    index = data.draw(st.integers(min_value=0, max_value=len(chain) - 1))
    elsewhere = hashlib.sha256(b"another agent's history").hexdigest()
    foreign = _sealed_at(index, elsewhere, chain[0]["agent_id"], parts)
    tampered = [*chain[:index], foreign, *chain[index:]]

    _assert_fails_at(tampered, index)


@TAMPER
@given(chain=chains(min_size=1, small=True), data=st.data(), parts=_small_parts)
def test_inserting_a_correctly_linked_event_fails_at_the_event_it_displaced(
    chain: list[Doc], data: st.DataObject, parts: tuple[str, int, str | None, dict[str, Any]]
) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(chain) - 1))
    prev = chain[index - 1]["hash"] if index else GENESIS_HASH
    forged = _sealed_at(index, prev, chain[0]["agent_id"], parts)
    tampered = [*chain[:index], forged, *chain[index:]]

    _assert_fails_at(tampered, index + 1)


@pytest.mark.parametrize(
    "data",
    [{"big": 2**70}, {"set": {1, 2}}, {"bad": "\ud800"}],
    ids=["int-too-big", "not-json", "surrogate"],
)
def test_an_unhashable_event_fails_verification_instead_of_raising(data: dict[str, Any]) -> None:
    chain = build_chain([("agent_created", 0, None, {})], agent="agent-1")
    chain[0]["data"] = data
    _assert_fails_at(chain, 0)


def test_an_event_missing_its_hash_fails_at_its_index() -> None:
    chain = build_chain([("agent_created", 0, None, {}), ("turn_started", 1, None, {})], "a")
    del chain[1]["hash"]
    _assert_fails_at(chain, 1)
