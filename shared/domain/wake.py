"""Tick kinds and which of them spend the wake budget (docs/contract.md §4), shared by ledger and
scheduler."""

from __future__ import annotations

from enum import StrEnum


class TickKind(StrEnum):
    """Tick kinds in priority order."""

    INPUT = "input"
    CONTINUE_CURRENT = "continue_current"
    REVIEW_TRIGGERED = "review_triggered"
    PICK_QUEUED = "pick_queued"
    RECHECK_DUE = "recheck_due"


AUTONOMOUS_TICKS = frozenset(
    {TickKind.CONTINUE_CURRENT, TickKind.PICK_QUEUED, TickKind.RECHECK_DUE}
)
"""Re-entries that spend the wake budget. A recheck is one too: the agent's own deadline, not
news from outside, so a blocked item cannot keep an agent turning. Input and reviewed triggers
(operator messages, callbacks, task results, timers firing) are fresh input."""
