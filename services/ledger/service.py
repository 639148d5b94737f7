"""The ledger's use case: apply a batch of commands exactly once and answer each.

Per batch: load every command's slice in one pipeline, decide each (pure rules), commit each
through `lr_commit`, publish replies. Commands for one agent run in successive waves, so each
decides against the state its predecessor left; a version conflict (another ledger replica won
the race) sends the command to the next wave to be decided again from fresh state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson
import structlog

from services.ledger.cache import SliceCache
from services.ledger.readside import answer_read
from services.ledger.rules import Context, Decision, SideWrites, decide
from services.ledger.store import (
    EVENTS_MAXLEN,
    REPLY_TTL_SECONDS,
    CommitOutcome,
    CommitPlan,
    LedgerStore,
    Loaded,
    PlanBuilder,
    history_events,
)
from shared.domain.errors import DomainError
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.wire import commands as c
from shared.wire.codec import Envelope, decode, encode, encode_built
from shared.wire.events import LedgerEvents
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome, CommandReply

log = structlog.get_logger("longrun.ledger")

MAX_RACES = 200
"""Lost version races tolerated per batch (another replica writing the same agents)."""
REPLY_STREAM_MAXLEN = 10_000
REPLY_STREAM_TTL_SECONDS = 3600


class LedgerBusy(Exception):
    """A command kept losing version races; leave it pending for the reclaimer (transient)."""


@dataclass(frozen=True, slots=True)
class _Planned:
    index: int
    command: c.Command
    reply: CommandReply
    plan: CommitPlan | None
    after: Loaded | None


@dataclass(frozen=True, slots=True)
class Applied:
    command: c.Command
    reply: CommandReply


def _reply_bytes(reply: CommandReply, ctx: Context) -> bytes:
    return encode(Envelope(id=reply.command_id, at=ctx.now, body=reply))


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
    ) -> None:
        self.redis = redis
        self.names = names
        self.store = LedgerStore(redis, names)
        self.metrics = metrics
        self.clock = clock
        self.new_id = new_id
        self.wake_limit = wake_limit
        self.cache = SliceCache()

    def context(self) -> Context:
        return Context(now=self.clock(), new_id=self.new_id, wake_limit=self.wake_limit)

    async def apply_batch(self, commands: Sequence[c.Command]) -> list[Applied]:
        """Apply every command once; returns replies in input order."""
        started = time.perf_counter()
        done: dict[int, Applied] = {}
        pending = list(enumerate(commands))
        races = 0
        while pending:
            wave, pending = _split_wave(pending)
            retry = await self._run_wave(wave, done)
            races += len(retry)
            if races > MAX_RACES:
                raise LedgerBusy(f"{len(retry)} commands lost {MAX_RACES} version races")
            pending = retry + pending
        applied = [done[i] for i in range(len(commands))]
        await self._publish_replies(applied)
        elapsed = (time.perf_counter() - started) / max(len(commands), 1)
        for item in applied:
            self.metrics.ledger_command_seconds.observe(elapsed)
            self.metrics.ledger_commands.labels(item.command.message_type, item.reply.outcome).inc()
        return applied

    async def _run_wave(
        self, wave: list[tuple[int, c.Command]], done: dict[int, Applied]
    ) -> list[tuple[int, c.Command]]:
        ctx = self.context()
        reads = [(i, cmd) for i, cmd in wave if _is_read(cmd)]
        writes = [(i, cmd) for i, cmd in wave if not _is_read(cmd)]
        answers = await asyncio.gather(
            *(answer_read(self.redis, self.names, cmd) for _, cmd in reads)
        )
        for (i, cmd), reply in zip(reads, answers, strict=True):
            done[i] = Applied(cmd, reply)
        slices = await self._slices([cmd for _, cmd in writes])
        plans = [
            _Planned(i, cmd, *self._plan(cmd, slice_, ctx))
            for (i, cmd), slice_ in zip(writes, slices, strict=True)
        ]
        return await self._commit(plans, done)

    async def _slices(self, cmds: list[c.Command]) -> list[Loaded]:
        """Cached slices where they cover the command, one lr_load pipeline for the rest."""
        found = [self.cache.lookup(cmd) for cmd in cmds]
        missing = [cmd for cmd, hit in zip(cmds, found, strict=True) if hit is None]
        loaded = iter(await self.store.load_many(missing) if missing else [])
        return [hit if hit is not None else next(loaded) for hit in found]

    def _plan(
        self, cmd: c.Command, loaded: Loaded, ctx: Context
    ) -> tuple[CommandReply, CommitPlan | None, Loaded | None]:
        """The reply, the commit to make (None: answer from the stored reply), and the agent's
        slice once that commit applies (None: unknown, forget the cached one)."""
        if loaded.stored_reply is not None:
            return _as_duplicate(loaded.stored_reply), None, None
        try:
            decision = decide(loaded.state, cmd, ctx)
        except DomainError as err:
            reply = CommandReply(
                command_id=cmd.command_id, outcome=CommandOutcome.REJECTED, error=err.body()
            )
            plan = CommitPlan(keys=self.store._base_keys(cmd.agent_id, cmd.command_id))
            return reply, _finish(plan, "*", "", _reply_bytes(reply, ctx)), loaded
        reply = CommandReply(
            command_id=cmd.command_id,
            outcome=CommandOutcome.APPLIED,
            result=decision.result,
            warnings=decision.warnings,
        )
        plan, after = self._write_plan(cmd, loaded, decision, _reply_bytes(reply, ctx), ctx)
        return reply, plan, after

    def _write_plan(
        self, cmd: c.Command, loaded: Loaded, decision: Decision, reply: bytes, ctx: Context
    ) -> tuple[CommitPlan, Loaded]:
        plan = CommitPlan(keys=self.store._base_keys(cmd.agent_id, cmd.command_id))
        agent = decision.state.agent
        token = getattr(cmd, "fencing_token", None)
        fence = str(token) if token else ""
        if agent is None or not (decision.events or decision.side != SideWrites()):
            version = str(loaded.version) if agent else "*"
            return _finish(plan, version, fence, reply), loaded
        builder = PlanBuilder(self.names, loaded, decision)
        sealed, agent = history_events(agent, decision, ctx.now)
        builder.records(plan)
        builder.index_moves(plan)
        builder.side_writes(plan)
        builder.agent_write(plan, agent, loaded.version + 1)
        n = self.names
        for doc in sealed:
            plan.op("rpush", n.history(cmd.agent_id), orjson.dumps(doc))
        if loaded.state.agent is None:
            plan.op("zadd", n.agents_index(n.partition(cmd.agent_id)), 0, cmd.agent_id)
        body = {"agent_id": cmd.agent_id, "command_id": cmd.command_id, "events": sealed}
        envelope = encode_built(LedgerEvents, id=self.new_id("evt_"), at=ctx.now, body=body)
        plan.op("xadd", n.events(n.partition(cmd.agent_id)), EVENTS_MAXLEN, envelope, cmd.agent_id)
        after = Loaded(
            stored_reply=None,
            state=decision.state.with_agent(agent),
            version=loaded.version + 1,
        )
        return _finish(plan, str(loaded.version), fence, reply), after

    async def _commit(
        self, plans: list[_Planned], done: dict[int, Applied]
    ) -> list[tuple[int, c.Command]]:
        pipe = self.redis.pipeline(transaction=False)
        calls = []
        for planned in plans:
            if planned.plan is None:
                done[planned.index] = Applied(planned.command, planned.reply)
                self.cache.forget(planned.command.agent_id)
                continue
            calls.append(planned)
            plan = planned.plan
            pipe.fcall("lr_commit", len(plan.keys), *plan.keys, *plan.ops)
        results = await pipe.execute() if calls else []
        retry, owners = [], []
        for planned, result in zip(calls, results, strict=True):
            cmd = planned.command
            outcome = CommitOutcome(result[0].decode())
            if outcome is CommitOutcome.APPLIED:
                done[planned.index] = Applied(cmd, planned.reply)
                assert planned.after is not None
                self.cache.remember(cmd.agent_id, planned.after)
                if isinstance(cmd, c.CreateWorkItem) and planned.reply.error is None:
                    owners.append((cmd.work_item_id, cmd.agent_id))
                continue
            self.cache.forget(cmd.agent_id)
            if outcome is CommitOutcome.DUPLICATE:
                done[planned.index] = Applied(cmd, _as_duplicate(result[1]))
            else:
                retry.append((planned.index, cmd))
        if owners:
            # Outside the atomic step (a global key): only tells "another agent's" from "none".
            await self.redis.hset(self.names.work_item_owners, mapping=dict(owners))
        return retry

    async def _publish_replies(self, applied: list[Applied]) -> None:
        targets = [a for a in applied if a.command.reply_to]
        if not targets:
            return
        pipe = self.redis.pipeline(transaction=False)
        now = self.clock()
        for item in targets:
            stream = item.command.reply_to
            assert stream is not None
            body = encode(Envelope(id=item.reply.command_id, at=now, body=item.reply))
            pipe.xadd(stream, {"m": body}, maxlen=REPLY_STREAM_MAXLEN, approximate=True)
            pipe.expire(stream, REPLY_STREAM_TTL_SECONDS)
        await pipe.execute()


def _is_read(cmd: c.Command) -> bool:
    return isinstance(cmd, (c.GetWorkItem, c.ListWorkItems))


def _split_wave(
    pending: list[tuple[int, c.Command]],
) -> tuple[list[tuple[int, c.Command]], list[tuple[int, c.Command]]]:
    """The first pending command of each agent; the rest wait for the next wave."""
    seen: set[str] = set()
    wave: list[tuple[int, c.Command]] = []
    later: list[tuple[int, c.Command]] = []
    for entry in pending:
        agent = entry[1].agent_id
        (later if agent in seen else wave).append(entry)
        seen.add(agent)
    return wave, later


def _finish(plan: CommitPlan, version: str, fence: str, reply: bytes) -> CommitPlan:
    plan.ops = [version, fence, reply, REPLY_TTL_SECONDS, *plan.ops]
    return plan


def _as_duplicate(stored: bytes) -> CommandReply:
    """The first reply again. A first rejection stays a rejection, so a retried call that failed
    still reads as failed; an applied command reads as `duplicate`."""
    first = decode(stored).body
    assert isinstance(first, CommandReply)
    if first.outcome is CommandOutcome.REJECTED:
        return first
    return first.model_copy(update={"outcome": CommandOutcome.DUPLICATE})
