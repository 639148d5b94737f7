"""The scheduler's pure decision: which tick, if any, an agent's current ledger state calls for."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from shared.domain.missing_secrets import MissingSecret
from shared.domain.model_failures import ModelOutage
from shared.domain.records import (
    AgentLoop,
    AgentState,
    Posture,
    WaitingIntent,
    WakeBudget,
    WorkItem,
)
from shared.domain.usage import BudgetExhausted, DayTokens, budget_exhausted, utc_day
from shared.domain.views import CandidateClass, Ranked, Readiness, prompt_candidates, rank
from shared.domain.wake import AUTONOMOUS_TICKS, TickKind

AUTONOMOUS_KINDS: frozenset[TickKind] = AUTONOMOUS_TICKS
"""Re-entries the agent makes on its own: each spends one unit of the wake budget (contract §4)."""


@dataclass(frozen=True, slots=True)
class AgentSnapshot:
    """Everything one decision reads: the agent's ledger records plus the scheduler's own facts."""

    agent: AgentState
    work_items: tuple[WorkItem, ...] = ()
    waits: tuple[WaitingIntent, ...] = ()
    turn_running: bool = False
    """A turn holds the agent's lease (builtin loop) right now."""
    outstanding_tick_id: str | None = None
    """The tick published and not yet taken by a turn; one per agent."""
    history_seq: int = 0
    """`seq` of the agent's latest history event this snapshot reflects; moves on every write,
    which keeps tick ids fresh for external loops, whose `turn_index` never moves."""
    exhaustion_reported: bool = False
    """A `wake_budget_exhausted` has already been reported for the current budget."""
    class_totals: Mapping[CandidateClass, int] | None = None
    """How many items each class holds when `work_items` is only the head of each class (read
    from the class indexes); None means `work_items` is every item of the agent."""
    inbox: int | None = None
    """Inbox length read beside the agent's record; None means `agent.inbox_pending`."""
    model_outage: ModelOutage | None = None
    """The agent's model was unreachable through a turn's retries: no turn before `retry_at`."""
    daily_token_budget: int | None = None
    day_tokens: DayTokens | None = None
    budget_reported_day: str | None = None
    """The UTC day `token_budget_exhausted` was last recorded."""
    nudge_pending: bool = False
    """A delegation result (a nudge, not fresh input) is what waits for a turn: the turn spends
    the wake budget, and none starts while the budget is spent."""
    missing_secret: MissingSecret | None = None
    """An executor lacked a variable the spec names: no turn before `retry_at`."""

    @property
    def agent_id(self) -> str:
        return self.agent.agent_id

    @property
    def inbox_pending(self) -> int:
        return self.agent.inbox_pending if self.inbox is None else self.inbox

    @property
    def tick_outstanding(self) -> bool:
        return self.outstanding_tick_id is not None


@dataclass(frozen=True, slots=True)
class RankedCandidate:
    """One prompt candidate a tick offers: the item, its class, its place in the full ranking."""

    work_item_id: str
    candidate_class: CandidateClass
    rank: int


@dataclass(frozen=True, slots=True)
class PlannedTick:
    """The tick a decision calls for. The domain only decides it: the scheduler publishes it
    as the wire `Tick`, with the same fields."""

    tick_id: str
    agent_id: str
    kind: TickKind
    work_item_id: str | None
    candidates: tuple[RankedCandidate, ...]
    recheck_work_item_ids: tuple[str, ...]
    issued_at: datetime


class Hold(StrEnum):
    """Why a decision publishes no tick; the last five share their values with `ParkReason`."""

    STOPPED = "stopped"
    PAUSED = "paused"
    TURN_RUNNING = "turn_running"
    TICK_OUTSTANDING = "tick_outstanding"
    WAKE_BUDGET_EXHAUSTED = "wake_budget_exhausted"
    NOTHING_RUNNABLE = "nothing_runnable"
    MODEL_UNAVAILABLE = "model_unavailable"
    TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"  # noqa: S105 (a reason, not a secret)
    MISSING_SECRET = "missing_secret"  # noqa: S105 (a reason, not a secret)


@dataclass(frozen=True, slots=True)
class Decision:
    """The tick to publish, or none and why; `posture` is the agent's resulting posture."""

    agent_id: str
    posture: Posture
    loop: AgentLoop = AgentLoop.BUILTIN
    tick: PlannedTick | None = None
    hold: Hold | None = None
    recheck_work_item_ids: tuple[str, ...] = ()
    """Items whose due recheck this tick delivers; send `ConsumeRecheck` for them after the tick."""
    report_budget_exhausted: bool = False
    """Emit `wake_budget_exhausted` (event and metric) now; true once per exhaustion."""
    wake_at: datetime | None = None
    """A model-side hold ends at this instant: decide again then."""
    token_budget: BudgetExhausted | None = None
    report_token_budget: bool = False
    """Record `token_budget_exhausted` now: the first hold of this UTC day."""

    @property
    def kind(self) -> TickKind | None:
        return self.tick.kind if self.tick is not None else None


@dataclass(frozen=True, slots=True)
class _Choice:
    kind: TickKind
    work_item_id: str | None = None
    cause: tuple[str, ...] = ()
    rechecks: tuple[str, ...] = ()


# ---------------------------------------------------------------- wake budget


def is_autonomous(kind: TickKind) -> bool:
    return kind in AUTONOMOUS_KINDS


def budget_allows(kind: TickKind, budget: WakeBudget) -> bool:
    """Fresh input always wakes; an autonomous re-entry needs budget left."""
    return not (is_autonomous(kind) and budget.exhausted)


def budget_after_tick(kind: TickKind, budget: WakeBudget) -> WakeBudget:
    """An autonomous re-entry spends one unit; fresh input resets the count."""
    used = budget.used + 1 if is_autonomous(kind) else 0
    return WakeBudget(used=used, limit=budget.limit)


def budget_after(decision: Decision, budget: WakeBudget) -> WakeBudget:
    if decision.tick is None:
        return budget
    return budget_after_tick(decision.tick.kind, budget)


# ---------------------------------------------------------------- derived facts


def is_recheck_due(item: WorkItem, now: datetime) -> bool:
    """Blocked, past `recheck_at`, and that deadline not yet delivered."""
    if not item.is_open or item.blocked_by is None or item.recheck_at is None:
        return False
    if item.recheck_at > now:
        return False
    consumed = item.recheck_consumed_at
    return consumed is None or consumed < item.recheck_at


def unreviewed_waits(waits: Iterable[WaitingIntent]) -> tuple[WaitingIntent, ...]:
    """Active waits with triggers no turn has shown yet, most recently triggered first."""
    fresh = [w for w in waits if w.is_active and w.has_unreviewed_triggers]
    fresh.sort(key=lambda w: (w.last_triggered_at or w.created_at, w.id), reverse=True)
    return tuple(fresh)


def runnable_left(ranked: Iterable[Ranked]) -> bool:
    return any(e.readiness is Readiness.RUNNABLE for e in ranked)


def _first_of(ranked: Iterable[Ranked], cls: CandidateClass) -> Ranked | None:
    return next((e for e in ranked if e.candidate_class is cls), None)


_CLASSES_IN_RANK_ORDER: tuple[CandidateClass, ...] = tuple(CandidateClass)
"""Declared in ranking order; a tuple, since iterating an Enum class is slow on a hot path."""


def _positions(
    ranked: Sequence[Ranked], class_totals: Mapping[CandidateClass, int] | None
) -> dict[str, int]:
    """Each item's 1-based place in the agent's full ranking."""
    if class_totals is None:
        return {e.item.id: i for i, e in enumerate(ranked, start=1)}
    # Only each class's head is loaded: a class starts after every item of the classes ranked
    # before it, and the head keeps its order inside the class.
    offsets: dict[CandidateClass, int] = {}
    before = 0
    for cls in _CLASSES_IN_RANK_ORDER:
        offsets[cls] = before
        before += class_totals.get(cls, 0)
    seen: dict[CandidateClass, int] = {}
    positions: dict[str, int] = {}
    for e in ranked:
        seen[e.candidate_class] = seen.get(e.candidate_class, 0) + 1
        positions[e.item.id] = offsets[e.candidate_class] + seen[e.candidate_class]
    return positions


def tick_candidates(
    ranked: Sequence[Ranked], class_totals: Mapping[CandidateClass, int] | None = None
) -> tuple[RankedCandidate, ...]:
    """The prompt candidates (cut to the prompt limits), ranked by position in the full ranking."""
    position = _positions(ranked, class_totals)
    # prompt_candidates keeps the ranking's order: classes appear in rank order, and so do
    # the items inside each class.
    return tuple(
        RankedCandidate(work_item_id=e.item.id, candidate_class=cls, rank=position[e.item.id])
        for cls, bucket in prompt_candidates(ranked).items()
        for e in bucket
    )


def tick_id_for(
    agent_id: str,
    kind: TickKind,
    *,
    turn_index: int,
    history_seq: int,
    cause: Sequence[str] = (),
) -> str:
    """Idempotency key of a tick: the same agent state and cause always give the same key."""
    digest = hashlib.sha256("\n".join(cause).encode()).hexdigest()[:16]
    return f"{agent_id}:{kind.value}:t{turn_index}:s{history_seq}:{digest}"


# ---------------------------------------------------------------- decision


def _held(snapshot: AgentSnapshot) -> Decision | None:
    agent = snapshot.agent
    if agent.posture is Posture.STOPPED:
        hold, posture = Hold.STOPPED, Posture.STOPPED
    elif agent.posture is Posture.PAUSED:
        hold, posture = Hold.PAUSED, Posture.PAUSED
    elif snapshot.turn_running:
        hold, posture = Hold.TURN_RUNNING, Posture.RUNNING
    elif snapshot.tick_outstanding:
        hold, posture = Hold.TICK_OUTSTANDING, Posture.RUNNING
    else:
        return None
    return Decision(agent_id=agent.agent_id, posture=posture, loop=agent.loop, hold=hold)


def _paused(snapshot: AgentSnapshot, now: datetime) -> Decision | None:
    """No turn while an executor lacked a variable the spec names or the agent's model is out
    (each until its `retry_at`), or its daily token budget is spent (until midnight UTC, or a
    raised limit); messages and triggers still land."""
    agent = snapshot.agent
    retries: tuple[tuple[Hold, MissingSecret | ModelOutage | None], ...] = (
        (Hold.MISSING_SECRET, snapshot.missing_secret),
        (Hold.MODEL_UNAVAILABLE, snapshot.model_outage),
    )
    for hold, held in retries:
        if held is not None and held.retry_at > now:
            return Decision(
                agent_id=agent.agent_id,
                posture=Posture.IDLE,
                loop=agent.loop,
                hold=hold,
                wake_at=held.retry_at,
            )
    spent = budget_exhausted(snapshot.day_tokens, snapshot.daily_token_budget, now)
    if spent is None:
        return None
    return Decision(
        agent_id=agent.agent_id,
        posture=Posture.IDLE,
        loop=agent.loop,
        hold=Hold.TOKEN_BUDGET_EXHAUSTED,
        wake_at=spent.resets_at,
        token_budget=spent,
        report_token_budget=snapshot.budget_reported_day != utc_day(now),
    )


def _item_cause(entry: Ranked) -> tuple[str, ...]:
    return (f"{entry.item.id}@{entry.item.revision}",)


def _review_choice(waits: Iterable[WaitingIntent]) -> _Choice | None:
    """Shows the most recently triggered wait's item; the turn reviews every unreviewed one."""
    triggered = unreviewed_waits(waits)
    if not triggered:
        return None
    cause = tuple(sorted(f"{w.id}={w.trigger_count}" for w in triggered))
    return _Choice(TickKind.REVIEW_TRIGGERED, triggered[0].work_item_id, cause)


def _recheck_choice(ranked: Sequence[Ranked], now: datetime) -> _Choice | None:
    """One tick for every due recheck of the agent (coalesced); names the item only if alone."""
    due = [e.item for e in ranked if is_recheck_due(e.item, now)]
    if not due:
        return None
    ids = tuple(item.id for item in due)
    cause = tuple(f"{item.id}@{item.recheck_at}" for item in due)
    return _Choice(TickKind.RECHECK_DUE, ids[0] if len(ids) == 1 else None, cause, ids)


def _choose(snapshot: AgentSnapshot, ranked: Sequence[Ranked], now: datetime) -> _Choice | None:
    """First match wins, in the priority order of docs/contract.md §4."""
    agent = snapshot.agent
    budget = agent.wake_budget
    current = _first_of(ranked, CandidateClass.CURRENT_RUNNABLE)
    if snapshot.inbox_pending > 0:
        inbox = (f"inbox={snapshot.inbox_pending}",)
        return _Choice(TickKind.INPUT, agent.current_work_item_id, inbox)
    if current is not None and budget_allows(TickKind.CONTINUE_CURRENT, budget):
        return _Choice(TickKind.CONTINUE_CURRENT, current.item.id, _item_cause(current))
    # Reached with a runnable current item only when the budget is spent: a trigger is fresh
    # input, so it may wake a parked agent, but it never displaces current runnable work.
    review = _review_choice(snapshot.waits)
    if review is not None:
        return review
    queued = _first_of(ranked, CandidateClass.QUEUED_RUNNABLE)
    if current is None and queued is not None and budget_allows(TickKind.PICK_QUEUED, budget):
        return _Choice(TickKind.PICK_QUEUED, None, _item_cause(queued))
    if not budget_allows(TickKind.RECHECK_DUE, budget):
        return None
    return _recheck_choice(ranked, now)


def _publish(
    snapshot: AgentSnapshot, ranked: Sequence[Ranked], choice: _Choice, now: datetime
) -> Decision:
    agent = snapshot.agent
    tick_id = tick_id_for(
        agent.agent_id,
        choice.kind,
        turn_index=agent.turn_index,
        history_seq=snapshot.history_seq,
        cause=choice.cause,
    )
    tick = PlannedTick(
        tick_id=tick_id,
        agent_id=agent.agent_id,
        kind=choice.kind,
        work_item_id=choice.work_item_id,
        candidates=tick_candidates(ranked, snapshot.class_totals),
        recheck_work_item_ids=choice.rechecks,
        issued_at=now,
    )
    return Decision(
        agent_id=agent.agent_id,
        posture=Posture.RUNNING,
        loop=agent.loop,
        tick=tick,
        recheck_work_item_ids=choice.rechecks,
    )


def _park(snapshot: AgentSnapshot, ranked: Sequence[Ranked]) -> Decision:
    """No tick: `idle` when the budget alone keeps runnable work parked, else `dormant`."""
    agent = snapshot.agent
    held = runnable_left(ranked) or snapshot.nudge_pending
    if held and agent.wake_budget.exhausted:
        return Decision(
            agent_id=agent.agent_id,
            posture=Posture.IDLE,
            loop=agent.loop,
            hold=Hold.WAKE_BUDGET_EXHAUSTED,
            report_budget_exhausted=not snapshot.exhaustion_reported,
        )
    return Decision(
        agent_id=agent.agent_id,
        posture=Posture.DORMANT,
        loop=agent.loop,
        hold=Hold.NOTHING_RUNNABLE,
    )


def decide(snapshot: AgentSnapshot, now: datetime) -> Decision:
    """The tick this agent's state calls for at `now`, or none with the resulting posture.

    Recomputed from the whole snapshot on every event (state decides, events only wake), so a
    duplicate or reordered event yields the same decision and the same `tick_id`. Decisions taken
    here:
    - a running turn or an outstanding tick holds the agent (no new tick, posture `running`):
      the turn reads the inbox and candidates when it starts, and the scheduler decides again on
      `turn_finished`, so nothing that arrives meanwhile is lost;
    - a current item that is not runnable (inspection focus) counts as no current work, so
      queued runnable items still get `pick_queued` (the agent may release or ignore it);
    - a `stopped` agent is never woken, nor one whose model is out or whose daily token budget
      is spent, until the hold's `wake_at`;
    - a spent budget silences the autonomous ticks (`continue_current`, `pick_queued`,
      `recheck_due`): fresh ones (`input`, `review_triggered`) still go out in priority order;
      the fresh input behind them has reset the budget in the ledger.
    """
    held = _held(snapshot) or _paused(snapshot, now)
    if held is not None:
        return held
    ranked = rank(snapshot.work_items, snapshot.waits, snapshot.agent.current_work_item_id)
    # A delegation result (a nudge) may not wake a spent budget, and nothing else can: fresh
    # input would have reset the budget and cleared the nudge. The agent sees it with its next
    # fresh input.
    nudge_held = snapshot.nudge_pending and snapshot.agent.wake_budget.exhausted
    choice = None if nudge_held else _choose(snapshot, ranked, now)
    if choice is None:
        return _park(snapshot, ranked)
    return _publish(snapshot, ranked, choice, now)
