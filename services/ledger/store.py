"""The ledger's Redis adapter: load an agent's slice for a command, and commit a decision as one
`lr_commit` call (idempotency, version and fence checked before any write)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from services.ledger.rules import Decision, LedgerState
from services.ledger.segments import with_item_batch, with_segment
from shared.domain.archive import ItemBatch
from shared.domain.control import control_signal
from shared.domain.history import seal_encoded
from shared.domain.index import COMPLETED_INDEXES, index_of, score_of
from shared.domain.readouts import work_item_json
from shared.domain.records import BriefKind, WaitingIntent, WorkItem
from shared.domain.specs import StoredSpec
from shared.domain.stored import AgentRecord, CapabilityRecord
from shared.domain.tools import reviewer_ids
from shared.domain.usage import day_increments, last_seq_field
from shared.domain.views import classify
from shared.store.client import AnyRedis
from shared.store.protocol import CommitPlan, Fn, LoadReply
from shared.wire import commands as c
from shared.wire.events import NOT_IN_EVENTS
from shared.wire.names import Names

REPLY_TTL_SECONDS = 7 * 24 * 3600
"""How long a command's reply is kept for dedup: longer than any redelivery can take."""
DELIVERY_TTL_SECONDS = 30 * 24 * 3600
EVENTS_MAXLEN = 200_000
EVIDENCE_KEEP = 200
REPLIES_KEEP = 1000
"""An agent's newest reply briefs kept: one may come with every turn, and an endless life must
not grow Redis without end (the history keeps every brief's event)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    stored_reply: bytes | None
    state: LedgerState
    version: int


def fencing_token(cmd: c.Command) -> int | None:
    """The command's fencing token, if its type has one. Read from the instance dict: pydantic's
    `__getattr__` on a missing field costs tens of microseconds per miss."""
    token = cmd.__dict__.get("fencing_token")
    return token if isinstance(token, int) else None


def named(cmd: c.Command) -> tuple[list[str], list[str]]:
    """WorkItem ids and wait ids a command names, so the load reads them."""
    if isinstance(cmd, c.CreateWorkItem):
        return [cmd.work_item_id], []
    fields = cmd.__dict__
    items: list[str] = []
    wid = fields.get("work_item_id")
    if isinstance(wid, str):
        items.append(wid)
    args = fields.get("args")
    if args is not None:
        wid = args.__dict__.get("work_item_id")
        if isinstance(wid, str):
            items.append(wid)
    if isinstance(cmd, (c.ConsumeRecheck, c.RetireAgent)):
        items.extend(cmd.work_item_ids)
    if isinstance(cmd, c.FireTimer):
        return items, [cmd.wait_id]
    if isinstance(cmd, c.ExpireDeadline) and cmd.target == "verification":
        items.append(cmd.target_id.partition(":")[0])
    return items, []


def agents_named(cmd: c.Command) -> frozenset[str]:
    """Other agents a command names (a delegation's target, reviewers of the checks it sets),
    looked up so that its rules can refuse one that does not exist."""
    if isinstance(cmd, c.DelegateWorkItem):
        return frozenset({cmd.args.to_agent, *reviewer_ids(cmd.args.acceptance)})
    if isinstance(cmd, (c.CreateWorkItem, c.UpdateWorkItem)):
        return reviewer_ids(cmd.args.acceptance)
    if isinstance(cmd, c.SpawnAgent):
        return frozenset({cmd.child_agent_id})
    if isinstance(cmd, c.SendMessage):
        return frozenset({cmd.args.to_agent})
    return frozenset()


class LedgerStore:
    def __init__(self, redis: AnyRedis, names: Names) -> None:
        self.redis = redis
        self.names = names

    def load_call(self, cmd: c.Command, base: Loaded | None = None) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of the command's lr_load; with `base` (a cached slice) the agent's
        records are read only if the agent moved past its version."""
        n, agent = self.names, cmd.agent_id
        p = n.partition(agent)
        cap = seen = n.placeholder(agent)
        if isinstance(cmd, c.RecordCallback):
            cap = n.capability(p, cmd.token_hash)
            seen = n.delivery(p, cmd.token_hash, cmd.delivery_id)
        keys = [
            n.idempotency(agent, cmd.command_id),
            n.agent(agent),
            n.fence(agent),
            n.items(agent),
            n.waits(agent),
            n.waits_done(agent),
            cap,
            seen,
            n.items_finished(agent),
        ]
        items, waits = named(cmd)
        known = [f"v:{base.version}"] if base is not None else []
        return keys, [*items, *(f"w:{w}" for w in waits), *known]

    def parse_load(self, cmd: c.Command, raw: Sequence[Any], base: Loaded | None = None) -> Loaded:
        reply = LoadReply.parse(raw)
        capability = (
            CapabilityRecord.model_validate_json(reply.capability) if reply.capability else None
        )
        if reply.unchanged and base is not None:
            state = base.state._copy(
                fence=reply.fence, capability=capability, delivery_seen=reply.delivery_seen
            )
            return Loaded(stored_reply=reply.stored_reply, state=state, version=reply.version)
        agent = AgentRecord.model_validate_json(reply.agent_doc) if reply.agent_doc else None
        waits = (WaitingIntent.model_validate_json(d) for d in [*reply.done_waits, *reply.waits])
        state = LedgerState(
            agent_id=cmd.agent_id,
            agent=agent,
            fence=reply.fence,
            items={i.id: i for i in (WorkItem.model_validate_json(d) for d in reply.items)},
            waits={w.id: w for w in waits},
            capability=capability,
            delivery_seen=reply.delivery_seen,
        )
        return Loaded(stored_reply=reply.stored_reply, state=state, version=reply.version)

    async def load_many(
        self, cmds: Sequence[c.Command], bases: Sequence[Loaded | None] | None = None
    ) -> list[Loaded]:
        """Each command's slice; `bases`: cached slices the loads may confirm instead."""
        bases = bases or [None] * len(cmds)
        pipe = self.redis.pipeline(transaction=False)
        for cmd, base in zip(cmds, bases, strict=True):
            keys, args = self.load_call(cmd, base)
            pipe.fcall_ro(Fn.LOAD, len(keys), *keys, *args)
        raws = await pipe.execute()
        loaded = [
            self.parse_load(cmd, raw, base)
            for cmd, raw, base in zip(cmds, raws, bases, strict=True)
        ]
        return [
            await with_item_batch(
                self.redis,
                self.names,
                cmd,
                await with_segment(
                    self.redis, self.names, cmd, await self._with_foreign(cmd, slice_)
                ),
            )
            for cmd, slice_ in zip(cmds, loaded, strict=True)
        ]

    async def _with_foreign(self, cmd: c.Command, loaded: Loaded) -> Loaded:
        """Named items missing here may be another agent's: look them up to say so. Other
        agents the command names are looked up too (agents are never deleted, so a read
        outside the commit's atomic step cannot go stale)."""
        agents = sorted(agents_named(cmd))
        if agents:
            pipe = self.redis.pipeline(transaction=False)
            for agent in agents:
                pipe.hexists(self.names.agent(agent), "doc")
            found = frozenset(a for a, hit in zip(agents, await pipe.execute(), strict=True) if hit)
            loaded = replace(loaded, state=replace(loaded.state, agents_found=found))
        items, _ = named(cmd)
        missing = [i for i in items if i not in loaded.state.items]
        if not missing or isinstance(cmd, c.CreateWorkItem):
            return loaded
        owners = await self.redis.hmget(self.names.work_item_owners, missing)
        mine = cmd.agent_id.encode()
        foreign = frozenset(
            i for i, owner in zip(missing, owners, strict=True) if owner and owner != mine
        )
        # This agent's, and not in Redis: archived (nothing else removes a WorkItem).
        archived = frozenset(i for i, owner in zip(missing, owners, strict=True) if owner == mine)
        if not foreign and not archived:
            return loaded
        state = replace(loaded.state, foreign_items=foreign, archived_items=archived)
        return replace(loaded, state=state)


def _json(model: Any) -> bytes:
    """The record's JSON, written by pydantic's serializer as bytes (no intermediate dict)."""
    raw: bytes = model.__pydantic_serializer__.to_json(model)
    return raw


_EVENT_EXCLUDE = frozenset({"agent_id", "work_item_id", "work_item"})


def _event_data(event: Any, dumped: dict[int, orjson.Fragment]) -> dict[str, Any]:
    """`event.data()`, reusing the canonical JSON of a WorkItem the commit already wrote (an
    event that carries the whole item would serialise it a second time)."""
    item = event.__dict__.get("work_item")
    found = dumped.get(id(item)) if item is not None else None
    data: dict[str, Any]
    if found is None:
        data = event.data()
        return data
    data = event.model_dump(mode="json", exclude=_EVENT_EXCLUDE)
    data["work_item"] = found
    return data


def history_events(
    agent: AgentRecord,
    decision: Decision,
    now: Any,
    dumped: dict[int, orjson.Fragment] | None = None,
) -> tuple[list[bytes], AgentRecord]:
    """Seal the decision's events onto the agent's chain; returns their stored JSON and the new
    tip. `dumped`: canonical JSON of records already serialised for this commit, by object id."""
    seq, head = agent.history_seq, agent.history_head
    sealed = []
    for event in decision.events:
        seq += 1
        head, doc = seal_encoded(
            seq=seq,
            event_type=event.message_type,
            at=now,
            agent_id=agent.state.agent_id,
            work_item_id=event.work_item_id,
            data=_event_data(event, dumped or {}),
            prev_hash=head,
        )
        sealed.append(doc)
    return sealed, agent.model_copy(update={"history_seq": seq, "history_head": head})


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


class PlanBuilder:
    """Turns (state before, decision) into the writes of one commit."""

    def __init__(self, names: Names, loaded: Loaded, decision: Decision) -> None:
        self.n = names
        self.before = loaded.state
        self.after = decision.state
        self.decision = decision
        self.agent_id = loaded.state.agent_id
        before, after = self.before.items, self.after.items
        # Identity, not equality: unchanged records are the very objects that were loaded.
        self.changed_items = {i for i in self.after.touched if before.get(i) is not after[i]}
        was = self.before.waits
        self.changed_waits = [w for w, wait in self.after.waits.items() if was.get(w) is not wait]
        self.dumped: dict[int, orjson.Fragment] = {}
        """Canonical JSON of the WorkItems written, by object id (reused by history_events)."""

    def index_moves(self, plan: CommitPlan) -> None:
        """Re-file the items whose class or score this command can have changed: written items,
        items whose waits changed, and the old and new current item."""
        affected = set(self.changed_items)
        affected.update(self.after.waits[w].work_item_id or "" for w in self.changed_waits)
        affected.update((self.before.current_id or "", self.after.current_id or ""))
        affected &= self.after.items.keys()
        if not affected:
            return
        existed = [self.before.items[i] for i in affected if i in self.before.items]
        before = (
            {
                r.item.id: r
                for r in classify(existed, self.before.active_waits(), self.before.current_id)
            }
            if existed
            else {}
        )
        after = classify(
            [self.after.items[i] for i in affected],
            self.after.active_waits(),
            self.after.current_id,
        )
        for entry in after:
            old = before.get(entry.item.id)
            new_index, new_score = index_of(entry), score_of(entry)
            if old is not None and (index_of(old), score_of(old)) == (new_index, new_score):
                continue
            if old is not None:
                plan.op("zrem", self.n.class_index(self.agent_id, index_of(old)), entry.item.id)
            # The score as text: a float argument sends the packer through every argument.
            index = self.n.class_index(self.agent_id, new_index)
            plan.op("zadd", index, repr(new_score), entry.item.id)

    def records(self, plan: CommitPlan) -> None:
        for item_id in self.changed_items:
            item = self.after.items[item_id]
            body = work_item_json(item)
            # Sorted keys: the same bytes are the item's canonical form inside history events,
            # which leave its process notes out (NOT_IN_EVENTS).
            raw = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
            self.item_write(plan, item, raw)
            for name in NOT_IN_EVENTS:
                body.pop(name, None)
            self.dumped[id(item)] = orjson.Fragment(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
        for wait_id in self.changed_waits:
            wait = self.after.waits[wait_id]
            if wait.is_active:
                plan.op("hset", self.n.waits(self.agent_id), wait_id, _json(wait))
            else:
                plan.op("hdel", self.n.waits(self.agent_id), wait_id)
                plan.op("hset", self.n.waits_done(self.agent_id), wait_id, _json(wait))

    def item_write(self, plan: CommitPlan, item: WorkItem, raw: bytes) -> None:
        """An open item lives in the open hash; the commit that finishes it moves it to the
        finished hash and files it in the finished index by when it finished, so that reading
        the open hash whole (a turn's opening) never parses finished items."""
        agent, item_id = self.agent_id, item.id
        if item.is_open:
            plan.op("hset", self.n.items(agent), item_id, raw)
            return
        was = self.before.items.get(item_id)
        plan.op("hset", self.n.items_finished(agent), item_id, raw)
        # Always, not only when it finishes now: a store written before the split kept finished
        # items in the open hash, and a copy left there would shadow this one.
        plan.op("hdel", self.n.items(agent), item_id)
        if was is None or was.is_open:
            finished_ms = (item.updated_at - _EPOCH) // _MILLISECOND
            plan.op("zadd", self.n.finished_index(agent), str(finished_ms), item_id)

    def side_writes(self, plan: CommitPlan) -> None:
        side, n, agent = self.decision.side, self.n, self.agent_id
        p = n.partition(agent)
        for message in side.inbox_push:
            plan.op("rpush", n.inbox(agent), _json(message))
        if side.inbox_pop:
            plan.op("lpop", n.inbox(agent), side.inbox_pop)
        for brief in side.briefs:
            if brief.kind is BriefKind.REPLY:
                plan.op("rpush", n.reply_briefs(agent), _json(brief))
                plan.op("ltrim", n.reply_briefs(agent), -REPLIES_KEEP, -1)
            else:
                plan.op("rpush", n.briefs(agent), _json(brief))
        for summary in side.summaries:
            plan.op("rpush", n.summaries(agent), _json(summary))
        for evidence in side.evidence:
            plan.op("rpush", n.evidence(agent), _json(evidence))
        if side.evidence:
            plan.op("ltrim", n.evidence(agent), -EVIDENCE_KEEP, -1)
        for token_hash, cap in side.capabilities:
            plan.op("set", n.capability(p, token_hash), _json(cap))
        self.transcript_write(plan)
        self.spec_write(plan)
        self.delegation_writes(plan)
        self.archive_writes(plan)
        if side.delivery_mark is not None:
            key = n.delivery(p, *side.delivery_mark)
            plan.op("setex", key, DELIVERY_TTL_SECONDS, b"1")
        self.usage_write(plan)

    def transcript_write(self, plan: CommitPlan) -> None:
        """Entries appended with the count of rounds they hold; a trim drops the oldest and
        counts them in `trimmed`, so an entry's seq (trimmed + position) never changes."""
        side, n, agent = self.decision.side, self.n, self.agent_id
        for turn_id, work_item_id, entry in side.transcript:
            doc = {
                "turn_id": turn_id,
                "work_item_id": work_item_id,
                **entry.model_dump(mode="json"),
            }
            plan.op("rpush", n.transcript(agent), orjson.dumps(doc))
        if side.transcript:
            rounds = len({(turn, entry.round) for turn, _, entry in side.transcript})
            plan.op("hincrby", n.transcript_meta(agent), "rounds", rounds)
        if side.transcript_trim is not None:
            entries, rounds = side.transcript_trim
            plan.op("ltrim", n.transcript(agent), entries, -1)
            plan.op("hincrby", n.transcript_meta(agent), "trimmed", entries)
            plan.op("hincrby", n.transcript_meta(agent), "rounds", -rounds)

    def archive_writes(self, plan: CommitPlan) -> None:
        """A committed segment: its events leave the head of the hot history (the events this
        commit appends go to its tail), its manifest joins the agent's segments."""
        segment = self.decision.side.history_archive
        if segment is not None:
            plan.op("lpop", self.n.history(self.agent_id), segment.events)
            plan.op("rpush", self.n.segments(self.agent_id), segment.model_dump_json())
        batch = self.decision.side.item_archive
        if batch is not None:
            self.item_archive_writes(plan, batch)

    def item_archive_writes(self, plan: CommitPlan, batch: ItemBatch) -> None:
        """A committed batch: its WorkItems leave the finished hash, the finished index and the
        completed class indexes; their briefs and summaries leave their lists (each stored doc
        is unique: it carries its own id); the batch joins the agent's `item_batches`."""
        n, agent = self.n, self.agent_id
        for item_id in batch.ids:
            plan.op("hdel", n.items_finished(agent), item_id)
            plan.op("hdel", n.items(agent), item_id)
            plan.op("zrem", n.finished_index(agent), item_id)
            for index in COMPLETED_INDEXES:
                plan.op("zrem", n.class_index(agent, index), item_id)
        for key, docs in (
            (n.briefs(agent), batch.briefs),
            (n.reply_briefs(agent), batch.reply_briefs),
            (n.summaries(agent), batch.summaries),
        ):
            for doc in docs:
                plan.op("lrem", key, 1, doc)
        plan.op("rpush", n.item_batches(agent), batch.entry().model_dump_json())

    def delegation_writes(self, plan: CommitPlan) -> None:
        for record in self.decision.side.delegations:
            plan.op("hset", self.n.delegations(self.agent_id), record.id, _json(record))

    def usage_write(self, plan: CommitPlan) -> None:
        """A turn with model calls adds its counts to its UTC day's row (exact over any life:
        a row per day, never a list of turns) and marks the row with this commit's last seq,
        so a range cutting the day can sum that day's turn_finished events from the history."""
        usage = self.decision.side.usage
        agent = self.decision.state.agent
        if usage is None or agent is None:
            return
        key = self.n.usage_days(self.agent_id)
        for field, amount in day_increments(usage):
            plan.op("hincrby", key, field, amount)
        last_seq = agent.history_seq + len(self.decision.events)
        plan.op("hset", key, last_seq_field(usage), last_seq)

    def spec_write(self, plan: CommitPlan) -> None:
        if self.decision.side.spec is not None:
            version, spec = self.decision.side.spec
            doc = StoredSpec(spec_version=version, spec=spec).model_dump_json()
            plan.op("set", self.n.agent_spec(self.agent_id), doc)

    def agent_write(self, plan: CommitPlan, agent: AgentRecord, version: int) -> None:
        key = self.n.agent(self.agent_id)
        plan.op("hset", key, "doc", _json(agent))
        plan.op("hset", key, "version", version)
        plan.op("hset", key, "current", agent.state.current_work_item_id or "")
        # What the running turn's executor reads between rounds and with each lease renewal;
        # written when it changes (an absent field reads as "", run on).
        signal = control_signal(agent.paused, agent.retired, agent.current_turn_id)
        old = self.before.agent
        if old is None or signal != control_signal(old.paused, old.retired, old.current_turn_id):
            plan.op("hset", key, "control", signal)
