"""Every stream, consumer group and Redis key name, written once.

Keys one atomic step touches share the partition's hash tag `{pNN}`, so a Redis Function never
crosses slots and the same code runs on one Redis or on a Redis Cluster.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache


@lru_cache(maxsize=65_536)
def partition_of(agent_id: str, partitions: int) -> int:
    """crc32, not Python's hash(): it must agree across processes and languages."""
    return zlib.crc32(agent_id.encode()) % partitions


@lru_cache(maxsize=65_536)
def _agent_base(prefix: str, tag: str, agent_id: str) -> str:
    """`<prefix>:<tag>:agent:<agent_id>`, the start of every key of one agent (the ledger names
    several per command)."""
    return f"{prefix}:{tag}:agent:{agent_id}"


@lru_cache(maxsize=1024)
def _tag(partition: int) -> str:
    # Width 3 keeps every tag the same length for up to 1000 partitions.
    return f"{{p{partition:03d}}}"


class Group:
    """Consumer group names; one per consuming service, shared by its replicas."""

    LEDGER = "ledger"
    SCHEDULER = "scheduler"
    EXECUTOR = "turn-executor"
    INGRESS = "ingress"
    WEBHOOKS = "webhooks"
    """The scheduler's webhook runner, on the partition event streams beside `scheduler`: a
    slow webhook must not hold up tick decisions."""
    COMMAND_CHECKS = "command-checks"
    """The scheduler's asker of `command` checks, on the partition event streams."""
    CHECK_RUNNERS = "check-runners"
    """The turn executors' check runners, on `check_requests`."""


@dataclass(frozen=True, slots=True)
class Names:
    prefix: str = "lr"
    partitions: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 1000:
            raise ValueError("partitions must be in 1..1000")
        if not self.prefix or any(c in self.prefix for c in "{} :"):
            raise ValueError("prefix must be non-empty without braces, spaces or colons")

    def partition(self, agent_id: str) -> int:
        return partition_of(agent_id, self.partitions)

    def tag(self, partition: int) -> str:
        return _tag(partition)

    def _p(self, partition: int, *parts: str) -> str:
        return ":".join((self.prefix, self.tag(partition), *parts))

    def _a(self, agent_id: str, *parts: str) -> str:
        return self._p(self.partition(agent_id), *parts)

    def _agent(self, agent_id: str, suffix: str) -> str:
        """`<prefix>:<tag>:agent:<agent_id>:<suffix>`."""
        base = _agent_base(self.prefix, _tag(partition_of(agent_id, self.partitions)), agent_id)
        return f"{base}:{suffix}"

    # ---- streams, partitioned like the agents they carry
    def commands(self, partition: int) -> str:
        return self._p(partition, "commands")

    def events(self, partition: int) -> str:
        return self._p(partition, "events")

    def ticks(self, partition: int) -> str:
        return self._p(partition, "ticks")

    def timers(self, partition: int) -> str:
        """Sorted set of due times; a Function moves due members to `timers_fired`."""
        return self._p(partition, "timers")

    def timers_fired(self, partition: int) -> str:
        return self._p(partition, "timers-fired")

    # ---- global streams, for producers and consumers outside longrun
    @property
    def sandbox_status(self) -> str:
        """Hash: executor process -> JSON {backend, available, reason, at}, written when it
        starts (removed when it stops cleanly); ingress reads it to say why RunCommand is not
        offered on the agent view."""
        return f"{self.prefix}:sandbox"

    @property
    def check_requests(self) -> str:
        """Stream: `command` acceptance checks the scheduler asks the turn executors to run
        (group `check-runners`); each answered by a RecordVerdict to the ledger."""
        return f"{self.prefix}:check-requests"

    def check_asked(self, verdict_command_id: str) -> str:
        """String with a TTL: this (item, attempt, check) was asked for once; the scheduler's
        sweep does not ask again while it lives."""
        return f"{self.prefix}:check-asked:{verdict_command_id}"

    @property
    def callbacks(self) -> str:
        return f"{self.prefix}:callbacks"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}:dead-letter"

    @property
    def wakes(self) -> str:
        """Ticks for agents with `loop: external`, consumed by their own loops."""
        return f"{self.prefix}:wakes"

    def replies(self, process_id: str) -> str:
        """One reply stream per waiting process: the ledger answers commands here."""
        return f"{self.prefix}:replies:{process_id}"

    # ---- ledger-owned keys (all under the agent's partition tag)
    def agent(self, agent_id: str) -> str:
        """Hash: `doc` (AgentRecord JSON), `version` (moves on every write), `current`,
        `control` (the operator's signal to the running turn: shared.domain.control)."""
        return _agent_base(self.prefix, _tag(partition_of(agent_id, self.partitions)), agent_id)

    def agent_spec(self, agent_id: str) -> str:
        """String: the spec document `{spec_version, spec}`. Apart from the agent hash, which is
        rewritten by every command, so a long spec is written only when it changes."""
        return self._agent(agent_id, "spec")

    def agents_index(self, partition: int) -> str:
        return self._p(partition, "agents")

    def items(self, agent_id: str) -> str:
        """Hash of open WorkItem id -> WorkItem JSON: what a turn's opening reads whole. One key
        per agent, so every key an atomic step touches is known before it runs (Redis Cluster
        refuses undeclared keys). A WorkItem leaves it for `items_finished` in the commit that
        completes it."""
        return self._agent(agent_id, "items")

    def items_finished(self, agent_id: str) -> str:
        """Hash of finished (completed, done or cancelled) WorkItem id -> WorkItem JSON: read by
        id, or through `finished_index` and the completed class indexes, never whole on a hot
        path."""
        return self._agent(agent_id, "items-finished")

    def finished_index(self, agent_id: str) -> str:
        """Sorted set of the ids in `items_finished`, scored by when each finished (epoch ms):
        the oldest first, for whatever moves finished WorkItems out of Redis."""
        return self._agent(agent_id, "finished")

    def item_batches(self, agent_id: str) -> str:
        """List of the agent's committed batches of archived WorkItems (`ItemBatchEntry` JSON),
        oldest first: which manifests under its archive directory are committed."""
        return self._agent(agent_id, "item-batches")

    def class_index(self, agent_id: str, name: str) -> str:
        """Sorted set of WorkItem ids in one candidate class (disjoint; see shared.store.index)."""
        return self._agent(agent_id, f"idx:{name}")

    def waits(self, agent_id: str) -> str:
        """Hash of active waits (id -> WaitingIntent JSON)."""
        return self._agent(agent_id, "waits")

    def waits_done(self, agent_id: str) -> str:
        """Hash of cancelled waits, kept for reads and audit."""
        return self._agent(agent_id, "waits-done")

    def capability(self, partition: int, token_hash: str) -> str:
        return self._p(partition, "cap", token_hash)

    def delivery(self, partition: int, token_hash: str, delivery_id: str) -> str:
        return self._p(partition, "delivery", token_hash, delivery_id)

    def idempotency(self, agent_id: str, command_id: str) -> str:
        tag = _tag(partition_of(agent_id, self.partitions))
        return f"{self.prefix}:{tag}:cmd:{agent_id}:{command_id}"

    def fence(self, agent_id: str) -> str:
        """Monotonic fencing counter; never expires."""
        return self._agent(agent_id, "fence")

    def lease(self, agent_id: str) -> str:
        return self._agent(agent_id, "lease")

    def inbox(self, agent_id: str) -> str:
        return self._agent(agent_id, "inbox")

    def briefs(self, agent_id: str) -> str:
        return self._agent(agent_id, "briefs")

    def reply_briefs(self, agent_id: str) -> str:
        """List of the agent's `reply` briefs, apart from the other briefs: one may come with
        every turn, so it is trimmed to the newest (the briefs of results and failures are not)."""
        return self._agent(agent_id, "reply-briefs")

    def summaries(self, agent_id: str) -> str:
        return self._agent(agent_id, "summaries")

    def usage_days(self, agent_id: str) -> str:
        """Hash of the agent's usage summed per UTC day: integer fields `DAY|turns`,
        `DAY|<counter>`, `DAY|<provider/name>|<counter>` and `DAY|last_seq`
        (shared/domain/usage.py)."""
        return self._agent(agent_id, "usage-days")

    def transcript(self, agent_id: str) -> str:
        """List of transcript entries, each tagged with its turn and WorkItem."""
        return self._agent(agent_id, "transcript")

    def transcript_meta(self, agent_id: str) -> str:
        """Hash beside the transcript: `trimmed` (entries dropped from its head so far, so an
        entry's `seq` stays its position since the first) and `rounds` (rounds it holds)."""
        return self._agent(agent_id, "transcript_meta")

    def evidence(self, agent_id: str) -> str:
        return self._agent(agent_id, "evidence")

    def history(self, agent_id: str) -> str:
        """List of the hot history: events past the last archived segment (the first is
        `archived_seq + 1`, where archived_seq is the last segment's `last_seq`, else 0)."""
        return self._agent(agent_id, "history")

    def segments(self, agent_id: str) -> str:
        """List of the manifests of the agent's committed history segments, oldest first: where
        the archived history is, and where the hot history starts."""
        return self._agent(agent_id, "segments")

    def outstanding_tick(self, agent_id: str) -> str:
        return self._agent(agent_id, "tick")

    def due_rechecks(self, agent_id: str) -> str:
        """Scheduler-owned sorted set of WorkItem ids whose recheck timer fired and whose recheck
        is not yet delivered: lets a decision find due rechecks without reading every item."""
        return self._agent(agent_id, "rechecks-due")

    def timer_scheduled(self, agent_id: str, seq: int) -> str:
        """Mark that the `timer_scheduled` event `seq` of the agent armed its timer (expires)."""
        return self._agent(agent_id, f"timer-scheduled:{seq}")

    def delegations(self, agent_id: str) -> str:
        """Hash of delegation id -> DelegationRecord JSON, as this agent sees each delegation
        (made by it: direction out; made to it: direction in)."""
        return self._agent(agent_id, "delegations")

    def outbox(self, partition: int) -> str:
        """Hash of command id -> command envelope: commands this partition's ledger writes
        for agents elsewhere, in the same commit as the change that causes them, kept until
        the target has applied them (services/ledger/outbox.py)."""
        return self._p(partition, "outbox")

    def outbox_due(self, partition: int) -> str:
        """Sorted set of outbox command ids by when to check (and maybe re-send) them, ms."""
        return self._p(partition, "outbox-due")

    def placeholder(self, agent_id: str) -> str:
        """A key under the agent's tag that is never written: fills an unused KEYS slot."""
        return self._agent(agent_id, "unused")

    def console_sign_in_failures(self, address: str) -> str:
        """Counter of one client address's failed console sign-ins in its current minute
        (expires with the minute). Ingress's own: no ledger record, nothing durable."""
        return f"{self.prefix}:console:sign-in-failures:{address}"

    def console_revoked(self, session_nonce: str) -> str:
        """Mark of a console session signed out on the server (expires with the session), so
        every ingress worker and replica refuses its cookie from then on."""
        return f"{self.prefix}:console:revoked:{session_nonce}"

    @property
    def work_item_owners(self) -> str:
        """Global hash WorkItem id -> agent id, only to tell `access_denied` from `not_found`
        for another agent's item; written after the commit, never read by a decision's writes."""
        return f"{self.prefix}:work-item-owners"

    @property
    def presets(self) -> str:
        """Global hash preset name -> PresetRecord JSON: specs the operator stored for
        SpawnAgent (written by ingress, read by tool-call senders; no ledger decision reads it)."""
        return f"{self.prefix}:presets"

    @property
    def signing_keys(self) -> str:
        """Global hash key id -> public key JSON: every key any ledger ever signed heads with
        (written by each ledger at start; a rotated key stays, so old anchors verify)."""
        return f"{self.prefix}:signing-keys"

    @property
    def functions_library(self) -> str:
        return "longrun"
