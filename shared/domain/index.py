"""Which per-agent class index a WorkItem belongs to, and its score there.

The indexes are disjoint sorted sets, one per candidate class (triggered_blocked split by
readiness so readiness filters stay exact). Ascending score order is ranking order within the
class, with the member (the id) breaking ties, so a filtered, limited list reads only the
first entries of a few sets instead of every WorkItem.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.domain.views import CandidateClass, ListFilter, Ranked, Readiness

TRIGGERED_BLOCKED = "triggered_blocked.blocked"
TRIGGERED_WAITING = "triggered_blocked.waiting_for_operator"

INDEX_NAMES: tuple[str, ...] = (
    CandidateClass.CURRENT_RUNNABLE.value,
    TRIGGERED_BLOCKED,
    TRIGGERED_WAITING,
    CandidateClass.QUEUED_RUNNABLE.value,
    CandidateClass.WAITING_FOR_OPERATOR.value,
    CandidateClass.BLOCKED.value,
    CandidateClass.COMPLETED_RECENT.value,
    CandidateClass.COMPLETED.value,
)
"""In ranking order; the two triggered sets share one rank and are merged by score."""


def index_of(entry: Ranked) -> str:
    if entry.candidate_class is CandidateClass.TRIGGERED_BLOCKED:
        if entry.readiness is Readiness.WAITING_FOR_OPERATOR:
            return TRIGGERED_WAITING
        return TRIGGERED_BLOCKED
    return entry.candidate_class.value


def score_of(entry: Ranked) -> float:
    """Microseconds (the ranking's own precision: with milliseconds, two items updated in the
    same millisecond tied in the index and a bounded read could take the wrong one), negated
    where the class ranks newest first. Exact in a double until the year 2255."""
    cls = entry.candidate_class
    if cls is CandidateClass.CURRENT_RUNNABLE:
        return 0.0
    if cls is CandidateClass.TRIGGERED_BLOCKED and entry.last_triggered_at is not None:
        return -_micros(entry.last_triggered_at)
    updated = _micros(entry.item.updated_at)
    return float(updated) if cls is CandidateClass.QUEUED_RUNNABLE else float(-updated)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(moment: datetime) -> float:
    """Exact (integer arithmetic; `timestamp() * 1e6` can be a microsecond off)."""
    return float((moment - _EPOCH) // _MICROSECOND)


_OPEN = INDEX_NAMES[:6]
COMPLETED_INDEXES = INDEX_NAMES[6:]
"""The indexes of completed WorkItems (what leaves with an archived one)."""
FILTER_INDEXES: dict[ListFilter, tuple[str, ...]] = {
    ListFilter.ALL: INDEX_NAMES,
    ListFilter.OPEN: _OPEN,
    ListFilter.COMPLETED: COMPLETED_INDEXES,
    ListFilter.QUEUED: (CandidateClass.QUEUED_RUNNABLE.value,),
    ListFilter.RUNNABLE: (
        CandidateClass.CURRENT_RUNNABLE.value,
        CandidateClass.QUEUED_RUNNABLE.value,
    ),
    ListFilter.BLOCKED: (TRIGGERED_BLOCKED, CandidateClass.BLOCKED.value),
    ListFilter.WAITING_FOR_OPERATOR: (TRIGGERED_WAITING, CandidateClass.WAITING_FOR_OPERATOR.value),
}
"""Which indexes hold a filter's items; `current` is read from the agent directly, and
`blocked` excludes the current item (a blocked current item sits in the `blocked` index)."""

READINESS_INDEXES: dict[Readiness, tuple[str, ...]] = {
    Readiness.RUNNABLE: (
        CandidateClass.CURRENT_RUNNABLE.value,
        CandidateClass.QUEUED_RUNNABLE.value,
    ),
    Readiness.WAITING_FOR_OPERATOR: (TRIGGERED_WAITING, CandidateClass.WAITING_FOR_OPERATOR.value),
    Readiness.BLOCKED: (TRIGGERED_BLOCKED, CandidateClass.BLOCKED.value),
    Readiness.COMPLETED: COMPLETED_INDEXES,
}
