"""Run telemetry, pure: what ran on each WorkItem and what broke, folded from the agent's history
(events in seq order, archived and hot alike).

A WorkItem's run is every event that names it, and the turns that name it: a turn belongs to the
WorkItem its `turn_finished` names (the one it worked on last), else its `turn_started`'s. Per run:

- `turns`: turns started; `crashes`: turns that ended `failed` or `interrupted` (an exception, or
  an executor that died and lost its lease); `rounds`: model rounds of its turns;
- `tool_calls`: calls its turns answered, the external ones (MCP, RunCommand) counted from their
  `tool_call_started`, the others from each turn's `turn_finished` tally; `tool_errors`: those
  that answered an error (external: outcome `error` or `timeout`). An external call whose outcome
  is `unknown` (its turn died between the two records) is a failed step, not an error count;
- `checks_failed`: acceptance checks that failed; `tokens`: its turns' model tokens;
- `wall_ms`: the time its turns ran (turn_started to turn_finished), summed;
- `first_at`, `last_at`: its first and last event; `state`: open, done or cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from shared.domain.base import Record, UtcDatetime
from shared.domain.call_outcomes import UNKNOWN, CallOutcomes

RunState = Literal["open", "done", "cancelled"]
StepKind = Literal["tool_error", "check_failed", "turn_crashed", "unknown_outcome"]
CRASHED = frozenset({"failed", "interrupted"})
CALL_FAILED = frozenset({"error", "timeout"})
DETAIL_CHARS = 300
"""A failed step's detail is cut to this many characters."""


class RunTokens(Record):
    input: int = Field(default=0, ge=0)
    output: int = Field(default=0, ge=0)
    cached_input: int = Field(default=0, ge=0)


class FailedStep(Record):
    seq: int = Field(ge=1, description="The history event that records the failure.")
    kind: StepKind
    detail: str


class RunSummary(Record):
    """One WorkItem's run: what ran on it."""

    work_item_id: str
    state: RunState
    turns: int = 0
    rounds: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    checks_failed: int = 0
    crashes: int = 0
    tokens: RunTokens = Field(default_factory=RunTokens)
    wall_ms: int = 0
    first_at: UtcDatetime
    last_at: UtcDatetime


class RunTelemetry(RunSummary):
    """One WorkItem's run and what broke in it, in seq order."""

    failed_steps: list[FailedStep] = Field(default_factory=list)


def _cut(text: str) -> str:
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def _at(event: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00"))


@dataclass
class _Run:
    work_item_id: str
    first_at: datetime
    last_at: datetime
    state: RunState = "open"
    turns: int = 0
    rounds: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    checks_failed: int = 0
    crashes: int = 0
    input: int = 0
    output: int = 0
    cached_input: int = 0
    wall_ms: int = 0
    steps: list[FailedStep] = field(default_factory=list)

    def summary(self) -> RunTelemetry:
        return RunTelemetry(
            work_item_id=self.work_item_id,
            state=self.state,
            turns=self.turns,
            rounds=self.rounds,
            tool_calls=self.tool_calls,
            tool_errors=self.tool_errors,
            checks_failed=self.checks_failed,
            crashes=self.crashes,
            tokens=RunTokens(input=self.input, output=self.output, cached_input=self.cached_input),
            wall_ms=self.wall_ms,
            first_at=self.first_at,
            last_at=self.last_at,
            failed_steps=sorted(self.steps, key=lambda s: s.seq),
        )


@dataclass
class _Turn:
    work_item_id: str | None
    started_at: datetime
    calls: list[str] = field(default_factory=list)
    """External calls it started."""


@dataclass
class RunFold:
    """Feed it the whole history in seq order (`see`, any number of times), then read `runs`
    once, at the end."""

    _runs: dict[str, _Run] = field(default_factory=dict)
    _turns: dict[str, _Turn] = field(default_factory=dict)
    """Turns started and not finished yet."""
    _calls: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    """External calls: call id -> (seq started, turn id, `server/tool`)."""
    _call_owner: dict[str, str] = field(default_factory=dict)
    """External calls of finished turns: call id -> the WorkItem the turn counts for."""
    _failed: dict[str, tuple[int, str]] = field(default_factory=dict)
    """External calls that finished `error` or `timeout`: call id -> (seq, outcome)."""
    _outcomes: CallOutcomes = field(default_factory=CallOutcomes)

    def _run(self, work_item_id: str, at: datetime) -> _Run:
        run = self._runs.get(work_item_id)
        if run is None:
            run = self._runs[work_item_id] = _Run(work_item_id, at, at)
        run.first_at, run.last_at = min(run.first_at, at), max(run.last_at, at)
        return run

    def see(self, events: Sequence[Mapping[str, Any]]) -> None:
        for event in events:
            self._see(event)
        self._outcomes.see(events)  # type: ignore[arg-type]

    def _see(self, event: Mapping[str, Any]) -> None:
        kind, data = event.get("type"), event.get("data") or {}
        seq, at, item = int(event.get("seq") or 0), _at(event), event.get("work_item_id")
        run = self._run(item, at) if isinstance(item, str) else None
        if kind == "turn_started":
            self._turns[data["turn_id"]] = _Turn(item if isinstance(item, str) else None, at)
        elif kind == "turn_finished":
            self._turn_finished(seq, at, run, data)
        elif kind == "tool_call_started":
            name = f"{data.get('server')}/{data.get('tool')}"
            self._calls[data["call_id"]] = (seq, data["turn_id"], name)
            turn = self._turns.get(data["turn_id"])
            if turn is not None:
                turn.calls.append(data["call_id"])
        elif kind == "tool_call_finished" and data.get("outcome") in CALL_FAILED:
            self._failed.setdefault(data["call_id"], (seq, str(data["outcome"])))
        elif kind == "check_verdict_recorded" and run is not None and not data.get("passed"):
            run.checks_failed += 1
            detail = f"check {data.get('check_index')} ({data.get('kind')}), attempt "
            detail += f"{data.get('attempt')}: {data.get('reason') or 'failed'}"
            run.steps.append(FailedStep(seq=seq, kind="check_failed", detail=_cut(detail)))
        elif kind in ("work_item_completed", "acceptance_passed") and run is not None:
            outcome = (data.get("work_item") or {}).get("outcome")
            run.state = "cancelled" if outcome == "cancelled" else "done"
        elif kind == "work_item_cancelled" and run is not None:
            run.state = "cancelled"

    def _turn_finished(
        self, seq: int, at: datetime, run: _Run | None, data: Mapping[str, Any]
    ) -> None:
        turn = self._turns.pop(data.get("turn_id", ""), None)
        if run is None and turn is not None and turn.work_item_id is not None:
            run = self._run(turn.work_item_id, at)
        if run is None:
            return
        run.turns += 1
        if turn is not None:
            run.wall_ms += max(0, round((at - turn.started_at).total_seconds() * 1000))
            self._call_owner.update(dict.fromkeys(turn.calls, run.work_item_id))
        usage = data.get("usage") or {}
        run.input += int(usage.get("input_tokens") or 0)
        run.output += int(usage.get("output_tokens") or 0)
        run.cached_input += int(usage.get("cached_input_tokens") or 0)
        run.rounds += int(data.get("rounds") or 0)
        errors = [str(line) for line in data.get("tool_errors") or ()]
        run.tool_calls += int(data.get("tool_calls") or 0)
        run.tool_errors += len(errors)
        for line in errors:
            run.steps.append(FailedStep(seq=seq, kind="tool_error", detail=_cut(line)))
        if data.get("outcome") in CRASHED:
            run.crashes += 1
            detail = f"turn {data.get('turn_id')} {data.get('outcome')}"
            if data.get("error"):
                detail += f": {data['error']}"
            run.steps.append(FailedStep(seq=seq, kind="turn_crashed", detail=_cut(detail)))

    def runs(self, running_turn_id: str | None = None) -> list[RunTelemetry]:
        """Every WorkItem's run, newest first (by its last event). `running_turn_id`: the turn
        the agent is in now, whose calls without an outcome are still running."""
        outcomes = self._outcomes.settle(running_turn_id)
        for call_id, (started, turn_id, name) in self._calls.items():
            owner = self._call_owner.get(call_id)
            if owner is None and turn_id in self._turns:
                owner = self._turns[turn_id].work_item_id
            run = self._runs.get(owner) if owner is not None else None
            if run is None:
                continue
            run.tool_calls += 1
            failed = self._failed.get(call_id)
            if failed is not None:
                run.tool_errors += 1
                step = FailedStep(seq=failed[0], kind="tool_error", detail=f"{name}: {failed[1]}")
                run.steps.append(step)
            elif outcomes.get(call_id) == UNKNOWN:
                detail = f"{name}: outcome unknown (its turn ended before it was recorded)"
                run.steps.append(FailedStep(seq=started, kind="unknown_outcome", detail=detail))
        ordered = sorted(self._runs.values(), key=lambda r: (r.last_at, r.work_item_id))
        return [run.summary() for run in reversed(ordered)]


def telemetry(
    events: Sequence[Mapping[str, Any]], running_turn_id: str | None = None
) -> list[RunTelemetry]:
    """Every WorkItem's run in `events` (a whole history), newest first."""
    fold = RunFold()
    fold.see(events)
    return fold.runs(running_turn_id)
