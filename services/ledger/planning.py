"""The ledger's planning: which commands of a batch run together, and what each one writes.

Pure decisions over loaded state, no Redis: a wave takes each agent's next run of commands
(`split_wave`); a run's commands are decided one after the other against the state the previous
one left, and their writes, replies and acknowledgements become one lr_commit call
(`Planner.plan_run`). The service loop (services.ledger.service) loads, commits and answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import orjson

from services.ledger.cache import covers
from services.ledger.outbox import DEFAULT_RETRY_MS, Outgoing, outbox_writes
from services.ledger.rules import Context, Decision, SideWrites, decide
from services.ledger.store import (
    EVENTS_MAXLEN,
    REPLY_TTL_SECONDS,
    Loaded,
    PlanBuilder,
    fencing_token,
    history_events,
)
from shared.domain.errors import DomainError
from shared.store.protocol import CommitPlan
from shared.wire import commands as c
from shared.wire.codec import decode, encode_built
from shared.wire.events import LedgerEvents
from shared.wire.names import Group, Names
from shared.wire.replies import CommandOutcome, CommandReply

MAX_RUN = 64
"""Most commands of one agent committed by one lr_commit call (bounds the call's size)."""
Entry = tuple[str, str]
"""A command's stream entry: (stream, entry id), XACKed for the ledger group once applied."""
Indexed = tuple[int, c.Command]
"""A command and its place in the batch."""
REPLY_STREAM_MAXLEN = 10_000
REPLY_STREAM_TTL_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class Planned:
    index: int
    command: c.Command
    reply: CommandReply
    wire: bytes | None
    """The reply's envelope as stored (None: answered from the stored reply)."""
    after: Loaded | None
    """The agent's slice once this command applies (None: answered from the stored reply)."""
    delivered: bool = False
    """Its reply (if any) and its entry's XACK ride in its lr_commit call."""
    outgoing: tuple[Outgoing, ...] = ()
    """Commands its commit put in the outbox, to send once the commit is applied."""


@dataclass(slots=True)
class Run:
    """One agent's consecutive write commands, decided one after the other against the state
    the previous one left, and committed by one lr_commit call (None: nothing to write)."""

    agent_id: str
    planned: list[Planned]
    plan: CommitPlan | None
    deferred: list[Indexed]
    """Commands of the run left for the next wave (not covered by the slice in memory)."""


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


class Planner:
    """Decides runs into lr_commit calls for one ledger process."""

    def __init__(self, names: Names, *, new_id: Callable[[str], str], inline_replies: bool) -> None:
        self.names = names
        self.new_id = new_id
        self.inline_replies = inline_replies
        self._event_base = ""
        self._event_count = 0
        self._outgoing: tuple[Outgoing, ...] = ()
        """The outbox entries of the command being planned."""
        self.outbox_retry_ms = DEFAULT_RETRY_MS

    def new_wave(self) -> None:
        """Events of the next wave get ids of a fresh base."""
        self._event_base, self._event_count = self.new_id("evt_"), 0

    def plan_run(
        self,
        run: list[Indexed],
        loaded: Loaded,
        ctx: Context,
        entries: dict[int, Entry] | None,
    ) -> Run:
        """Decide the run's commands in order while the slice in memory covers them."""
        agent_id = run[0][1].agent_id
        plan = CommitPlan.for_agent(self.names, agent_id, reply_ttl=REPLY_TTL_SECONDS)
        planned: list[Planned] = []
        state: Loaded | None = loaded
        for pos, (i, cmd) in enumerate(run):
            if state is None or (pos > 0 and not covers(state, cmd)):
                return Run(agent_id, planned, plan if plan.commands else None, run[pos:])
            self._outgoing = ()
            reply, wire, state = self._plan(cmd, state, plan, ctx)
            delivered = wire is not None and self._deliver(
                plan, cmd, wire, entries, i, created=reply.error is None
            )
            planned.append(Planned(i, cmd, reply, wire, state, delivered, self._outgoing))
        return Run(agent_id, planned, plan if plan.commands else None, [])

    def _plan(
        self, cmd: c.Command, loaded: Loaded, plan: CommitPlan, ctx: Context
    ) -> tuple[CommandReply, bytes | None, Loaded | None]:
        """The reply and its envelope, with the command's writes added to the plan (none when it
        is answered from the stored reply), and the agent's slice once they apply (None:
        unknown)."""
        if loaded.stored_reply is not None:
            return as_duplicate(loaded.stored_reply), None, None
        idempotency = self.names.idempotency(cmd.agent_id, cmd.command_id)
        try:
            decision = decide(loaded.state, cmd, ctx)
        except DomainError as err:
            reply = CommandReply(
                command_id=cmd.command_id, outcome=CommandOutcome.REJECTED, error=err.body()
            )
            wire = reply_bytes(reply, ctx.now)
            # A rejection is stored for good, so it is checked against the version it was
            # decided on: a slice cached by this replica may predate another replica's commit
            # (a delegation it made), and the command must then be decided again, not refused.
            expected = str(loaded.version) if loaded.state.agent is not None else "*"
            plan.begin(idempotency, expected, "", "", wire)
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
        if decision.side.outbox:
            self._outgoing = tuple(
                outbox_writes(
                    plan,
                    self.names,
                    cmd.agent_id,
                    decision.side.outbox,
                    ctx.now,
                    retry_ms=self.outbox_retry_ms,
                )
            )
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


def split_wave(
    pending: list[Indexed],
) -> tuple[list[list[Indexed]], list[Indexed]]:
    """Each agent's first pending command, followed by the writes that come next for that agent
    (a run, up to MAX_RUN and without a repeated command id). What is left waits for the next
    wave, in order."""
    runs: dict[str, list[Indexed]] = {}
    closed: set[str] = set()
    ids: dict[str, set[str]] = {}
    later: list[Indexed] = []
    for entry in pending:
        cmd = entry[1]
        agent = cmd.agent_id
        run = runs.get(agent)
        if run is None:
            runs[agent] = [entry]
            ids[agent] = {cmd.command_id}
            continue
        seen = ids[agent]
        if agent in closed or cmd.command_id in seen or len(run) >= MAX_RUN:
            closed.add(agent)
            later.append(entry)
            continue
        run.append(entry)
        seen.add(cmd.command_id)
    return list(runs.values()), later


def as_duplicate(stored: bytes) -> CommandReply:
    """The first reply again. A first rejection stays a rejection, so a retried call that failed
    still reads as failed; an applied command reads as `duplicate`."""
    first = decode(stored).body
    assert isinstance(first, CommandReply)
    if first.outcome is CommandOutcome.REJECTED:
        return first
    return first.model_copy(update={"outcome": CommandOutcome.DUPLICATE})
