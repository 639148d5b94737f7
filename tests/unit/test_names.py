"""Stream, group and key names: crc32 partitions and one Redis Cluster hash tag per partition."""

from __future__ import annotations

import binascii
import inspect
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.wire.names import Group, Names, partition_of
from tests import strategies as S

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
partition_counts = st.integers(min_value=1, max_value=1000)
prefixes = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12)


def cluster_hash_tag(key: str) -> str | None:
    """The part of a key Redis Cluster hashes: the text of the first non-empty {...}."""
    start = key.find("{")
    if start == -1:
        return None
    end = key.find("}", start + 1)
    if end in (-1, start + 1):
        return None
    return key[start + 1 : end]


def _name_methods(first: str) -> dict[str, Callable[..., str]]:
    """Public Names methods whose first argument is `first`: found, not listed, so a key added
    later is checked too."""
    found: dict[str, Callable[..., str]] = {}
    for name, function in inspect.getmembers(Names, inspect.isfunction):
        params = list(inspect.signature(function).parameters)[1:]
        if not name.startswith("_") and name not in {"partition", "tag"} and params[:1] == [first]:
            found[name] = function
    return found


AGENT_KEYS = _name_methods("agent_id")
PARTITION_KEYS = _name_methods("partition")


def _call(function: Callable[..., str], names: Names, first: str | int, free: str) -> str:
    extra = len(inspect.signature(function).parameters) - 2
    return function(names, first, *([free] * extra))


def agent_keys(names: Names, agent_id: str, free: str) -> dict[str, str]:
    """Every key an atomic step may touch for one agent, caller-chosen parts set to `free`."""
    partition = names.partition(agent_id)
    keys = {role: _call(f, names, agent_id, free) for role, f in AGENT_KEYS.items()}
    keys |= {role: _call(f, names, partition, free) for role, f in PARTITION_KEYS.items()}
    return keys


# ---------------------------------------------------------------- partitions


@PROPERTY
@given(agent_id=S.agent_ids, partitions=partition_counts)
def test_partition_is_crc32_modulo_the_partition_count(agent_id: str, partitions: int) -> None:
    expected = binascii.crc32(agent_id.encode("utf-8")) % partitions
    assert partition_of(agent_id, partitions) == expected
    assert 0 <= partition_of(agent_id, partitions) < partitions
    assert Names(partitions=partitions).partition(agent_id) == expected


@pytest.mark.parametrize(
    ("agent_id", "partitions", "expected"),
    [
        # Pinned: every process, release and language must map an agent to the same partition.
        ("agent-1", 16, 9),  # crc32 0x0d7b4599
        ("alice", 16, 7),  # crc32 0x278ebc47
        ("bob", 16, 0),  # crc32 0xf5cbb140
        ("ops.bot_7", 16, 11),  # crc32 0x7f7482db
        ("agent-1", 1000, 553),
        ("alice", 1000, 735),
        ("agent-1", 1, 0),
    ],
)
def test_partition_is_stable(agent_id: str, partitions: int, expected: int) -> None:
    assert partition_of(agent_id, partitions) == expected
    assert Names(partitions=partitions).partition(agent_id) == expected


# ---------------------------------------------------------------- hash tags


@PROPERTY
@given(
    agent_id=S.agent_ids,
    partitions=partition_counts,
    prefix=prefixes,
    free=S.trimmed_text | S.work_item_ids | st.just("{p999}"),
)
def test_every_key_of_one_agent_carries_the_same_partition_tag(
    agent_id: str, partitions: int, prefix: str, free: str
) -> None:
    """Including keys that embed caller-chosen text, even text with braces in it."""
    names = Names(prefix=prefix, partitions=partitions)
    tag = f"p{names.partition(agent_id):03d}"
    for role, key in agent_keys(names, agent_id, free).items():
        assert key.startswith(f"{prefix}:{{{tag}}}:"), role
        assert cluster_hash_tag(key) == tag, role


@PROPERTY
@given(partitions=partition_counts, prefix=prefixes, data=st.data())
def test_partition_streams_carry_their_partition_tag(
    partitions: int, prefix: str, data: st.DataObject
) -> None:
    names = Names(prefix=prefix, partitions=partitions)
    partition = data.draw(st.integers(min_value=0, max_value=partitions - 1))
    for role, name_of in PARTITION_KEYS.items():
        key = _call(name_of, names, partition, "x")
        assert cluster_hash_tag(key) == f"p{partition:03d}", role


def test_tags_have_fixed_width_and_differ_per_partition() -> None:
    names = Names(partitions=1000)
    tags = [names.tag(p) for p in range(1000)]
    assert tags[0] == "{p000}"
    assert tags[7] == "{p007}"
    assert tags[999] == "{p999}"
    assert len(set(tags)) == 1000
    assert {len(t) for t in tags} == {6}


def test_default_names_read_as_documented() -> None:
    names = Names()
    assert (names.prefix, names.partitions) == ("lr", 16)
    assert names.commands(3) == "lr:{p003}:commands"
    assert names.events(3) == "lr:{p003}:events"
    assert names.ticks(3) == "lr:{p003}:ticks"
    p = names.partition("agent-1")
    assert names.agent("agent-1") == f"lr:{{p{p:03d}}}:agent:agent-1"


def test_stored_keys_of_an_agent_keep_their_names() -> None:
    """Keys hold data: renaming one silently loses what is stored under the old name."""
    names = Names(prefix="lr", partitions=16)
    tag = f"{{p{names.partition('agent-1'):03d}}}"
    base = f"lr:{tag}:agent:agent-1"
    assert names.items("agent-1") == f"{base}:items"
    assert names.items_finished("agent-1") == f"{base}:items-finished"
    assert names.finished_index("agent-1") == f"{base}:finished"
    assert names.waits("agent-1") == f"{base}:waits"
    assert names.waits_done("agent-1") == f"{base}:waits-done"
    assert names.class_index("agent-1", "queued_runnable") == f"{base}:idx:queued_runnable"
    assert names.fence("agent-1") == f"{base}:fence"
    assert names.history("agent-1") == f"{base}:history"
    assert names.segments("agent-1") == f"{base}:segments"
    assert names.item_batches("agent-1") == f"{base}:item-batches"
    assert names.outstanding_tick("agent-1") == f"{base}:tick"
    assert names.timer_scheduled("agent-1", 7) == f"{base}:timer-scheduled:7"
    assert names.idempotency("agent-1", "turn_1:2:0") == f"lr:{tag}:cmd:agent-1:turn_1:2:0"


def test_the_scan_finds_the_agent_and_partition_keys() -> None:
    assert {"agent", "history", "fence", "lease", "inbox", "outstanding_tick"} <= set(AGENT_KEYS)
    assert {"commands", "events", "ticks", "timers"} <= set(PARTITION_KEYS)


def test_partition_streams_are_distinct() -> None:
    names = Names()
    keys = [_call(f, names, p, "x") for f in PARTITION_KEYS.values() for p in range(16)]
    assert len(keys) == len(set(keys))


def test_keys_of_one_agent_are_distinct() -> None:
    keys = agent_keys(Names(), "agent-1", "x")
    assert len(set(keys.values())) == len(keys)


def test_global_streams_are_untagged_and_prefixed() -> None:
    """External producers and consumers address these by name (docs/contract.md §4 and §7)."""
    names = Names(prefix="acme")
    assert names.callbacks == "acme:callbacks"
    assert names.dead_letter == "acme:dead-letter"
    assert names.wakes == "acme:wakes"
    assert names.replies("proc-1") == "acme:replies:proc-1"
    for stream in (names.callbacks, names.dead_letter, names.wakes, names.replies("proc-1")):
        assert cluster_hash_tag(stream) is None


def test_group_names_are_distinct() -> None:
    groups = [Group.LEDGER, Group.SCHEDULER, Group.EXECUTOR, Group.INGRESS]
    assert len(set(groups)) == 4
    assert all(g and " " not in g for g in groups)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("prefix", ["", "a b", "a:b", "a{b", "b}", "{p001}", " ", ":"])
def test_invalid_prefix_is_rejected(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        Names(prefix=prefix)


@pytest.mark.parametrize("partitions", [0, -1, 1001, 10**6])
def test_invalid_partition_count_is_rejected(partitions: int) -> None:
    with pytest.raises(ValueError, match="partitions"):
        Names(partitions=partitions)


@pytest.mark.parametrize("partitions", [1, 16, 1000])
def test_partition_count_bounds_are_accepted(partitions: int) -> None:
    assert Names(partitions=partitions).partitions == partitions


def test_names_are_immutable() -> None:
    names = Names()
    with pytest.raises(AttributeError):
        names.prefix = "other"  # type: ignore[misc]
