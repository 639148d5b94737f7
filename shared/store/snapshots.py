"""Reads agents' scheduling snapshots from Redis: ledger records, lease, tick marker and due
rechecks, reading each candidate class only as deep as a tick's prompt shows it (a finished
WorkItem is parsed only when a completed class's head shows it). Never writes.

One `lr_snapshot` call per partition for all the agents asked about (their keys share the
partition's hash tag), pipelined when they span partitions: per-command costs of the client
(packing, reply bookkeeping) are paid once per batch, not once per agent. Parsed agent facts,
WorkItems and waits are cached by their exact bytes (records are immutable values, and most of
an agent's items do not change between two events; an agent document read again unchanged, as
when events coalesce or a decision repeats, is not parsed again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from pydantic import ConfigDict

from shared.domain.base import Record
from shared.domain.index import INDEX_NAMES, TRIGGERED_BLOCKED, TRIGGERED_WAITING
from shared.domain.missing_secrets import MissingSecret
from shared.domain.model_failures import ModelOutage
from shared.domain.records import AgentLoop, AgentState, WaitingIntent, WorkItem
from shared.domain.scheduling import AgentSnapshot
from shared.domain.usage import DayTokens
from shared.domain.views import PROMPT_LIMITS, CandidateClass
from shared.store.client import AnyRedis
from shared.store.protocol import AgentRow, Fn, snapshot_rows
from shared.wire.names import Names

MAX_DUE_RECHECKS = 100
"""Due rechecks read per decision; more wait for the next one (each tick delivers these)."""

_CLASS_OF_INDEX: dict[str, CandidateClass] = {
    name: CandidateClass.TRIGGERED_BLOCKED
    if name in (TRIGGERED_BLOCKED, TRIGGERED_WAITING)
    else CandidateClass(name)
    for name in INDEX_NAMES
}


def _depth(cls: CandidateClass) -> int:
    return 1 if cls is CandidateClass.CURRENT_RUNNABLE else PROMPT_LIMITS.get(cls, 0)


HEAD_DEPTH: tuple[int, ...] = tuple(_depth(_CLASS_OF_INDEX[name]) for name in INDEX_NAMES)
"""Members read per class index (in INDEX_NAMES order): enough for the prompt limits and the
first runnable item; the indexes keep ranking order, so a head is exact."""


@lru_cache(maxsize=8192)
def _work_item(raw: bytes) -> WorkItem:
    return WorkItem.model_validate_json(raw)


@lru_cache(maxsize=8192)
def _agent_facts(raw: bytes) -> _AgentFacts:
    return _AgentFacts.model_validate_json(raw)


@lru_cache(maxsize=8192)
def _wait(raw: bytes) -> WaitingIntent:
    return WaitingIntent.model_validate_json(raw)


@lru_cache(maxsize=4096)
def _counts(counts: tuple[int, ...]) -> tuple[Mapping[str, int], Mapping[CandidateClass, int]]:
    """Members per class index and per candidate class, for one reply's counts: agents share a
    few shapes, and building the two maps was a third of a view's cost. Read-only, as shared."""
    index_counts = {name: int(n) for name, n in zip(INDEX_NAMES, counts, strict=True)}
    totals: dict[CandidateClass, int] = {}
    for name, count in index_counts.items():
        cls = _CLASS_OF_INDEX[name]
        totals[cls] = totals.get(cls, 0) + count
    return MappingProxyType(index_counts), MappingProxyType(totals)


class _AgentFacts(Record):
    """The part of the stored `AgentRecord` a decision reads (the rest is left unparsed)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    state: AgentState
    history_seq: int = 0
    exhaustion_reported: bool = False
    current_turn_id: str | None = None
    model_outage: ModelOutage | None = None
    daily_token_budget: int | None = None
    day_tokens: DayTokens | None = None
    budget_reported_day: str | None = None
    nudge_pending: bool = False
    missing_secret: MissingSecret | None = None


@dataclass(frozen=True, slots=True)
class AgentView:
    """A snapshot plus what the scheduler maintains around it."""

    snapshot: AgentSnapshot
    items: Mapping[str, WorkItem]
    due_rechecks: tuple[str, ...]
    marker: str | None
    """The outstanding-tick marker as stored; for external loops, the last wake published."""
    index_counts: Mapping[str, int]
    """Members of each class index."""
    turn_recorded: bool
    """The ledger records a turn in progress (`current_turn_id`); the lease is separate."""


@lru_cache(maxsize=65536)
def partition_of(n: Names, agent_id: str) -> int:
    """The agent's partition, remembered (a CRC of the id on every batch otherwise)."""
    return n.partition(agent_id)


@lru_cache(maxsize=65536)
def marker_of(n: Names, agent_id: str) -> str:
    """The agent's outstanding-tick marker key, remembered (published with every tick)."""
    return n.outstanding_tick(agent_id)


@lru_cache(maxsize=65536)
def _keys_of(n: Names, agent_id: str) -> tuple[str, ...]:
    """The keys `lr_snapshot` reads, built once per agent (names never change)."""
    return (
        n.agent(agent_id),
        n.lease(agent_id),
        n.outstanding_tick(agent_id),
        n.waits(agent_id),
        n.inbox(agent_id),
        n.due_rechecks(agent_id),
        n.items(agent_id),
        n.items_finished(agent_id),
        *(n.class_index(agent_id, name) for name in INDEX_NAMES),
    )


class SnapshotReader:
    def __init__(self, redis: AnyRedis, names: Names) -> None:
        self.redis = redis
        self.n = names

    async def load(self, agent_ids: Sequence[str], *, full: bool = False) -> dict[str, AgentView]:
        """Views of the agents that exist. `full` reads every WorkItem (exact ranks for any
        item, for explanations); otherwise each class's head and the items named elsewhere."""
        groups: dict[int, list[str]] = {}
        for agent_id in dict.fromkeys(agent_ids):
            groups.setdefault(partition_of(self.n, agent_id), []).append(agent_id)
        if not groups:
            return {}
        # 'f': each agent's keys name its finished items hash (library version 4).
        args = ("1f" if full else "0f", MAX_DUE_RECHECKS, *HEAD_DEPTH)
        calls = [
            [key for agent_id in ids for key in _keys_of(self.n, agent_id)]
            for ids in groups.values()
        ]
        if len(calls) == 1:
            # One partition, as in most batches at a moderate event rate: the call on its own
            # costs the client less CPU than a pipeline of one.
            (keys,) = calls
            replies = [await self.redis.fcall_ro(Fn.SNAPSHOT, len(keys), *keys, *args)]
        else:
            pipe = self.redis.pipeline(transaction=False)
            for keys in calls:
                pipe.fcall_ro(Fn.SNAPSHOT, len(keys), *keys, *args)
            replies = await pipe.execute()
        views: dict[str, AgentView] = {}
        for ids, reply in zip(groups.values(), replies, strict=True):
            for agent_id, row in zip(ids, snapshot_rows(reply), strict=True):
                if row is not None:
                    views[agent_id] = _view(row, full)
        return views


def _view(row: AgentRow, full: bool) -> AgentView:
    record = _agent_facts(row.doc)
    items = {i.id: i for i in (_work_item(bytes(d)) for d in row.items)}
    index_counts, totals = _counts(row.index_counts)
    builtin = record.state.loop is AgentLoop.BUILTIN
    snapshot = AgentSnapshot(
        agent=record.state,
        inbox=row.inbox,
        work_items=tuple(items.values()),
        waits=tuple(_wait(bytes(d)) for d in row.waits),
        turn_running=row.lease_held,
        # An external loop takes no lease and clears no marker: there the marker only records
        # the last wake, and the scheduler compares it with the wake the state calls for.
        outstanding_tick_id=row.marker if builtin else None,
        history_seq=record.history_seq,
        exhaustion_reported=record.exhaustion_reported,
        class_totals=None if full else totals,
        model_outage=record.model_outage,
        daily_token_budget=record.daily_token_budget,
        day_tokens=record.day_tokens,
        budget_reported_day=record.budget_reported_day,
        nudge_pending=record.nudge_pending,
        missing_secret=record.missing_secret,
    )
    return AgentView(
        snapshot=snapshot,
        items=items,
        due_rechecks=tuple(row.due_rechecks),
        marker=row.marker,
        index_counts=index_counts,
        turn_recorded=record.current_turn_id is not None,
    )
