"""The Python side of longrun's Redis Functions library (longrun.lua): each function's name and
its reply parsed into a named type, so no caller picks a reply apart by position or length.

The layouts of KEYS and ARGV are documented next to each function in longrun.lua. Reply shapes
are kept when the library's version rises: during a rolling upgrade an older process calls the
newer library, so a new field may only be appended, never moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from shared.wire.names import Names


class Fn(StrEnum):
    """The library's functions."""

    VERSION = "lr_version"
    LOAD = "lr_load"
    COMMIT = "lr_commit"
    LEASE_ACQUIRE = "lr_lease_acquire"
    LEASE_RENEW = "lr_lease_renew"
    LEASE_RELEASE = "lr_lease_release"
    TICK_RELEASE = "lr_tick_release"
    TICK_PUBLISH = "lr_tick_publish"
    TIMER_SCHEDULE = "lr_timer_schedule"
    TIMERS_DUE = "lr_timers_due"
    SNAPSHOT = "lr_snapshot"
    ITEMS_HEAD = "lr_items_head"
    XADD_ALL = "lr_xadd_all"
    TOUCH_IF_MINE = "lr_touch_if_mine"
    ACK_IF_MINE = "lr_ack_if_mine"


def _bytes(raw: Any) -> bytes | None:
    """A Lua `false` (None here) or empty value is absent; anything else is the stored bytes."""
    return bytes(raw) if raw else None


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def flag(raw: Any) -> bool:
    """The 1/0 answer of lr_lease_renew, lr_lease_release, lr_tick_release, lr_timer_schedule,
    lr_touch_if_mine and lr_ack_if_mine: whether the step was taken."""
    return bool(int(raw))


def flags(raw: Sequence[Any]) -> list[bool]:
    """lr_tick_publish: per tick, in order, whether it was published."""
    return [flag(one) for one in raw]


def count(raw: Any) -> int:
    """lr_timers_due (timers moved), lr_xadd_all (entries appended)."""
    return int(raw)


def token(raw: Any) -> int | None:
    """lr_lease_acquire: the new fencing token, or None while the lease is held."""
    return int(raw) if raw is not None else None


class Library(NamedTuple):
    """lr_version: which library a server holds."""

    version: int
    digest: str

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> Library:
        version, digest = raw
        return cls(int(version), _text(digest))


@dataclass(frozen=True, slots=True)
class LoadReply:
    """lr_load: what one ledger decision reads for one agent."""

    stored_reply: bytes | None
    """The command's reply, when it was applied before (a duplicate)."""
    agent_doc: bytes | None
    version: int
    fence: int
    waits: list[bytes]
    """Active waits."""
    capability: bytes | None
    delivery_seen: bool
    items: list[bytes]
    """Items the command names, the current item and the items active waits name."""
    done_waits: list[bytes]
    """Named waits that are no longer active."""
    unchanged: bool
    """The agent is still at the version the caller holds: agent_doc, waits, items and
    done_waits were left out (the caller's copy is current)."""

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> LoadReply:
        stored, agent, version, fence, waits, cap, seen, items, done, *rest = raw
        return cls(
            stored_reply=_bytes(stored),
            agent_doc=_bytes(agent),
            version=int(version),
            fence=int(fence),
            waits=list(waits),
            capability=_bytes(cap),
            delivery_seen=bool(seen),
            items=list(items),
            done_waits=list(done),
            unchanged=rest == [1],  # appended in version 1: a trailing 1, absent otherwise
        )


class CommitOutcome(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    STALE = "stale"


@dataclass
class CommitPlan:
    """KEYS and ARGV of one lr_commit call: a run of one agent's commands, each a header and
    its ops. Keys are shared by the run's commands and declared once."""

    keys: list[str]
    args: list[str | int | float | bytes] = field(default_factory=list)
    commands: int = 0
    _index: dict[str, int] = field(default_factory=dict)
    _count_at: int = -1

    @classmethod
    def for_agent(cls, names: Names, agent_id: str, *, reply_ttl: int) -> CommitPlan:
        """`reply_ttl`: seconds each command's reply is kept (it answers duplicates)."""
        plan = cls(keys=[names.agent(agent_id), names.fence(agent_id)])
        plan._index = {k: i for i, k in enumerate(plan.keys, start=1)}
        plan.args = [reply_ttl, 0]
        return plan

    def key(self, name: str) -> int:
        found = self._index.get(name)
        if found is None:
            self.keys.append(name)
            found = self._index[name] = len(self.keys)
        return found

    def begin(self, idempotency: str, expected: str, after: str, fence: str, reply: bytes) -> None:
        """Start the next command: its checks (`expected` version, '*' for none, '0' for a new
        agent; version `after`, '' if unchanged; `fence`, '' for none) and the reply to store;
        its ops follow."""
        self._seal()
        self.commands += 1
        self.args[1] = self.commands
        self.args += (self.key(idempotency), expected, after, fence, reply, 0)
        self._count_at = len(self.args) - 1

    def op(self, name: str, key: str, *args: str | int | float | bytes) -> None:
        """One write of the current command: `name` is one of lr_commit's ops (ARITY in
        longrun.lua), `args` its arguments after the key."""
        index = self._index.get(key)
        self.args += (name, index if index is not None else self.key(key), *args)

    def sealed(self) -> list[str | int | float | bytes]:
        """ARGV, complete: the last command's op count filled in."""
        self._seal()
        return self.args

    def _seal(self) -> None:
        """Write the current command's op count (ops only append, so it is counted once)."""
        if self._count_at >= 0:
            self.args[self._count_at] = len(self.args) - self._count_at - 1


@dataclass(frozen=True, slots=True)
class CommitReply:
    """lr_commit: how many of the run's commands applied and, if not all, why it stopped."""

    applied: int
    outcome: CommitOutcome
    """APPLIED when every command applied; else the check the next command failed."""
    stored_reply: bytes | None = None
    """DUPLICATE: the reply stored for the command that was applied before."""
    found: str | None = None
    """CONFLICT: the agent's version; STALE: the agent's fence."""

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> CommitReply:
        applied, *stopped = raw
        if not stopped:
            return cls(int(applied), CommitOutcome.APPLIED)
        kind, detail = stopped
        outcome = CommitOutcome(_text(kind))
        if outcome is CommitOutcome.DUPLICATE:
            return cls(int(applied), outcome, stored_reply=bytes(detail))
        return cls(int(applied), outcome, found=_text(detail))


class AgentRow(NamedTuple):
    """One agent of an lr_snapshot reply (absent agents have none)."""

    doc: bytes
    lease_held: bool
    marker: str | None
    """The outstanding-tick marker: the tick id it names."""
    waits: list[bytes]
    inbox: int
    due_rechecks: list[str]
    index_counts: tuple[int, ...]
    """Members of each class index, in the order the call named them."""
    items: list[bytes]


def snapshot_rows(raw: Sequence[Any]) -> list[AgentRow | None]:
    """lr_snapshot: one row per agent the call named, in order (None: no such agent)."""
    rows: list[AgentRow | None] = []
    for one in raw:
        if not one[0]:
            rows.append(None)
            continue
        doc, lease, marker, waits, inbox, due, counts, items = one
        rows.append(
            AgentRow(
                doc=bytes(doc),
                lease_held=bool(lease),
                marker=_text(marker) if marker else None,
                waits=list(waits),
                inbox=int(inbox),
                due_rechecks=[_text(m) for m in due],
                index_counts=tuple(int(c) for c in counts),
                items=list(items),
            )
        )
    return rows
