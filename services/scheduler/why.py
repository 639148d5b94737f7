"""Why a WorkItem is not running: the pure explanation lives in `shared.domain.why`, so the HTTP
side can answer it without importing the scheduler; this name keeps the scheduler's view of it."""

from __future__ import annotations

from shared.domain.why import Reason, ReasonKind, why_not_running

__all__ = ["Reason", "ReasonKind", "why_not_running"]
