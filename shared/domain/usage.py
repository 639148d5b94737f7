"""Model usage and the daily token budget: token counts summed per call, turn and agent, and the
pure arithmetic of a UTC day's budget (time is an argument).

Counting rule, the same for every provider: `input_tokens` is every prompt token the model read
(cached ones included), `cached_input_tokens` the part of it served from the provider's prompt
cache, `output_tokens` what it wrote. A budget spends input + output tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any

from pydantic import Field

from shared.domain.acceptance import awaited
from shared.domain.base import Record, UtcDatetime
from shared.domain.control import AgentPause, AgentRetirement
from shared.domain.missing_secrets import MissingSecret
from shared.domain.model_failures import ModelOutage
from shared.domain.records import Posture, WakeBudget, WorkItem

Count = Annotated[int, Field(ge=0)]


class Usage(Record):
    input_tokens: Count = 0
    cached_input_tokens: Count = 0
    output_tokens: Count = 0

    @property
    def budget_tokens(self) -> int:
        """What a daily token budget spends: input plus output."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ModelUsage(Usage):
    """Counts for one model (`provider/name`), with the calls that produced them."""

    model_calls: Count = 0

    def merged(self, other: ModelUsage) -> ModelUsage:
        total = self + other
        return ModelUsage(
            model_calls=self.model_calls + other.model_calls,
            input_tokens=total.input_tokens,
            cached_input_tokens=total.cached_input_tokens,
            output_tokens=total.output_tokens,
        )


def _one_call(usage: Usage) -> ModelUsage:
    return ModelUsage(model_calls=1, **usage.model_dump())


def _merge_by_model(
    into: dict[str, ModelUsage], more: dict[str, ModelUsage]
) -> dict[str, ModelUsage]:
    merged = dict(into)
    for model, usage in more.items():
        merged[model] = merged[model].merged(usage) if model in merged else usage
    return merged


class TurnUsage(ModelUsage):
    """A turn's usage: every successful model call summed, and split by model."""

    by_model: dict[str, ModelUsage] = Field(default_factory=dict)

    def plus_call(self, model: str, usage: Usage) -> TurnUsage:
        """This usage with one more successful call of `model` (`provider/name`)."""
        return self.plus(
            TurnUsage(by_model={model: _one_call(usage)}, **_one_call(usage).model_dump())
        )

    def plus(self, other: TurnUsage) -> TurnUsage:
        total = self.merged(other)
        return TurnUsage(
            by_model=_merge_by_model(self.by_model, other.by_model), **total.model_dump()
        )


def utc_day(now: datetime) -> str:
    """The UTC day `now` falls in, as `YYYY-MM-DD` (a budget's accounting period)."""
    return now.date().isoformat()


def resets_at(now: datetime) -> datetime:
    """The next UTC midnight: when today's budget starts again."""
    midnight = datetime.combine(now.date(), time(0), tzinfo=now.tzinfo)
    return midnight + timedelta(days=1)


class DayTokens(Record):
    """Budget tokens (input + output) an agent spent on one UTC day."""

    day: str
    tokens: Count = 0

    def used_on(self, now: datetime) -> int:
        """Spent on `now`'s day: nothing once the day has turned."""
        return self.tokens if self.day == utc_day(now) else 0

    def plus(self, usage: Usage, now: datetime) -> DayTokens:
        return DayTokens(day=utc_day(now), tokens=self.used_on(now) + usage.budget_tokens)


class BudgetExhausted(Record):
    """Why a turn may not start today: `used` of `limit` tokens spent until `resets_at`."""

    used: Count
    limit: Annotated[int, Field(ge=1)]
    resets_at: UtcDatetime


def budget_exhausted(
    spent: DayTokens | None, limit: int | None, now: datetime
) -> BudgetExhausted | None:
    """The exhaustion in force at `now`, or None (no budget, or some of it left)."""
    if limit is None:
        return None
    used = spent.used_on(now) if spent is not None else 0
    if used < limit:
        return None
    return BudgetExhausted(used=used, limit=limit, resets_at=resets_at(now))


def budget_left(spent: DayTokens | None, limit: int | None, now: datetime) -> int | None:
    """Tokens left today (never negative), or None without a budget."""
    if limit is None:
        return None
    used = spent.used_on(now) if spent is not None else 0
    return max(limit - used, 0)


class UsageRecord(Record):
    """One finished turn's usage, as the ledger files it into the agent's day."""

    turn_id: str
    at: UtcDatetime
    usage: TurnUsage


class UsageSummary(TurnUsage):
    """What the usage route answers: sums over a range, in total and by model."""

    turns: Count = 0

    def plus_summary(self, other: UsageSummary) -> UsageSummary:
        total = self.plus(other)
        return UsageSummary(turns=self.turns + other.turns, **total.model_dump())


class UsageDay(UsageSummary):
    """An agent's usage summed over one UTC day: every turn with model calls that finished that
    day, whatever the agent's age (one row per day, never a list of turns). `last_seq`: the
    history seq of the day's last such turn's commit, so the day's `turn_finished` events lie
    after the previous day's `last_seq` and at or before this one."""

    day: str
    last_seq: Count = 0

    def summary(self) -> UsageSummary:
        return UsageSummary.model_validate(self.model_dump(exclude={"day", "last_seq"}))


_COUNTERS = ("model_calls", "input_tokens", "cached_input_tokens", "output_tokens")
_SEP = "|"


def day_increments(record: UsageRecord) -> list[tuple[str, int]]:
    """The counters a turn adds to its day's row, as `(field, amount)` of the agent's usage
    hash: `DAY|turns`, `DAY|<counter>` and `DAY|<provider/name>|<counter>` (zeros left out)."""
    day, usage = utc_day(record.at), record.usage
    adds = [(f"{day}{_SEP}turns", 1)]
    adds += [(f"{day}{_SEP}{name}", getattr(usage, name)) for name in _COUNTERS]
    for model, counts in sorted(usage.by_model.items()):
        adds += [(f"{day}{_SEP}{model}{_SEP}{name}", getattr(counts, name)) for name in _COUNTERS]
    return [(field, amount) for field, amount in adds if amount]


def last_seq_field(record: UsageRecord) -> str:
    return f"{utc_day(record.at)}{_SEP}last_seq"


def usage_days(fields: dict[str, int]) -> list[UsageDay]:
    """The rows of an agent's usage hash (`day_increments` and `last_seq_field`), by day."""
    rows: dict[str, dict[str, Any]] = {}
    for field, value in fields.items():
        parts = field.split(_SEP)
        if len(parts) < 2:
            continue
        day, name, model = parts[0], parts[-1], _SEP.join(parts[1:-1])
        row = rows.setdefault(day, {"day": day, "by_model": {}})
        if model:
            row["by_model"].setdefault(model, {})[name] = value
        else:
            row[name] = value
    return [UsageDay.model_validate(rows[day]) for day in sorted(rows)]


def sum_summaries(summaries: Sequence[UsageSummary]) -> UsageSummary:
    total = UsageSummary()
    for summary in summaries:
        total = total.plus_summary(summary)
    return total


def turn_summary(event: dict[str, Any]) -> tuple[datetime, UsageSummary] | None:
    """A history event's contribution to usage: a `turn_finished` with model calls, as one turn
    at the event's instant; None for any other event."""
    if event.get("type") != "turn_finished":
        return None
    raw = (event.get("data") or {}).get("usage")
    if not raw:
        return None
    usage = TurnUsage.model_validate(raw)
    if usage.model_calls <= 0:
        return None
    at = datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00"))
    return at, UsageSummary(turns=1, **usage.model_dump())


def is_midnight(at: datetime) -> bool:
    """Whether `at` (with an offset) is a UTC midnight: where a day's row starts."""
    return at.astimezone(UTC).time() == time(0)


class PartialDay(Record):
    """A day a range bound cuts: sum its `turn_finished` events with seq in
    (`after_seq`, `upto_seq`] whose instant is in [`since`, `until`)."""

    day: str
    after_seq: Count
    upto_seq: Count
    since: UtcDatetime
    until: UtcDatetime


def usage_plan(
    days: Sequence[UsageDay], since: datetime, until: datetime | None
) -> tuple[list[UsageDay], list[PartialDay]]:
    """How to sum usage over [since, until) exactly: the rows of the whole days inside it, and
    the days a bound cuts (a bound that is not a UTC midnight), to be summed from their turns'
    events in the history. `until` None: no end."""
    whole: list[UsageDay] = []
    partial: list[PartialDay] = []
    previous = 0
    for row in days:
        start = datetime.combine(date.fromisoformat(row.day), time(0), tzinfo=UTC)
        end = start + timedelta(days=1)
        after, previous = previous, row.last_seq
        if end <= since or (until is not None and start >= until):
            continue
        if since <= start and (until is None or end <= until):
            whole.append(row)
            continue
        partial.append(
            PartialDay(
                day=row.day,
                after_seq=after,
                upto_seq=row.last_seq,
                since=max(since, start),
                until=min(until, end) if until is not None else end,
            )
        )
    return whole, partial


def in_range(at: datetime, since: datetime, until: datetime | None) -> bool:
    return at >= since and (until is None or at < until)


def why_not_running(
    *,
    missing: MissingSecret | None = None,
    outage: ModelOutage | None,
    spent: DayTokens | None,
    limit: int | None,
    wake_budget: WakeBudget,
    posture: Posture,
    now: datetime,
    runnable: int = 0,
    verifying: Sequence[WorkItem] = (),
    paused: AgentPause | None = None,
    retired: AgentRetirement | None = None,
) -> dict[str, Any] | None:
    """Why the agent starts no turn now, as `{kind, ...details}`, or None: the operator retired
    or paused it, an executor lacked a variable its spec names or its model is out (each until
    `retry_at`), its daily token budget is spent, its wake budget parks it, or nothing is
    runnable while some of its items wait for their acceptance checks (`verifying`). None while
    a turn runs, whatever holds it next (a pause or retirement asked during the turn shows once
    the turn has ended, with the posture it leaves): no reason is shown beside a posture that
    contradicts it."""
    if posture is Posture.RUNNING:
        return None
    if retired is not None:
        return {
            "kind": "retired",
            **retired.model_dump(mode="json", include={"reason"}),
            "since": retired.model_dump(mode="json")["at"],
        }
    if paused is not None:
        return {"kind": "paused", **paused.model_dump(mode="json", include={"reason", "since"})}
    return _model_hold(missing, outage, spent, limit, now) or _idle_reason(
        wake_budget, posture, runnable, verifying
    )


def _model_hold(
    missing: MissingSecret | None,
    outage: ModelOutage | None,
    spent: DayTokens | None,
    limit: int | None,
    now: datetime,
) -> dict[str, Any] | None:
    if missing is not None and missing.retry_at > now:
        details = missing.model_dump(mode="json", include={"name", "retry_at"})
        return {"kind": "missing_secret", **details}
    if outage is not None and outage.retry_at > now:
        details = outage.model_dump(mode="json", include={"provider", "status", "retry_at"})
        return {"kind": "model_unavailable", **details}
    exhausted = budget_exhausted(spent, limit, now)
    if exhausted is not None:
        return {"kind": "token_budget_exhausted", **exhausted.model_dump(mode="json")}
    return None


def _idle_reason(
    wake_budget: WakeBudget, posture: Posture, runnable: int, verifying: Sequence[WorkItem]
) -> dict[str, Any] | None:
    if posture is Posture.IDLE and wake_budget.exhausted:
        return {
            "kind": "wake_budget_exhausted",
            "used": wake_budget.used,
            "limit": wake_budget.limit,
        }
    return verifying_reason(verifying, runnable)


def verifying_reason(items: Sequence[WorkItem], runnable: int) -> dict[str, Any] | None:
    """`{kind: verifying, work_items: [{work_item_id, attempt, awaiting}]}` when no item is
    runnable and some are verifying: then the agent's next turn waits for those checks. With a
    runnable item the agent has work, so verifying items are not why it is idle."""
    waiting = [
        {
            "work_item_id": item.id,
            "attempt": item.verification.attempt,
            "awaiting": awaited(item.acceptance, item.verification),
        }
        for item in sorted(items, key=lambda i: i.id)
        if item.is_verifying and item.verification is not None
    ]
    if runnable > 0 or not waiting:
        return None
    return {"kind": "verifying", "work_items": waiting}
