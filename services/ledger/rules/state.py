"""The state a ledger decision reads, the context it is given, and the decision it returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.domain.acceptance import DEFAULT_CHECK_DEADLINE_S, DEFAULT_MAX_VERIFY_ATTEMPTS
from shared.domain.archive import ItemBatch, SegmentManifest
from shared.domain.delegation import (
    DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_DELEGATION_DEPTH,
    DelegationRecord,
)
from shared.domain.errors import DomainError, ErrorKind, ToolWarning
from shared.domain.records import (
    BriefRecord,
    DeliverySummaryRecord,
    InboxMessage,
    WaitingIntent,
    WorkItem,
)
from shared.domain.signing import SigningKey
from shared.domain.specs import AgentSpec
from shared.domain.stored import AgentRecord, CapabilityRecord, Evidence
from shared.domain.usage import UsageRecord
from shared.domain.webhooks import WebhookAllow
from shared.wire.commands import Command, TranscriptEntry
from shared.wire.events import Event


@dataclass(frozen=True, slots=True)
class LedgerState:
    """One agent's slice of the ledger, as loaded for a command (not the whole agent)."""

    agent_id: str
    agent: AgentRecord | None
    fence: int = 0
    items: Mapping[str, WorkItem] = field(default_factory=dict)
    waits: Mapping[str, WaitingIntent] = field(default_factory=dict)
    """Every active wait of the agent, plus any wait the command names."""
    capability: CapabilityRecord | None = None
    delivery_seen: bool = False
    foreign_items: frozenset[str] = frozenset()
    """Named WorkItem ids that exist but belong to another agent."""
    touched: frozenset[str] = frozenset()
    """WorkItem ids `with_item` wrote since the slice was loaded or committed (what to write
    back, without comparing every item)."""
    agents_found: frozenset[str] = frozenset()
    """Other agents the command names that exist (a delegation's target), looked up at load."""
    archive_segment: SegmentManifest | None = None
    """For CommitArchive: the segment the hot events up to its `upto_seq` make, as the load
    read them (None: there are not that many hot events)."""
    archived_items: frozenset[str] = frozenset()
    """Named WorkItem ids of this agent that are no longer in Redis: archived (an item leaves
    Redis no other way), so finished."""
    item_batch: ItemBatch | None = None
    """For CommitItemArchive: the batch its WorkItems make as the load read them (None: one
    of them is not a hot finished WorkItem)."""

    def require_agent(self) -> AgentRecord:
        if self.agent is None:
            raise DomainError(
                ErrorKind.WORK_ITEM_ACCESS_DENIED,
                f"agent {self.agent_id!r} does not exist",
                recovery_hint="Create the agent first (PUT /v1/agents/{agent_id}).",
            )
        return self.agent

    def item(self, work_item_id: str) -> WorkItem:
        """An item of this agent, or the not-found / access-denied error."""
        found = self.items.get(work_item_id)
        if work_item_id in self.foreign_items:
            raise DomainError(
                ErrorKind.WORK_ITEM_ACCESS_DENIED,
                f"WorkItem {work_item_id!r} belongs to another agent",
            )
        if found is None and work_item_id in self.archived_items:
            raise DomainError(
                ErrorKind.WORK_ITEM_NOT_OPEN,
                f"WorkItem {work_item_id!r} is completed and archived",
            )
        if found is None:
            raise DomainError(
                ErrorKind.WORK_ITEM_NOT_FOUND, f"no WorkItem {work_item_id!r} for this agent"
            )
        if found.agent_id != self.agent_id:
            raise DomainError(
                ErrorKind.WORK_ITEM_ACCESS_DENIED,
                f"WorkItem {work_item_id!r} belongs to another agent",
            )
        return found

    def open_item(self, work_item_id: str) -> WorkItem:
        found = self.item(work_item_id)
        if not found.is_open:
            raise DomainError(
                ErrorKind.WORK_ITEM_NOT_OPEN, f"WorkItem {work_item_id!r} is completed"
            )
        return found

    @property
    def current_id(self) -> str | None:
        return self.agent.state.current_work_item_id if self.agent else None

    def active_waits(self) -> list[WaitingIntent]:
        if not self.waits:
            return []
        return sorted(
            (w for w in self.waits.values() if w.is_active), key=lambda w: (w.created_at, w.id)
        )

    def waits_of(self, work_item_id: str | None) -> list[WaitingIntent]:
        return [w for w in self.active_waits() if w.work_item_id == work_item_id]

    def _copy(self, **changes: Any) -> LedgerState:
        """`dataclasses.replace`, spelled out: several times faster, and rules call it often."""
        fields: dict[str, Any] = {
            "agent_id": self.agent_id,
            "agent": self.agent,
            "fence": self.fence,
            "items": self.items,
            "waits": self.waits,
            "capability": self.capability,
            "delivery_seen": self.delivery_seen,
            "foreign_items": self.foreign_items,
            "touched": self.touched,
            "agents_found": self.agents_found,
            "archive_segment": self.archive_segment,
            "archived_items": self.archived_items,
            "item_batch": self.item_batch,
        }
        fields.update(changes)
        return LedgerState(**fields)

    def with_item(self, item: WorkItem) -> LedgerState:
        return self._copy(items={**self.items, item.id: item}, touched=self.touched | {item.id})

    def committed(self) -> LedgerState:
        """This state as the base of the next decision (nothing written since)."""
        return self._copy(touched=frozenset()) if self.touched else self

    def committed_with(self, agent: AgentRecord) -> LedgerState:
        """`with_agent(agent).committed()` in one copy (the ledger does it after every write)."""
        return self._copy(agent=agent, touched=frozenset())

    def with_wait(self, wait: WaitingIntent) -> LedgerState:
        return self._copy(waits={**self.waits, wait.id: wait})

    def with_agent(self, agent: AgentRecord) -> LedgerState:
        return self._copy(agent=agent)


@dataclass(frozen=True, slots=True)
class Context:
    """What a decision may not compute itself: the time and fresh ids."""

    now: datetime
    new_id: Callable[[str], str]
    """`new_id("wait_")` returns a fresh ULID-based id with that prefix."""
    wake_limit: int = 25
    """LONGRUN_MAX_WAKE_CYCLES, given to new agents."""
    max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH
    """LONGRUN_MAX_DELEGATION_DEPTH: hops from the root WorkItem a delegation may reach."""
    max_children: int = DEFAULT_MAX_CHILDREN
    """LONGRUN_MAX_CHILDREN: private children with a running delegation an agent may have."""
    signing_key: SigningKey | None = None
    """The key history heads are signed with (Ed25519 signing is deterministic: a pure
    function of the key and the bytes)."""
    webhook_allow: WebhookAllow = field(default_factory=WebhookAllow)
    max_verify_attempts: int = DEFAULT_MAX_VERIFY_ATTEMPTS
    """LONGRUN_MAX_VERIFY_ATTEMPTS: failed attempts after which only the operator moves an item."""
    """LONGRUN_WEBHOOK_ALLOW: where webhook checks not set by the operator may point."""
    check_deadline_s: int = DEFAULT_CHECK_DEADLINE_S
    """LONGRUN_CHECK_DEADLINE_S: when an operator_approval or reviewer_agent check without its
    own `deadline_s` fails for want of a verdict, counted from the attempt's start."""


@dataclass(frozen=True, slots=True)
class SideWrites:
    """Appends beside the records: inbox, briefs, evidence, capabilities, delivery marks."""

    inbox_push: tuple[InboxMessage, ...] = ()
    inbox_pop: int = 0
    briefs: tuple[BriefRecord, ...] = ()
    summaries: tuple[DeliverySummaryRecord, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    capabilities: tuple[tuple[str, CapabilityRecord], ...] = ()
    """(token hash, record) pairs to store."""
    delivery_mark: tuple[str, str] | None = None
    """(token hash, delivery id) seen by this command."""
    transcript: tuple[tuple[str, str | None, TranscriptEntry], ...] = ()
    """(turn id, work item id, entry) to append to the agent's transcript."""
    transcript_trim: tuple[int, int] | None = None
    """(entries, rounds) to drop from the head of the agent's transcript."""
    spec: tuple[int, AgentSpec] | None = None
    """(spec version, spec) to store as the agent's spec document."""
    usage: UsageRecord | None = None
    """A finished turn's usage, appended to the agent's usage records."""
    delegations: tuple[DelegationRecord, ...] = ()
    """Delegation records to store (as this agent sees them), by id."""
    history_archive: SegmentManifest | None = None
    """A committed segment: its events leave the hot history, its manifest is kept."""
    item_archive: ItemBatch | None = None
    """A committed batch of finished WorkItems: they, their briefs and their delivery
    summaries leave Redis; the batch is kept in the agent's `item_batches`."""
    outbox: tuple[Command, ...] = ()
    """Commands for other agents (maybe other partitions), stored in this partition's outbox
    in the same commit and sent until applied (services/ledger/outbox.py)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision: the state after the command, the facts that happened, and the answer."""

    state: LedgerState
    events: tuple[Event, ...] = ()
    result: dict[str, Any] | None = None
    warnings: tuple[ToolWarning, ...] = ()
    side: SideWrites = SideWrites()
