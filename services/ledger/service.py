"""The ledger's service loop: apply a batch of commands exactly once and answer each.

Per wave: load every run's slice in one pipeline (or take it from the cache), plan each run
(services.ledger.planning), commit each run through `lr_commit`, pipelined; then publish the
replies the commits did not carry. Commands for one agent run in successive waves, so each
decides against the state its predecessor left; a version conflict (another ledger replica won
the race) sends the command to the next wave to be decided again from fresh state.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from redis.asyncio.cluster import RedisCluster

from services.ledger.cache import SliceCache
from services.ledger.outbox import Outgoing, queue_sends
from services.ledger.planning import (
    REPLY_STREAM_MAXLEN,
    REPLY_STREAM_TTL_SECONDS,
    Entry,
    Indexed,
    Planned,
    Planner,
    Run,
    as_duplicate,
    reply_bytes,
    split_wave,
)
from services.ledger.rules import Context
from services.ledger.store import LedgerStore, Loaded
from shared.domain.acceptance import DEFAULT_CHECK_DEADLINE_S, DEFAULT_MAX_VERIFY_ATTEMPTS
from shared.domain.delegation import DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DELEGATION_DEPTH
from shared.domain.signing import SigningKey
from shared.domain.webhooks import WebhookAllow
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.store.protocol import CommitOutcome, CommitReply, Fn
from shared.wire import commands as c
from shared.wire.names import Group, Names
from shared.wire.replies import CommandReply

__all__ = ["Applied", "Entry", "LedgerBusy", "LedgerService"]

log = structlog.get_logger("longrun.ledger")

MAX_RACES = 200
"""Lost version races tolerated per batch (another replica writing the same agents)."""


class LedgerBusy(Exception):
    """A command kept losing version races; leave it pending for the reclaimer (transient)."""


@dataclass(frozen=True, slots=True)
class Applied:
    command: c.Command
    reply: CommandReply
    wire: bytes | None = None
    """The reply's envelope when it was just encoded (published as it is)."""
    delivered: bool = False
    """Answered and acknowledged inside the commit: nothing left to publish."""


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
        max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH,
        max_children: int = DEFAULT_MAX_CHILDREN,
        signing_key: SigningKey | None = None,
        webhook_allow: WebhookAllow | None = None,
        check_deadline_s: int = DEFAULT_CHECK_DEADLINE_S,
        max_verify_attempts: int = DEFAULT_MAX_VERIFY_ATTEMPTS,
    ) -> None:
        self.redis = redis
        self.max_verify_attempts = max_verify_attempts
        self.webhook_allow = webhook_allow or WebhookAllow()
        self.check_deadline_s = check_deadline_s
        self.signing_key = signing_key or SigningKey.generate()
        """Signs history heads; one made at start when none is configured (its public key is
        published like any other, so heads it signed stay verifiable)."""
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
        self.max_delegation_depth = max_delegation_depth
        self.max_children = max_children
        self.cache = SliceCache()
        self.planner = Planner(names, new_id=new_id, inline_replies=self.inline_replies)
        self._owners: dict[str, str] = {}
        """WorkItem id -> agent of the items created since the last reply flush."""
        self._outgoing: list[Outgoing] = []
        """Outbox commands of applied commits, sent with the batch's replies (the fast path;
        the relay re-sends whatever this misses)."""

    def context(self) -> Context:
        return Context(
            now=self.clock(),
            new_id=self.new_id,
            wake_limit=self.wake_limit,
            max_delegation_depth=self.max_delegation_depth,
            max_children=self.max_children,
            signing_key=self.signing_key,
            webhook_allow=self.webhook_allow,
            check_deadline_s=self.check_deadline_s,
            max_verify_attempts=self.max_verify_attempts,
        )

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
            wave, pending = split_wave(pending)
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
        wave: list[list[Indexed]],
        done: dict[int, Applied],
        entries: dict[int, Entry] | None,
    ) -> tuple[list[Indexed], list[Indexed]]:
        """Decide and commit the wave's runs; returns (commands that lost a race, commands
        deferred to the next wave)."""
        ctx = self.context()
        self.planner.new_wave()
        slices = await self._slices([run[0][1] for run in wave])
        runs = [
            self.planner.plan_run(run, slice_, ctx, entries)
            for run, slice_ in zip(wave, slices, strict=True)
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

    async def _commit(
        self, runs: list[Run], done: dict[int, Applied]
    ) -> tuple[list[Indexed], list[Indexed]]:
        """One lr_commit per run, pipelined. The commands a run's call did not apply are
        decided again from fresh state: a lost race (version or fence) counts as a race, the
        rest (behind a duplicate) are only deferred."""
        pipe = self.redis.pipeline(transaction=False)
        calls: list[Run] = []
        for run in runs:
            if run.plan is None:
                for planned in run.planned:
                    done[planned.index] = Applied(planned.command, planned.reply)
                self.cache.forget(run.agent_id)
                continue
            calls.append(run)
            pipe.fcall(Fn.COMMIT, len(run.plan.keys), *run.plan.keys, *run.plan.sealed())
        results = await pipe.execute() if calls else []
        retry: list[Indexed] = []
        deferred: list[Indexed] = []
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
        run: Run,
        result: CommitReply,
        done: dict[int, Applied],
        owners: list[tuple[str, str]],
    ) -> tuple[CommitOutcome, Planned, list[Indexed]] | None:
        """Record what one lr_commit applied; returns why it stopped early, the command that
        failed its check and the ones behind it (None: all applied)."""
        count = result.applied
        for planned in run.planned[:count]:
            cmd = planned.command
            done[planned.index] = Applied(cmd, planned.reply, planned.wire, planned.delivered)
            self._outgoing += planned.outgoing
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
            done[failed.index] = Applied(failed.command, as_duplicate(result.stored_reply))
        return result.outcome, failed, [(p.index, p.command) for p in rest]

    async def _publish_replies(self, applied: list[Applied], ack: Sequence[Entry]) -> None:
        targets = [a for a in applied if a.command.reply_to and not a.delivered]
        if not targets and not self._owners and not ack and not self._outgoing:
            return
        pipe = self.redis.pipeline(transaction=False)
        outgoing, self._outgoing = self._outgoing, []
        queue_sends(pipe, outgoing)
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
