"""The codec: every message type survives a round trip; bad input only ever raises CodecError."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shared.domain.tools import UpdateWorkItemInput
from shared.domain.wake import TickKind
from shared.wire import codec
from shared.wire.codec import CodecError, Envelope, decode, decode_body, encode, known_types
from shared.wire.commands import COMMANDS, TOOL_COMMANDS, UpdateWorkItem
from shared.wire.events import EVENTS
from shared.wire.message import Message
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick, TimerFired
from tests import strategies as S

CONTRACT_MESSAGES: tuple[type[Message], ...] = (
    *COMMANDS,
    *EVENTS,
    Tick,
    TimerFired,
    CommandReply,
)
REGISTERED: tuple[type[Message], ...] = tuple(
    cls for _, cls in sorted(known_types().items(), key=lambda kv: kv[0])
)
"""Every registered type, including any added beyond the contract list (such as batches)."""
ENVELOPE_KEYS = ("id", "type", "version", "at", "correlation_id", "causation_id", "body")
REQUIRED_ENVELOPE_KEYS = ("id", "type", "version", "at", "body")
AT = datetime(2025, 3, 1, 12, 30, tzinfo=UTC)
WORK_ITEM_ID = "wi_01JNQ8Z3V4W5X6Y7Z8A9B0C1D2"

# Budgets keep the unit tier within seconds: many classes x few examples, one wide property.
_fast = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
PER_CLASS = settings(_fast, max_examples=15)
ROUND_TRIP = settings(_fast, max_examples=200)
FUZZ = settings(_fast, max_examples=100)

SNAKE_CASE = re.compile(r"^[a-z]+(_[a-z]+)*$")
IMPERATIVE_VERBS = frozenset(
    {
        "append",
        "begin",
        "cancel",
        "commit",
        "compact",
        "complete",
        "consume",
        "create",
        "delegate",
        "deliver",
        "ensure",
        "expire",
        "finish",
        "fire",
        "get",
        "list",
        "park",
        "pause",
        "pick",
        "put",
        "record",
        "refresh",
        "resume",
        "retire",
        "send",
        "sign",
        "spawn",
        "submit",
        "trim",
        "update",
        "wait",
    }
)
PAST_TENSE_EXCEPTIONS = {
    # A state entered, named as the contract names it: the item is now verifying.
    "work_item_verifying",
    # A past participle followed by where it went; still a fact, not an order.
    "callback_delivered_to_inbox",
    # "reset" is its own past tense.
    "wake_budget_reset",
    # The contract's name: a state the messages were found in, still a fact, not an order.
    "inbox_undeliverable",
    # "bound" is bind's past tense: the contract's name for a delegation now naming its item.
    "delegation_bound",
    # "sent" is send's past tense.
    "message_sent",
}


def _name(cls: type[Message]) -> str:
    return cls.__name__


def _tick() -> Tick:
    return Tick(tick_id="t-1", agent_id="agent-1", kind=TickKind.INPUT, issued_at=AT)


def _envelope(body: Message, **overrides: Any) -> Envelope:
    fields: dict[str, Any] = {"id": "msg-1", "at": AT, "body": body, **overrides}
    return Envelope(**fields)


def _doc(envelope: Envelope) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(encode(envelope))
    return doc


def _decodes_or_codec_error(raw: bytes | str) -> Envelope | None:
    """Decode, treating CodecError as the one allowed failure; anything else propagates."""
    try:
        return decode(raw)
    except CodecError:
        return None


def _assert_same_message(decoded: Envelope, original: Envelope) -> None:
    assert type(decoded.body) is type(original.body)
    assert decoded.body == original.body
    assert decoded.id == original.id
    assert decoded.at == original.at
    assert decoded.correlation_id == original.correlation_id
    assert decoded.causation_id == original.causation_id
    assert decoded.type == original.type
    assert decoded.version == original.version
    assert decoded == original


# ---------------------------------------------------------------- registry and names


def test_every_registered_message_has_a_strategy() -> None:
    assert set(REGISTERED) == set(S.MESSAGE_STRATEGIES)


@pytest.mark.parametrize("cls", CONTRACT_MESSAGES, ids=_name)
def test_every_command_event_tick_and_reply_is_registered(cls: type[Message]) -> None:
    assert known_types()[(cls.message_type, cls.version)] is cls


def test_registry_keys_match_the_classes() -> None:
    for (kind, version), cls in known_types().items():
        assert issubclass(cls, Message)
        assert (cls.message_type, cls.version) == (kind, version)


def test_message_types_are_unique() -> None:
    types = [cls.message_type for cls in REGISTERED]
    assert len(types) == len(set(types))


def test_known_types_is_a_copy() -> None:
    known_types().clear()
    assert set(known_types().values()) == set(REGISTERED)


@pytest.mark.parametrize("cls", COMMANDS, ids=_name)
def test_command_types_are_imperative_snake_case(cls: type[Message]) -> None:
    kind = cls.message_type
    assert SNAKE_CASE.match(kind), kind
    assert kind.split("_")[0] in IMPERATIVE_VERBS, kind
    assert not kind.endswith("ed"), kind


@pytest.mark.parametrize("cls", EVENTS, ids=_name)
def test_event_types_are_past_tense_snake_case(cls: type[Message]) -> None:
    kind = cls.message_type
    assert SNAKE_CASE.match(kind), kind
    assert kind.endswith("ed") or kind in PAST_TENSE_EXCEPTIONS, kind
    # An event names its subject first; "wait" is the noun there (wait_created), not a verb.
    assert kind.split("_")[0] not in IMPERATIVE_VERBS - {"wait"}, kind


def test_tool_commands_cover_every_tool() -> None:
    assert all(TOOL_COMMANDS[tool].tool is tool for tool in TOOL_COMMANDS)
    assert set(TOOL_COMMANDS.values()) <= set(COMMANDS)


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("cls", REGISTERED, ids=_name)
@PER_CLASS
@given(data=st.data())
def test_round_trip_of_every_message_class(cls: type[Message], data: st.DataObject) -> None:
    original = data.draw(S.envelopes(S.messages_of(cls)))
    raw = encode(original)

    decoded = decode(raw)

    _assert_same_message(decoded, original)
    assert encode(decoded) == raw
    body = decode_body(raw)
    assert type(body) is type(original.body)
    assert body == original.body


@pytest.mark.parametrize("cls", REGISTERED, ids=_name)
@PER_CLASS
@given(data=st.data())
def test_what_encode_wrote_decodes_in_one_pass(cls: type[Message], data: st.DataObject) -> None:
    """decode_body's fast path alone reads every type as `encode` writes it."""
    original = data.draw(S.envelopes(S.messages_of(cls)))

    def general_path(raw: bytes | str) -> Envelope:
        raise AssertionError(f"{cls.__name__} took the general path")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(codec, "decode", general_path)
        assert decode_body(encode(original)) == original.body


def test_other_layouts_of_an_envelope_decode_alike() -> None:
    """Keys in another order (another producer) take the general path, with the same result."""
    original = _envelope(_tick())
    doc = _doc(original)
    reordered = orjson.dumps({key: doc[key] for key in reversed(ENVELOPE_KEYS)})
    assert decode_body(reordered) == original.body
    assert decode_body(reordered.decode()) == original.body


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"extra": 1}, id="unknown-envelope-field"),
        pytest.param({"at": "yesterday"}, id="bad-time"),
        pytest.param({"id": ""}, id="empty-id"),
        pytest.param({"body": {"tick_id": "t-1"}}, id="invalid-body"),
    ],
)
def test_decode_body_refuses_what_decode_refuses(change: dict[str, Any]) -> None:
    raw = orjson.dumps({**_doc(_envelope(_tick())), **change})
    with pytest.raises(CodecError) as general:
        decode(raw)
    with pytest.raises(CodecError) as fast:
        decode_body(raw)
    assert str(fast.value) == str(general.value)


@ROUND_TRIP
@given(original=S.envelopes())
def test_random_valid_messages_survive_encode_decode(original: Envelope) -> None:
    raw = encode(original)
    _assert_same_message(decode(raw), original)
    _assert_same_message(decode(raw.decode("utf-8")), original)


@PER_CLASS
@given(body=S.ticks, at=S.utc_datetimes)
def test_envelope_time_is_normalised_to_utc(body: Tick, at: datetime) -> None:
    local = at.astimezone(timezone(timedelta(hours=5, minutes=30)))
    decoded = decode(encode(_envelope(body, at=local)))
    assert decoded.at == at
    assert decoded.at.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("raw_args", "clears", "sets"),
    [
        pytest.param({"objective": "new"}, False, False, id="blocker-untouched"),
        pytest.param({"blocked_by": None}, True, False, id="blocker-cleared"),
        pytest.param({"blocked_by": "waiting on CI"}, False, True, id="blocker-set"),
    ],
)
def test_update_keeps_its_blocker_intent_through_the_codec(
    raw_args: dict[str, Any], clears: bool, sets: bool
) -> None:
    """An update that does not mention blocked_by must not arrive as one that clears it."""
    args = UpdateWorkItemInput.model_validate({"work_item_id": WORK_ITEM_ID, **raw_args})
    command = UpdateWorkItem(command_id="cmd-1", agent_id="agent-1", args=args)
    assert (args.clears_blocker, args.sets_blocker) == (clears, sets)

    decoded = decode(encode(_envelope(command))).body

    assert isinstance(decoded, UpdateWorkItem)
    assert decoded.args.clears_blocker is clears
    assert decoded.args.sets_blocker is sets


# ---------------------------------------------------------------- loud failures


def test_unknown_type_names_the_type() -> None:
    doc = _doc(_envelope(_tick())) | {"type": "launch_rocket"}
    with pytest.raises(CodecError, match="unknown message type 'launch_rocket'"):
        decode(orjson.dumps(doc))


def test_unknown_version_names_the_type_and_the_version() -> None:
    doc = _doc(_envelope(_tick())) | {"version": 7}
    with pytest.raises(CodecError, match=r"unknown version 7 of 'tick' \(known: \[1\]\)"):
        decode(orjson.dumps(doc))


def test_invalid_body_names_the_type_version_and_field() -> None:
    doc = _doc(_envelope(_tick()))
    doc["body"]["agent_id"] = "not a valid id"
    with pytest.raises(CodecError, match=r"invalid tick v1: agent_id: "):
        decode(orjson.dumps(doc))


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"\xff\xfe", "\ud800", b"[" * 5000, b'{"a": 1e999}', b"[]", b"null", b"1"],
)
def test_non_envelopes_raise_codec_error(raw: bytes | str) -> None:
    with pytest.raises(CodecError):
        decode(raw)


@pytest.mark.parametrize(
    "at",
    [
        # Valid RFC 3339 instants whose UTC normalisation leaves datetime's range.
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
    ],
)
@pytest.mark.parametrize("where", ["envelope", "body"])
def test_out_of_range_instants_raise_codec_error(at: str, where: str) -> None:
    doc = _doc(_envelope(_tick()))
    if where == "envelope":
        doc["at"] = at
    else:
        doc["body"]["issued_at"] = at
    with pytest.raises(CodecError):
        decode(orjson.dumps(doc))


# ---------------------------------------------------------------- fuzzing


@FUZZ
@given(raw=st.text(max_size=200))
def test_random_text_raises_codec_error_even_when_it_is_not_utf8(raw: str) -> None:
    """Lone surrogates cannot be encoded: still a CodecError, never a UnicodeError."""
    head = '{"id":"\ud800' + raw + '","type":"tick","version":1,"body":{}}'
    for text in (raw, head):
        with pytest.raises(CodecError):
            decode_body(text)


@FUZZ
@given(raw=st.binary(max_size=200))
def test_random_bytes_raise_codec_error(raw: bytes) -> None:
    with pytest.raises(CodecError):
        decode(raw)
    with pytest.raises(CodecError):
        decode_body(raw)


@FUZZ
@given(value=S.json_values)
def test_random_json_values_raise_codec_error(value: Any) -> None:
    with pytest.raises(CodecError):
        decode(orjson.dumps(value))


_not_a_registered_type = S.any_text.filter(lambda t: t not in {k for k, _ in known_types()})
_bad_types = _not_a_registered_type | S.json_values.filter(lambda v: not isinstance(v, str))
_bad_versions = (
    st.integers(min_value=2, max_value=2**63 - 1)
    | st.integers(max_value=0, min_value=-(2**63))
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.none()
    | S.any_text
    | st.just("1")
    | st.just(1.0)
)


@FUZZ
@given(original=S.envelopes(), kind=_bad_types)
def test_mutated_type_raises_codec_error(original: Envelope, kind: Any) -> None:
    doc = _doc(original) | {"type": kind}
    with pytest.raises(CodecError):
        decode(orjson.dumps(doc))


@FUZZ
@given(original=S.envelopes(), version=_bad_versions)
def test_mutated_version_raises_codec_error(original: Envelope, version: Any) -> None:
    doc = _doc(original) | {"version": version}
    with pytest.raises(CodecError):
        decode(orjson.dumps(doc))


@FUZZ
@given(original=S.envelopes(), data=st.data())
def test_missing_envelope_field_raises_codec_error(original: Envelope, data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(REQUIRED_ENVELOPE_KEYS))
    doc = _doc(original)
    del doc[key]
    with pytest.raises(CodecError):
        decode(orjson.dumps(doc))


@FUZZ
@given(original=S.envelopes(), data=st.data())
def test_missing_required_body_field_raises_codec_error(
    original: Envelope, data: st.DataObject
) -> None:
    fields = type(original.body).model_fields
    required = sorted(name for name, info in fields.items() if info.is_required())
    key = data.draw(st.sampled_from(required))
    doc = _doc(original)
    del doc["body"][key]
    with pytest.raises(CodecError, match=key):
        decode(orjson.dumps(doc))


@FUZZ
@given(original=S.envelopes(), data=st.data())
def test_body_field_of_the_wrong_shape_raises_codec_error_naming_it(
    original: Envelope, data: st.DataObject
) -> None:
    """A list of unknown objects fits no field: not a scalar, a record, a mapping or an id."""
    doc = _doc(original)
    key = data.draw(st.sampled_from(sorted(doc["body"])))
    doc["body"][key] = [{"not_a_field": 1}]
    with pytest.raises(CodecError, match=f": {key}"):
        decode(orjson.dumps(doc))


@FUZZ
@given(original=S.envelopes(), name=S.any_text, value=S.json_values)
def test_extra_body_field_raises_codec_error(original: Envelope, name: str, value: Any) -> None:
    doc = _doc(original)
    if name in doc["body"]:
        name = name + "_extra"
    doc["body"][name] = value
    with pytest.raises(CodecError):
        decode(orjson.dumps(doc))


@FUZZ
@example(original=_envelope(_tick()), name="priority", value=1)
@given(original=S.envelopes(), name=S.any_text, value=S.json_values)
def test_extra_envelope_field_raises_codec_error(original: Envelope, name: str, value: Any) -> None:
    """The envelope is a Record with extra="forbid"; decode must not drop unknown keys."""
    doc = _doc(original)
    if name in ENVELOPE_KEYS:
        name = name + "_extra"
    doc[name] = value
    with pytest.raises(CodecError):
        decode(orjson.dumps(doc))


_edge_instants = st.sampled_from(
    [
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "0001-01-01T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "2024-01-01T00:00:00",
        "",
    ]
)
_mutants = S.json_values | _edge_instants | st.just(2**64 - 1)


@FUZZ
@example(
    original=_envelope(_tick()),
    choice=sorted(_tick().model_dump()).index("issued_at"),
    value="0001-01-01T00:00:00+01:00",
)
@given(original=S.envelopes(), choice=st.integers(min_value=0), value=_mutants)
def test_mutated_field_decodes_or_raises_codec_error(
    original: Envelope, choice: int, value: Any
) -> None:
    """Replace one body or envelope field with any JSON value: never a crash, never a half-read."""
    doc = _doc(original)
    slots = [("body", key) for key in sorted(doc["body"])] + [
        ("envelope", key) for key in ("id", "at", "correlation_id", "causation_id")
    ]
    where, key = slots[choice % len(slots)]
    (doc["body"] if where == "body" else doc)[key] = value

    decoded = _decodes_or_codec_error(orjson.dumps(doc))

    if decoded is not None:
        assert type(decoded.body) is type(original.body)
