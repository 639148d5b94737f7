"""Memory across turns, pure: a WorkItem's recorded rounds as a process trace that fits a token
budget, which of them to compact into a process note, the notes kept within their own budget,
and the deterministic extract that stands in for a model's compaction (docs/architecture.md,
"How a turn's prompt is assembled"). Token counts come in as a function."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.domain.records import NoteCovers, ProcessNote

Count = Callable[[str], int]
"""Tokens in a text, for the agent's model."""

COMPACTION_PROMPT = """\
You compact the working memory of an agent. The user message holds rounds the agent recorded \
while working on one WorkItem, oldest first: its own text, the tools it called with their \
arguments, and what the tools returned. Write the process note the agent will read in later \
turns instead of these rounds. Keep every fact that may matter later (names, numbers, paths, \
ids, results, errors), verbatim where the exact value matters; say what was done, what was \
decided and what is still open. Leave out chatter and repetition. Plain text only, no preamble, \
as short as the facts allow."""
"""The system message of every compaction call: fixed, so a note depends only on the rounds."""

MERGE_PROMPT = """\
You compact the working memory of an agent. The user message holds earlier process notes about \
one WorkItem, oldest first. Merge them into one note the agent will read in later turns. Keep \
every fact that may matter later (names, numbers, paths, ids, results, errors), verbatim where \
the exact value matters, and what is still open; drop what later notes superseded. Plain text \
only, no preamble, as short as the facts allow."""
"""The system message of a call that merges older notes when the notes outgrow their budget."""

EXTRACT_LINE_CHARS = 200
"""The deterministic extract keeps each distinct line up to this many characters."""
ENTRY_CUT_NOTE = " […{cut} characters cut]"


@dataclass(frozen=True, slots=True)
class TraceRound:
    """One recorded round of a turn: the assistant's text, its tool calls and their results,
    as rendered for the trace (and for a compaction call)."""

    turn_id: str
    round: int
    text: str


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + ENTRY_CUT_NOTE.format(cut=len(text) - max_chars)


def _entry_line(entry: Mapping[str, Any], max_chars: int) -> str | None:
    role, content = entry.get("role"), str(entry.get("content") or "")
    tool = entry.get("tool_name")
    if role == "assistant" and tool:
        return f"call {tool} {_cut(content, max_chars)}"
    if role == "assistant":
        return f"assistant: {_cut(content, max_chars)}" if content else None
    if role == "tool":
        return f"result {tool or 'tool'}: {_cut(content, max_chars)}"
    if role == "system":  # what longrun told the agent about its own process (§13 notices)
        return f"longrun: {_cut(content, max_chars)}"
    return None  # the prompt a turn was shown is not part of its process


def trace_rounds(entries: Iterable[Mapping[str, Any]], *, max_entry_chars: int) -> list[TraceRound]:
    """Recorded transcript entries of one WorkItem (oldest first) grouped into rounds: only what
    the agent said and did and what its tools answered; each entry cut to `max_entry_chars`."""
    grouped: dict[tuple[str, int], list[str]] = {}
    for entry in entries:
        line = _entry_line(entry, max_entry_chars)
        if line is not None:
            grouped.setdefault((str(entry["turn_id"]), int(entry.get("round", 0))), []).append(line)
    return [
        TraceRound(turn_id=turn, round=n, text="\n".join([f"### {turn} round {n}", *lines]))
        for (turn, n), lines in grouped.items()
    ]


def within(covers: NoteCovers | None, turn_id: str, round_: int) -> bool:
    """Whether a note's coverage reaches this round: every turn before its last one (turn ids
    are ULIDs: they sort by time) and, of its last turn, the rounds up to `to_round` (all of
    them when None)."""
    if covers is None:
        return False
    if turn_id != covers.to_turn:
        return turn_id < covers.to_turn
    return covers.to_round is None or round_ <= covers.to_round


def is_covered(turn_id: str, notes: Sequence[ProcessNote], round_: int) -> bool:
    """Whether the newest note already covers this round (notes cover everything before)."""
    return bool(notes) and within(notes[-1].covers, turn_id, round_)


def covers_text(covers: NoteCovers) -> str:
    end = f"{covers.to_turn} round {covers.to_round}" if covers.to_round else covers.to_turn
    return f"turns {covers.from_turn}..{end}"


@dataclass(frozen=True, slots=True)
class TraceFit:
    """What of the uncovered rounds the prompt shows, and what is left for compaction."""

    shown: tuple[TraceRound, ...]
    to_compact: tuple[TraceRound, ...]
    tokens: int


def fit_trace(
    rounds: Sequence[TraceRound], budget: int, count: Count, *, bound: Count | None = None
) -> TraceFit:
    """Rounds fit whole, newest kept first. When all of them do not fit, the oldest whole turns
    go to compaction until what stays fits in half the budget (so the next turns add rounds
    without compacting again at once); the newest turn is compacted too if it alone does not.
    `bound`: an upper bound of `count` that costs less; when the bounds already fit the budget,
    nothing is counted and `tokens` is their sum (a turn's trace, most of the time)."""
    if bound is not None:
        upper = sum(bound(r.text) for r in rounds)
        if upper <= budget:
            return TraceFit(shown=tuple(rounds), to_compact=(), tokens=upper)
    sizes = [count(r.text) for r in rounds]
    total = sum(sizes)
    if total <= budget:
        return TraceFit(shown=tuple(rounds), to_compact=(), tokens=total)
    turns: list[str] = []
    for r in rounds:
        if not turns or turns[-1] != r.turn_id:
            turns.append(r.turn_id)
    left, cut_turns = total, set()
    for turn in turns:
        if left <= budget // 2:
            break
        cut_turns.add(turn)
        left -= sum(s for r, s in zip(rounds, sizes, strict=True) if r.turn_id == turn)
    shown = tuple(r for r in rounds if r.turn_id not in cut_turns)
    compact = tuple(r for r in rounds if r.turn_id in cut_turns)
    return TraceFit(shown=shown, to_compact=compact, tokens=left)


def newest_within(rounds: Sequence[TraceRound], budget: int, count: Count) -> list[TraceRound]:
    """The newest rounds that fit the budget whole (what the trace shows when compaction did not
    happen)."""
    kept: list[TraceRound] = []
    used = 0
    for r in reversed(rounds):
        size = count(r.text)
        if used + size > budget:
            break
        kept.append(r)
        used += size
    return kept[::-1]


def compaction_input(work_item_id: str, objective: str, rounds: Sequence[TraceRound]) -> str:
    """The user message of a compaction call."""
    head = f"WorkItem {work_item_id}: {objective}\nRecorded rounds, oldest first:\n"
    return head + "\n\n".join(r.text for r in rounds)


def merge_input(work_item_id: str, objective: str, notes: Sequence[ProcessNote]) -> str:
    """The user message of a call that merges notes."""
    head = f"WorkItem {work_item_id}: {objective}\nProcess notes, oldest first:\n"
    return head + "\n\n".join(f"## {covers_text(n.covers)}\n{n.text}" for n in notes)


def fit_text(text: str, budget: int, count: Count) -> str:
    """The text's lines within `budget` tokens: its first lines and its last lines, half the
    budget each, with a line saying how many were left out between them."""
    if count(text) <= budget:
        return text
    lines = text.splitlines()
    head: list[str] = []
    tail: list[str] = []
    used = 0
    for line in lines:
        size = count(line) + 1
        if used + size > budget // 2:
            break
        head.append(line)
        used += size
    for line in reversed(lines[len(head) :]):
        size = count(line) + 1
        if used + size > budget - 12:
            break
        tail.append(line)
        used += size
    gap = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[… {gap} lines left out …]", *tail[::-1]])


_STRUCTURE = ("### ", "## ", "WorkItem ", "Recorded rounds", "Process notes", "[… ")


def _result_text(line: str) -> str:
    """A tool result line reduced to what the tool said: the `content` (or `text`) of its
    envelope's result when it has one, else the line as it is."""
    head, sep, raw = line.partition(": ")
    if not sep or not raw.startswith("{"):
        return line
    try:
        envelope = json.loads(raw)
    except ValueError:
        return line
    result = envelope.get("result") if isinstance(envelope, dict) else None
    if isinstance(result, dict):
        for key in ("content", "text"):
            if isinstance(result.get(key), str):
                return f"{head.removeprefix('result ')} said: " + " / ".join(
                    part.strip() for part in result[key].splitlines() if part.strip()
                )
    return line


def extract(text: str, budget: int, count: Count) -> str:
    """The scripted stand-in for a compaction or merge call: every distinct line that carries
    content (headings left out, a tool result reduced to what the tool said, each line cut to
    `EXTRACT_LINE_CHARS`), in order, then `fit_text` to the budget, which keeps the earliest
    and the latest. Deterministic, so a scripted life compacts the same way every run."""
    seen: set[str] = set()
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(_STRUCTURE):
            continue
        if line.startswith("result "):
            line = _result_text(line)
        line = line[:EXTRACT_LINE_CHARS]
        if line not in seen:
            seen.add(line)
            kept.append(line)
    return fit_text("\n".join(kept), budget, count) or "(nothing to keep)"


def notes_tokens(notes: Sequence[ProcessNote], count: Count) -> int:
    return sum(count(note.text) for note in notes)


def notes_message(work_item_id: str, notes: Sequence[ProcessNote]) -> str:
    lines = [f"## Process notes of {work_item_id} (what earlier turns on it learned, oldest first)"]
    for note in notes:
        lines += ["", f"### {covers_text(note.covers)} ({note.id})"]
        lines.append(note.text)
    return "\n".join(lines)


TRACE_HEADING = (
    "## Process trace of {work_item_id} (your recorded rounds of earlier turns on it, oldest first)"
)
TRACE_CUT = "[{count} older rounds are not shown: {reason}.]"


def trace_message(
    work_item_id: str, rounds: Sequence[TraceRound], *, left_out: int = 0, reason: str = ""
) -> str:
    lines = [TRACE_HEADING.format(work_item_id=work_item_id)]
    if left_out:
        lines.append(TRACE_CUT.format(count=left_out, reason=reason or "no reason given"))
    lines += ["", "\n\n".join(r.text for r in rounds)]
    return "\n".join(lines)


def chunks(rounds: Sequence[TraceRound], budget: int, count: Count) -> list[list[TraceRound]]:
    """Consecutive groups of rounds, each within `budget` tokens (a larger round alone): what
    one compaction call takes."""
    groups: list[list[TraceRound]] = []
    used = 0
    for r in rounds:
        size = count(r.text)
        if not groups or used + size > budget:
            groups.append([])
            used = 0
        groups[-1].append(r)
        used += size
    return groups
