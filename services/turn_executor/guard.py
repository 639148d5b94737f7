"""The context guard: every model request of a turn must fit the model's context window minus
the tokens its answer may take. What gives way, in order: the candidate WorkItems in the summary,
then the process trace (oldest rounds first), then the bodies of external evidence (cut, with a
note). Operator messages are never cut; a request that still does not fit fails the turn as a
permanent model error naming the sizes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.turn_executor.memory import Recall
from services.turn_executor.providers import ModelFailure
from services.turn_executor.tokens import TokenCounter

DEFAULT_OUTPUT_RESERVE = 4096
"""Tokens kept for the answer when the spec sets no `max_output_tokens`."""
EVIDENCE_CUT = "\n[… {cut} characters of this evidence cut to fit the model's context window]"
EVIDENCE_OPEN = "\n<<<external-evidence\n"
EVIDENCE_CLOSE = "external-evidence>>>"
MIN_EVIDENCE_CHARS = 200


@dataclass(slots=True)
class PromptParts:
    """Where the parts that may give way sit in a turn's messages (positions never move: a
    turn only appends), and how to render each one smaller."""

    summary: int | None = None
    summary_without_candidates: str = ""
    notes: int | None = None
    trace: int | None = None
    recall: Recall = field(default_factory=Recall)
    evidence: dict[int, str] = field(default_factory=dict)
    """Position of each external evidence message and its content as first shown."""
    trace_kept: int | None = None
    """Rounds of the trace still shown after an earlier cut (None: all)."""
    rounds_start: int = 0
    """Where the turn's own rounds begin (after its opening messages)."""
    first_round: int = 1
    """The round whose messages come first there (earlier ones left, compacted)."""

    def inserted(self, at: int) -> None:
        """A message was inserted at `at`: the positions from there on move one down."""

        def moved(position: int | None) -> int | None:
            return position + 1 if position is not None and position >= at else position

        self.notes, self.trace = moved(self.notes), moved(self.trace)
        self.evidence = {(i + 1 if i >= at else i): text for i, text in self.evidence.items()}
        self.rounds_start += 1 if self.rounds_start >= at else 0


def window_of(context_window: int, max_output_tokens: int | None) -> int:
    """The tokens a request may use."""
    return context_window - (max_output_tokens or DEFAULT_OUTPUT_RESERVE)


def _cut_evidence(content: str, keep: int) -> str:
    """The evidence message with its body cut to `keep` characters, the fences kept."""
    head, sep, rest = content.partition(EVIDENCE_OPEN)
    if not sep:
        return content
    body = rest.removesuffix("\n" + EVIDENCE_CLOSE)
    if len(body) <= keep:
        return content
    cut = body[:keep] + EVIDENCE_CUT.format(cut=len(body) - keep)
    return f"{head}{sep}{cut}\n{EVIDENCE_CLOSE}"


class ContextGuard:
    def __init__(self, counter: TokenCounter, limit: int) -> None:
        self.counter = counter
        self.limit = limit

    def fit(
        self,
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        parts: PromptParts,
    ) -> int:
        """Shrink `messages` in place until the request fits; returns its tokens (or their upper
        bound, when that alone shows the request fits: nothing is tokenized then). Raises a
        permanent ModelFailure when nothing left to shrink makes it fit."""
        bound = self.counter.bound(messages, tools)
        if bound <= self.limit:
            return bound
        size = self._size(messages, tools)
        steps: list[Callable[[list[dict[str, Any]], PromptParts], bool]] = [
            _drop_candidates,
            _drop_trace_round,
            _halve_evidence,
        ]
        for step in steps:
            while size > self.limit and step(messages, parts):
                size = self._size(messages, tools)
        if size > self.limit:
            raise ModelFailure(self._too_large(messages, tools, size), transient=False)
        return size

    def _size(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> int:
        return self.counter.request(messages, tools)

    def _too_large(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        size: int,
    ) -> str:
        operator = [
            m for m in messages if str(m.get("content") or "").startswith("Operator message")
        ]
        fixed = self.counter.request(messages[:1], tools)
        return (
            f"the request needs {size} tokens but the model's context window leaves {self.limit} "
            f"for it: system prompt and tools {fixed}, operator messages "
            f"{self.counter.request(operator) if operator else 0} (never cut), the rest "
            f"{size - fixed}"
        )


def _drop_candidates(messages: list[dict[str, Any]], parts: PromptParts) -> bool:
    if parts.summary is None or not parts.summary_without_candidates:
        return False
    if messages[parts.summary]["content"] == parts.summary_without_candidates:
        return False
    messages[parts.summary]["content"] = parts.summary_without_candidates
    return True


def _drop_trace_round(messages: list[dict[str, Any]], parts: PromptParts) -> bool:
    if parts.trace is None:
        return False
    rounds = parts.recall.rounds
    kept = len(rounds) if parts.trace_kept is None else parts.trace_kept
    if kept == 0:
        return False
    kept = max(0, kept - max(1, kept // 4))
    parts.trace_kept = kept
    text = parts.recall.trace_text(rounds[len(rounds) - kept :]) or ""
    messages[parts.trace]["content"] = text
    return True


def evidence_positions(messages: Sequence[Mapping[str, Any]], start: int) -> dict[int, str]:
    """External evidence (callback bodies in the inbox, reviewed waits' evidence) among the
    messages from `start` on: the only user messages from outside whose bodies may be cut."""
    return {
        index: str(message["content"])
        for index, message in enumerate(messages)
        if index >= start
        and message["role"] == "user"
        and EVIDENCE_OPEN in str(message["content"])
        and str(message["content"]).startswith("External evidence")
    }


def _halve_evidence(messages: list[dict[str, Any]], parts: PromptParts) -> bool:
    changed = False
    for index, original in parts.evidence.items():
        body = original.partition(EVIDENCE_OPEN)[2]
        shown = len(str(messages[index]["content"]))
        keep = min(len(body), shown) // 2
        if keep < MIN_EVIDENCE_CHARS:
            continue
        cut = _cut_evidence(original, keep)
        if cut != messages[index]["content"]:
            messages[index]["content"] = cut
            changed = True
    return changed
