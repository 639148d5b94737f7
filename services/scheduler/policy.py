"""The scheduler's pure rules: the tick decision (`shared.domain.scheduling`) and what follows it.

What follows: which facts a batch of ledger events carries, how timers are named, when to park
an agent, nudge it, tidy its due rechecks, or call it orphaned. No I/O and no clock here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import orjson

from shared.domain.records import WorkItem
from shared.domain.scheduling import (
    AUTONOMOUS_KINDS,
    AgentSnapshot,
    Decision,
    Hold,
    PlannedTick,
    budget_after,
    budget_after_tick,
    budget_allows,
    decide,
    is_autonomous,
    is_recheck_due,
    runnable_left,
    tick_candidates,
    tick_id_for,
    unreviewed_waits,
)
from shared.wire.codec import CodecError
from shared.wire.commands import ExpireDeadline, ParkReason
from shared.wire.events import LedgerEvents
from shared.wire.ticks import Candidate, Tick

__all__ = [
    "AUTONOMOUS_KINDS",
    "AgentSnapshot",
    "Decision",
    "EventFacts",
    "Hold",
    "TimerKind",
    "TimerRef",
    "budget_after",
    "budget_after_tick",
    "budget_allows",
    "decide",
    "due_ms",
    "event_facts",
    "expire_command",
    "from_ms",
    "is_autonomous",
    "is_orphaned",
    "is_recheck_due",
    "merge_facts",
    "park_reason",
    "recheck_upkeep",
    "runnable_left",
    "tick_candidates",
    "tick_id_for",
    "to_tick",
    "unreviewed_waits",
    "wants_nudge",
]

TRIGGER_EVENTS = frozenset({"wait_triggered", "callback_delivered_to_inbox"})
"""Events a callback, task result, timer or operator answer causes: their `at` starts the
callback-to-tick clock."""


# ---------------------------------------------------------------- ticks


def to_tick(plan: PlannedTick) -> Tick:
    """The wire message for a decided tick (the domain decides; the scheduler publishes)."""
    candidates = tuple(
        Candidate(work_item_id=c.work_item_id, candidate_class=c.candidate_class, rank=c.rank)
        for c in plan.candidates
    )
    return Tick(
        tick_id=plan.tick_id,
        agent_id=plan.agent_id,
        kind=plan.kind,
        work_item_id=plan.work_item_id,
        candidates=candidates,
        recheck_work_item_ids=plan.recheck_work_item_ids,
        issued_at=plan.issued_at,
    )


# ---------------------------------------------------------------- timers


class TimerKind(StrEnum):
    WAIT = "wait"
    """A WaitFor(timer) deadline: fires as a `FireTimer` command."""
    RECHECK = "recheck"
    """A blocked item's `recheck_at`: fires as a re-decision that may deliver the recheck."""
    NUDGE = "nudge"
    """The scheduler's own short re-decision, after a turn ended while its lease was held."""
    DEADLINE = "deadline"
    """A wait's or a delegation's deadline: fires as an `ExpireDeadline` command."""


@dataclass(frozen=True, slots=True)
class TimerRef:
    """One member of a partition's timer set; equal refs are one member, so a rescheduled
    deadline replaces the old one instead of adding a second timer."""

    agent_id: str
    wait_id: str | None = None
    work_item_id: str | None = None
    cause: str | None = None
    """For a nudge that ends a hold (`missing_secret`, `model_unavailable`,
    `token_budget_exhausted`): kept apart
    from the short nudge after a turn, which would otherwise replace it."""
    deadline: str | None = None
    """For a deadline: `<target>:<target id>:<due ms>` (the due instant makes a re-armed
    deadline a timer, and a command, of its own)."""

    @property
    def kind(self) -> TimerKind:
        if self.deadline is not None:
            return TimerKind.DEADLINE
        if self.wait_id is not None:
            return TimerKind.WAIT
        return TimerKind.RECHECK if self.work_item_id is not None else TimerKind.NUDGE

    def member(self) -> bytes:
        doc = {
            "agent_id": self.agent_id,
            "wait_id": self.wait_id,
            "work_item_id": self.work_item_id,
            "cause": self.cause,
            "deadline": self.deadline,
        }
        return orjson.dumps({k: v for k, v in doc.items() if v is not None}, option=_SORTED)

    @classmethod
    def parse(cls, raw: bytes | str) -> TimerRef:
        try:
            doc = orjson.loads(raw)
            ref = cls(
                doc["agent_id"],
                doc.get("wait_id"),
                doc.get("work_item_id"),
                doc.get("cause"),
                doc.get("deadline"),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise CodecError(f"not a timer member: {exc!r}") from None
        fields = (ref.wait_id, ref.work_item_id, ref.cause, ref.deadline)
        if not all(isinstance(v, str | None) for v in fields):
            raise CodecError("timer member ids must be strings")
        if not isinstance(ref.agent_id, str) or not ref.agent_id:
            raise CodecError("timer member needs a non-empty agent_id")
        if ref.deadline is not None:
            expire_command(ref)  # a deadline that makes no command is refused here, as poison
        return ref


_SORTED = orjson.OPT_SORT_KEYS


def due_ms(moment: datetime) -> int:
    """Rounded up, so a timer never fires before its deadline at millisecond resolution."""
    return math.ceil(moment.timestamp() * 1000)


def from_ms(ms: int | float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


# ---------------------------------------------------------------- events


@dataclass(slots=True)
class EventFacts:
    """What one batch of ledger events says about one agent, beyond "decide again"."""

    agent_id: str
    started_ticks: list[str] = field(default_factory=list)
    """Ticks a turn has taken: their markers are released, the lease now holds the agent."""
    turn_finished: bool = False
    trigger_at: datetime | None = None
    """The earliest trigger among the events, for callback-to-tick latency."""
    timers: list[tuple[TimerRef, int, int]] = field(default_factory=list)
    """(timer, due ms, `seq` of the scheduling event: arms the timer once per event)."""
    budget_exhausted: int = 0

    def absorb(self, other: EventFacts) -> None:
        self.started_ticks += other.started_ticks
        self.turn_finished = self.turn_finished or other.turn_finished
        if other.trigger_at is not None:
            self.trigger_at = min(filter(None, (self.trigger_at, other.trigger_at)))
        self.timers += other.timers
        self.budget_exhausted += other.budget_exhausted


def _note(facts: EventFacts, event: Mapping[str, Any]) -> None:
    kind, data = event["type"], event["data"]
    if kind == "turn_started" and data.get("tick_id"):
        facts.started_ticks.append(str(data["tick_id"]))
    elif kind == "turn_finished":
        facts.turn_finished = True
    elif kind in TRIGGER_EVENTS:
        at = datetime.fromisoformat(event["at"])
        facts.trigger_at = at if facts.trigger_at is None else min(facts.trigger_at, at)
    elif kind == "timer_scheduled":
        ref = TimerRef(facts.agent_id, data.get("wait_id"), event.get("work_item_id"))
        due = due_ms(datetime.fromisoformat(data["due_at"]))
        facts.timers.append((ref, due, int(event["seq"])))
    elif kind == "deadline_scheduled":
        due = due_ms(datetime.fromisoformat(data["due_at"]))
        target = f"{data['target']}:{data['target_id']}:{due}"
        facts.timers.append((TimerRef(facts.agent_id, deadline=target), due, int(event["seq"])))
    elif kind == "wake_budget_exhausted":
        facts.budget_exhausted += 1


def event_facts(envelope: Mapping[str, Any]) -> EventFacts:
    """Read a `LedgerEvents` envelope (already JSON-parsed) without building every model: the
    scheduler needs the agent and a few event kinds, and decides from state, not from events."""
    if envelope.get("type") != LedgerEvents.message_type:
        raise CodecError(f"{envelope.get('type')!r} is not {LedgerEvents.message_type!r}")
    if envelope.get("version") != LedgerEvents.version:
        raise CodecError(f"unknown version {envelope.get('version')!r} of ledger_events")
    try:
        body = envelope["body"]
        agent_id = body["agent_id"]
        if not isinstance(agent_id, str) or not agent_id:
            raise CodecError("ledger_events needs a non-empty agent_id")
        facts = EventFacts(agent_id=agent_id)
        for event in body["events"]:
            _note(facts, event)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodecError(f"invalid ledger_events: {exc!r}") from None
    return facts


def merge_facts(facts: Iterable[EventFacts]) -> dict[str, EventFacts]:
    """One entry per agent (a batch decides each agent once), in first-seen order."""
    merged: dict[str, EventFacts] = {}
    for one in facts:
        if one.agent_id in merged:
            merged[one.agent_id].absorb(one)
        else:
            merged[one.agent_id] = EventFacts(agent_id=one.agent_id)
            merged[one.agent_id].absorb(one)
    return merged


# ---------------------------------------------------------------- what follows a decision


def park_reason(decision: Decision, snapshot: AgentSnapshot) -> ParkReason | None:
    """Send `ParkAgent` only when it changes something: the posture, or an unreported
    exhaustion. Parking the same posture again would emit nothing and cost a command."""
    reason = _PARK_REASONS.get(decision.hold) if decision.hold is not None else None
    if reason is None:
        return None
    report = decision.report_budget_exhausted or decision.report_token_budget
    if decision.posture is snapshot.agent.posture and not report:
        return None
    return reason


_PARK_REASONS = {
    Hold.WAKE_BUDGET_EXHAUSTED: ParkReason.WAKE_BUDGET_EXHAUSTED,
    Hold.NOTHING_RUNNABLE: ParkReason.NOTHING_RUNNABLE,
    Hold.MODEL_UNAVAILABLE: ParkReason.MODEL_UNAVAILABLE,
    Hold.TOKEN_BUDGET_EXHAUSTED: ParkReason.TOKEN_BUDGET_EXHAUSTED,
    Hold.MISSING_SECRET: ParkReason.MISSING_SECRET,
}


def wants_nudge(decision: Decision, *, turn_finished: bool, turn_recorded: bool) -> bool:
    """Look again shortly when the agent is held only by what a finished turn has not yet
    given back: the executor releases its lease and tick marker right after `FinishTurn`, and
    no event follows. So: a turn just finished and something still holds the agent, or a lease
    is held while the ledger records no turn (a finished turn's, or one about to begin; a dead
    executor's lease expires, which bounds the repeats)."""
    if decision.hold is Hold.TURN_RUNNING and not turn_recorded:
        return True
    return turn_finished and decision.hold in (Hold.TURN_RUNNING, Hold.TICK_OUTSTANDING)


@dataclass(frozen=True, slots=True)
class RecheckUpkeep:
    drop: tuple[str, ...] = ()
    """Ids to remove from the due set: delivered, unblocked, completed or gone."""
    retime: tuple[tuple[str, datetime], ...] = ()
    """Ids whose deadline is still ahead (moved, or a clock behind the poller's): timer again."""


def recheck_upkeep(
    due_ids: Sequence[str], items: Mapping[str, WorkItem], now: datetime
) -> RecheckUpkeep:
    drop: list[str] = []
    retime: list[tuple[str, datetime]] = []
    for work_item_id in due_ids:
        item = items.get(work_item_id)
        if item is not None and is_recheck_due(item, now):
            continue
        drop.append(work_item_id)
        blocked = item is not None and item.is_open and item.blocked_by is not None
        deadline = item.recheck_at if item is not None and blocked else None
        if deadline is not None and deadline > now:
            retime.append((work_item_id, deadline))
    return RecheckUpkeep(drop=tuple(drop), retime=tuple(retime))


def is_orphaned(
    decision: Decision,
    *,
    last_event_at: datetime | None,
    now: datetime,
    grace: timedelta,
    timer_pending: bool,
) -> bool:
    """Work a tick should be out for, yet none is, nothing holds the agent, no timer will look
    again, and the ledger has been quiet for `grace` (so no event for it is still in flight)."""
    if decision.tick is None or timer_pending:
        return False
    return last_event_at is None or now - last_event_at >= grace


# ---------------------------------------------------------------- command ids


def park_command_id(snapshot: AgentSnapshot, reason: ParkReason) -> str:
    """One per agent state: decisions repeated on the same state send one command."""
    return f"park:{snapshot.agent_id}:s{snapshot.history_seq}:{reason.value}"


def recheck_command_id(tick_id: str) -> str:
    return f"recheck:{tick_id}"


def fire_command_id(wait_id: str) -> str:
    return f"fire:{wait_id}"


def expire_command(ref: TimerRef) -> ExpireDeadline:
    """The command a fired deadline sends; its id is the deadline's own (`deadline:<target>:<id>:
    <due ms>`), so a timer delivered twice expires once."""
    assert ref.deadline is not None
    target, _, rest = ref.deadline.partition(":")
    target_id, _, due = rest.rpartition(":")
    try:
        return ExpireDeadline.model_validate(
            {
                "command_id": f"deadline:{ref.deadline}",
                "agent_id": ref.agent_id,
                "target": target,
                "target_id": target_id,
                "due_at": from_ms(int(due)),
            }
        )
    except (ValueError, OverflowError) as exc:  # pydantic's ValidationError is a ValueError
        raise CodecError(f"not a deadline timer: {ref.deadline!r}") from exc


def repair_command_id(tick_id: str) -> str:
    return f"repair:{tick_id}"
