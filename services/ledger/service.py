"""The ledger's use case: apply a batch of commands exactly once and answer each.

Per batch: load every command's slice in one pipeline, decide each (pure rules), commit each
through `lr_commit`, publish replies. Commands for one agent run in successive waves, so each
decides against the state its predecessor left; a version conflict (another ledger replica won
the race) sends the command to the next wave to be decided again from fresh state.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import structlog
from redis.asyncio.cluster import RedisCluster

from services.ledger.cache import SliceCache, covers
from services.ledger.readside import answer_read
from services.ledger.rules import Context, Decision, SideWrites, decide
from services.ledger.store import (
    EVENTS_MAXLEN,
    REPLY_TTL_SECONDS,
    LedgerStore,
    Loaded,
    PlanBuilder,
    fencing_token,
    history_events,
)
from shared.domain.errors import DomainError
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.store.protocol import CommitOutcome, CommitPlan, CommitReply, Fn
from shared.wire import commands as c
from shared.wire.codec import decode, encode_built
from shared.wire.events import LedgerEvents
from shared.wire.names import Group, Names
from shared.wire.replies import CommandOutcome, CommandReply

log = structlog.get_logger("longrun.ledger")

MAX_RACES = 200
"""Lost version races tolerated per batch (another replica writing the same agents)."""
MAX_RUN = 64
"""Most commands of one agent committed by one lr_commit call (bounds the call's size)."""
Entry = tuple[str, str]
"""A command's stream entry: (stream, entry id), XACKed for the ledger group once applied."""
REPLY_STREAM_MAXLEN = 10_000
REPLY_STREAM_TTL_SECONDS = 3600


class LedgerBusy(Exception):
    """A command kept losing version races; leave it pending for the reclaimer (transient)."""


@dataclass(frozen=True, slots=True)
class _Planned:
    index: int
    command: c.Command
    reply: CommandReply
    wire: bytes | None
    """The reply's envelope as stored (None: answered from the stored reply)."""
    after: Loaded | None
    """The agent's slice once this command applies (None: answered from the stored reply)."""
    delivered: bool = False
    """Its reply (if any) and its entry's XACK ride in its lr_commit call."""


@dataclass(slots=True)
class _Run:
    """One agent's consecutive write commands, decided one after the other against the state
    the previous one left, and committed by one lr_commit call (None: nothing to write)."""

    agent_id: str
    planned: list[_Planned]
    plan: CommitPlan | None
    deferred: list[tuple[int, c.Command]]
    """Commands of the run left for the next wave (not covered by the slice in memory)."""


@dataclass(frozen=True, slots=True)
class Applied:
    command: c.Command
    reply: CommandReply
    wire: bytes | None = None
    """The reply's envelope when it was just encoded (published as it is)."""
    delivered: bool = False
    """Answered and acknowledged inside the commit: nothing left to publish."""


def reply_bytes(reply: CommandReply, at: datetime) -> bytes:
    """The reply's envelope, stored for dedup and sent to `reply_to` as it is. The same JSON as
    `reply.model_dump(mode="json")`, at a quarter of the cost: results are JSON-ready already
    (views and plain values), so orjson writes them without pydantic walking them again."""
    error = reply.error
    body = {
        "command_id": reply.command_id,
        "outcome": reply.outcome,
        "result": reply.result,
        "warnings": [w.model_dump(mode="json") for w in reply.warnings],
        "error": error.model_dump(mode="json") if error is not None else None,
    }
    return encode_built(CommandReply, id=reply.command_id, at=at, body=body)


class LedgerService:
    def __init__(
        self,
        redis: AnyRedis,
        names: Names,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime],
        new_id: Callable[[str], str],
        wake_limit: int,
        inline_replies: bool | None = None,
    ) -> None:
        self.redis = redis
        self.inline_replies = (
            not isinstance(redis, RedisCluster) if inline_replies is None else inline_replies
        )
        """Replies XADDed by lr_commit itself (standalone Redis, the default there); on a
        Cluster the sender's reply stream is in another slot, so replies follow in a pipeline.
        XACKs are always inline (the command stream shares the partition's tag)."""
        self.names = names
        self.store = LedgerStore(redis, names)
        self.metrics = metrics
        self.clock = clock
        self.new_id = new_id
        self.wake_limit = wake_limit
        self.cache = SliceCache()
        self._owners: dict[str, str] = {}
        """WorkItem id -> agent of the items created since the last reply flush."""
        self._event_base = ""
        self._event_count = 0

    def context(self) -> Context:
        return Context(now=self.clock(), new_id=self.new_id, wake_limit=self.wake_limit)

    async def apply_batch(
        self, commands: Sequence[c.Command], *, ack: Sequence[Entry] | None = None
    ) -> list[Applied]:
        """Apply every command once; returns replies in input order. `ack`: each command's
        (stream, entry id) to XACK for the ledger group once applied, in the same round trip as
        its reply. The entries may come from several partitions' streams (a coalesced round)."""
        started = time.perf_counter()
        done: dict[int, Applied] = {}
        pending = list(enumerate(commands))
        entries = dict(enumerate(ack)) if ack else None
        races = 0
        while pending:
            wave, pending = _split_wave(pending)
            retry, deferred = await self._run_wave(wave, done, entries)
            races += len(retry)
            if races > MAX_RACES:
                raise LedgerBusy(f"{len(retry)} commands lost {MAX_RACES} version races")
            pending = sorted(retry + deferred) + pending
        applied = [done[i] for i in range(len(commands))]
        undelivered = [ack[i] for i, a in enumerate(applied) if not a.delivered] if ack else []
        await self._publish_replies(applied, undelivered)
        elapsed = (time.perf_counter() - started) / max(len(commands), 1)
        observe = self.metrics.ledger_command_seconds.observe
        for _ in applied:
            observe(elapsed)
        # One labelled increment per kind of result (looking up a label set is the costly part).
        kinds = Counter((item.command.message_type, item.reply.outcome) for item in applied)
        for labels, count in kinds.items():
            self.metrics.ledger_commands.labels(*labels).inc(count)
        return applied

    async def _run_wave(
        self,
        wave: list[list[tuple[int, c.Command]]],
        done: dict[int, Applied],
        entries: dict[int, Entry] | None,
    ) -> tuple[list[tuple[int, c.Command]], list[tuple[int, c.Command]]]:
        """Answer the wave's reads, decide and commit its runs; returns (commands that lost a
        race, commands deferred to the next wave)."""
        ctx = self.context()
        self._event_base, self._event_count = self.new_id("evt_"), 0
        reads = [run[0] for run in wave if _is_read(run[0][1])]
        writes = [run for run in wave if not _is_read(run[0][1])]
        answers = await asyncio.gather(
            *(answer_read(self.redis, self.names, cmd) for _, cmd in reads)
        )
        for (i, cmd), reply in zip(reads, answers, strict=True):
            done[i] = Applied(cmd, reply)
        slices = await self._slices([run[0][1] for run in writes])
        runs = [
            self._plan_run(run, slice_, ctx, entries)
            for run, slice_ in zip(writes, slices, strict=True)
        ]
        retry, deferred = await self._commit(runs, done)
        return retry, deferred + [entry for run in runs for entry in run.deferred]

    async def _slices(self, cmds: list[c.Command]) -> list[Loaded]:
        """Cached slices where they cover the command, one lr_load pipeline for the rest (a
        light one where a cached slice needs only what is not cached, if still current)."""
        found = [self.cache.lookup(cmd) for cmd in cmds]
        missing = [cmd for cmd, hit in zip(cmds, found, strict=True) if hit is None]
        bases = [self.cache.base(cmd) for cmd in missing]
        loaded = iter(await self.store.load_many(missing, bases) if missing else [])
        return [hit if hit is not None else next(loaded) for hit in found]

    def _plan_run(
        self,
        run: list[tuple[int, c.Command]],
        loaded: Loaded,
        ctx: Context,
        entries: dict[int, Entry] | None,
    ) -> _Run:
        """Decide the run's commands in order while the slice in memory covers them."""
        agent_id = run[0][1].agent_id
        plan = CommitPlan.for_agent(self.names, agent_id, reply_ttl=REPLY_TTL_SECONDS)
        planned: list[_Planned] = []
        state: Loaded | None = loaded
        for pos, (i, cmd) in enumerate(run):
            if state is None or (pos > 0 and not covers(state, cmd)):
                return _Run(agent_id, planned, plan if plan.commands else None, run[pos:])
            reply, wire, state = self._plan(cmd, state, plan, ctx)
            delivered = wire is not None and self._deliver(
                plan, cmd, wire, entries, i, created=reply.error is None
            )
            planned.append(_Planned(i, cmd, reply, wire, state, delivered))
        return _Run(agent_id, planned, plan if plan.commands else None, [])

    def _plan(
        self, cmd: c.Command, loaded: Loaded, plan: CommitPlan, ctx: Context
    ) -> tuple[CommandReply, bytes | None, Loaded | None]:
        """The reply and its envelope, with the command's writes added to the plan (none when it
        is answered from the stored reply), and the agent's slice once they apply (None:
        unknown)."""
        if loaded.stored_reply is not None:
            return _as_duplicate(loaded.stored_reply), None, None
        idempotency = self.names.idempotency(cmd.agent_id, cmd.command_id)
        try:
            decision = decide(loaded.state, cmd, ctx)
        except DomainError as err:
            reply = CommandReply(
                command_id=cmd.command_id, outcome=CommandOutcome.REJECTED, error=err.body()
            )
            wire = reply_bytes(reply, ctx.now)
            plan.begin(idempotency, "*", "", "", wire)
            return reply, wire, loaded
        # (The plain constructor: cheaper than pydantic's model_construct for this model.)
        reply = CommandReply(
            command_id=cmd.command_id,
            outcome=CommandOutcome.APPLIED,
            result=decision.result,
            warnings=decision.warnings,
            error=None,
        )
        token = fencing_token(cmd)
        fence = str(token) if token else ""
        agent = decision.state.agent
        wire = reply_bytes(reply, ctx.now)
        if agent is None or not (decision.events or decision.side != SideWrites()):
            expected = str(loaded.version) if agent else "*"
            plan.begin(idempotency, expected, "", fence, wire)
            return reply, wire, loaded
        plan.begin(idempotency, str(loaded.version), str(loaded.version + 1), fence, wire)
        return reply, wire, self._write_plan(cmd, loaded, decision, plan, ctx)

    def _deliver(
        self,
        plan: CommitPlan,
        cmd: c.Command,
        wire: bytes,
        entries: dict[int, Entry] | None,
        i: int,
        *,
        created: bool,
    ) -> bool:
        """Add the reply and the entry's XACK to the command's ops, when the commit can carry
        them both (standalone Redis, or a command nobody awaits); True if it does."""
        if cmd.reply_to and not self.inline_replies:
            return False
        if entries is None and not cmd.reply_to:
            return False
        if cmd.reply_to:
            plan.op("reply", cmd.reply_to, REPLY_STREAM_MAXLEN, REPLY_STREAM_TTL_SECONDS, wire)
        if entries is not None:
            stream, entry_id = entries[i]
            plan.op("xack", stream, Group.LEDGER, entry_id)
        if isinstance(cmd, c.CreateWorkItem) and created and self.inline_replies:
            # Owners are a global key: with inline replies (one Redis) it joins the commit too.
            plan.op("hset", self.names.work_item_owners, cmd.work_item_id, cmd.agent_id)
        return True

    def _write_plan(
        self, cmd: c.Command, loaded: Loaded, decision: Decision, plan: CommitPlan, ctx: Context
    ) -> Loaded:
        agent = decision.state.agent
        assert agent is not None
        builder = PlanBuilder(self.names, loaded, decision)
        builder.records(plan)
        sealed, agent = history_events(agent, decision, ctx.now, builder.dumped)
        builder.index_moves(plan)
        builder.side_writes(plan)
        builder.agent_write(plan, agent, loaded.version + 1)
        n = self.names
        for doc in sealed:
            plan.op("rpush", n.history(cmd.agent_id), doc)
        if loaded.state.agent is None:
            plan.op("zadd", n.agents_index(n.partition(cmd.agent_id)), 0, cmd.agent_id)
        events = [orjson.Fragment(doc) for doc in sealed]
        body = {"agent_id": cmd.agent_id, "command_id": cmd.command_id, "events": events}
        envelope = encode_built(LedgerEvents, id=self._event_id(), at=ctx.now, body=body)
        plan.op("xadd", n.events(n.partition(cmd.agent_id)), EVENTS_MAXLEN, envelope, cmd.agent_id)
        return Loaded(
            stored_reply=None,
            state=decision.state.committed_with(agent),
            version=loaded.version + 1,
        )

    def _event_id(self) -> str:
        """One ULID per wave and a counter: unique like a ULID each, at a fraction of the cost
        (minting a ULID was 5% of the ledger's CPU)."""
        self._event_count += 1
        return f"{self._event_base}.{self._event_count}"

    async def _commit(
        self, runs: list[_Run], done: dict[int, Applied]
    ) -> tuple[list[tuple[int, c.Command]], list[tuple[int, c.Command]]]:
        """One lr_commit per run, pipelined. The commands a run's call did not apply are
        decided again from fresh state: a lost race (version or fence) counts as a race, the
        rest (behind a duplicate) are only deferred."""
        pipe = self.redis.pipeline(transaction=False)
        calls: list[_Run] = []
        for run in runs:
            if run.plan is None:
                for planned in run.planned:
                    done[planned.index] = Applied(planned.command, planned.reply)
                self.cache.forget(run.agent_id)
                continue
            calls.append(run)
            pipe.fcall(Fn.COMMIT, len(run.plan.keys), *run.plan.keys, *run.plan.sealed())
        results = await pipe.execute() if calls else []
        retry: list[tuple[int, c.Command]] = []
        deferred: list[tuple[int, c.Command]] = []
        owners: list[tuple[str, str]] = []
        for run, result in zip(calls, results, strict=True):
            unapplied = self._settle(run, CommitReply.parse(result), done, owners)
            if unapplied is None:
                continue
            outcome, failed, later = unapplied
            if outcome is CommitOutcome.DUPLICATE:
                deferred.extend(later)
            else:
                retry.append((failed.index, failed.command))
                retry.extend(later)
        # Outside the atomic step (a global key): only tells "another agent's" from "none".
        # Written with the batch's replies (one round trip), before any reply is sent.
        self._owners.update(owners)
        return retry, deferred

    def _settle(
        self,
        run: _Run,
        result: CommitReply,
        done: dict[int, Applied],
        owners: list[tuple[str, str]],
    ) -> tuple[CommitOutcome, _Planned, list[tuple[int, c.Command]]] | None:
        """Record what one lr_commit applied; returns why it stopped early, the command that
        failed its check and the ones behind it (None: all applied)."""
        count = result.applied
        for planned in run.planned[:count]:
            cmd = planned.command
            done[planned.index] = Applied(cmd, planned.reply, planned.wire, planned.delivered)
            inline_owner = planned.delivered and self.inline_replies
            if (
                isinstance(cmd, c.CreateWorkItem)
                and planned.reply.error is None
                and not inline_owner
            ):
                owners.append((cmd.work_item_id, cmd.agent_id))
        if count == len(run.planned):
            after = run.planned[-1].after
            if after is None:
                self.cache.forget(run.agent_id)
            else:
                self.cache.remember(run.agent_id, after)
            return None
        self.cache.forget(run.agent_id)
        failed, *rest = run.planned[count:]
        if result.stored_reply is not None:  # a duplicate: answered as the first time
            done[failed.index] = Applied(failed.command, _as_duplicate(result.stored_reply))
        return result.outcome, failed, [(p.index, p.command) for p in rest]

    async def _publish_replies(self, applied: list[Applied], ack: Sequence[Entry]) -> None:
        targets = [a for a in applied if a.command.reply_to and not a.delivered]
        if not targets and not self._owners and not ack:
            return
        pipe = self.redis.pipeline(transaction=False)
        owners: dict[Any, Any] = self._owners
        self._owners = {}
        if owners:
            pipe.hset(self.names.work_item_owners, mapping=owners)
        now = self.clock()
        for item in targets:
            stream = item.command.reply_to
            assert stream is not None
            body = item.wire or reply_bytes(item.reply, now)
            pipe.xadd(stream, {"m": body}, maxlen=REPLY_STREAM_MAXLEN, approximate=True)
            pipe.expire(stream, REPLY_STREAM_TTL_SECONDS)
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in ack:
            by_stream.setdefault(stream, []).append(entry_id)
        for stream, ids in by_stream.items():
            pipe.xack(stream, Group.LEDGER, *ids)
        await pipe.execute()


def _is_read(cmd: c.Command) -> bool:
    return isinstance(cmd, (c.GetWorkItem, c.ListWorkItems))


def _split_wave(
    pending: list[tuple[int, c.Command]],
) -> tuple[list[list[tuple[int, c.Command]]], list[tuple[int, c.Command]]]:
    """Each agent's first pending command, followed by the writes that come next for that agent
    (a run, up to MAX_RUN and without a repeated command id); a read runs alone. What is left
    waits for the next wave, in order."""
    runs: dict[str, list[tuple[int, c.Command]]] = {}
    closed: set[str] = set()
    ids: dict[str, set[str]] = {}
    later: list[tuple[int, c.Command]] = []
    for entry in pending:
        cmd = entry[1]
        agent = cmd.agent_id
        run = runs.get(agent)
        if run is None:
            runs[agent] = [entry]
            ids[agent] = {cmd.command_id}
            if _is_read(cmd):
                closed.add(agent)
            continue
        seen = ids[agent]
        if agent in closed or _is_read(cmd) or cmd.command_id in seen or len(run) >= MAX_RUN:
            closed.add(agent)
            later.append(entry)
            continue
        run.append(entry)
        seen.add(cmd.command_id)
    return list(runs.values()), later


def _as_duplicate(stored: bytes) -> CommandReply:
    """The first reply again. A first rejection stays a rejection, so a retried call that failed
    still reads as failed; an applied command reads as `duplicate`."""
    first = decode(stored).body
    assert isinstance(first, CommandReply)
    if first.outcome is CommandOutcome.REJECTED:
        return first
    return first.model_copy(update={"outcome": CommandOutcome.DUPLICATE})
