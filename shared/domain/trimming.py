"""Which of an agent's oldest recorded transcript entries may be trimmed, pure: those no prompt
will show again, in whole rounds, and, when open WorkItems that are not current hold the head,
their entries that compaction into process notes releases (docs/architecture.md, "How a turn's
prompt is assembled": Retention)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.domain.memory import is_covered
from shared.domain.records import WorkItem


def _trimmable(entry: Mapping[str, Any], items: Mapping[str, WorkItem]) -> bool:
    """A recorded entry no prompt will show again: the prompt a turn was shown (a trace shows
    only process), its WorkItem is completed (or gone), a note covers its turn, or it was bound
    to no WorkItem at all."""
    item = items.get(str(entry.get("work_item_id") or ""))
    if entry.get("role") == "user" or item is None or not item.is_open:
        return True
    return is_covered(str(entry["turn_id"]), item.process_notes, int(entry.get("round", 0)))


def parked_entries(
    head: Sequence[Mapping[str, Any]],
    items: Mapping[str, WorkItem],
    rounds: int,
    current: str | None,
) -> dict[str, list[Mapping[str, Any]]]:
    """What keeps the transcript's oldest `rounds` rounds from being trimmed that compaction
    can release: per open WorkItem other than `current`, its uncovered entries there, oldest
    first. Stops at the first uncovered round of `current` (its trace is the turn's own)."""
    parked: dict[str, list[Mapping[str, Any]]] = {}
    seen: list[tuple[str, int]] = []
    for entry in head:
        key = (str(entry["turn_id"]), int(entry.get("round", 0)))
        if not seen or seen[-1] != key:
            if len(seen) == rounds:
                break
            seen.append(key)
        if _trimmable(entry, items):
            continue
        owner = str(entry["work_item_id"])
        if owner == current:
            break
        parked.setdefault(owner, []).append(entry)
    return parked


def trimmable_prefix(
    head: Sequence[Mapping[str, Any]], items: Mapping[str, WorkItem], rounds: int
) -> tuple[int, int]:
    """How many of the transcript's oldest entries may go, in whole rounds, at most `rounds`
    of them, stopping at the first round still needed: (entries, rounds)."""
    taken: list[tuple[str, int]] = []
    count = 0
    for index, entry in enumerate(head):
        key = (str(entry["turn_id"]), int(entry.get("round", 0)))
        if not taken or taken[-1] != key:
            if len(taken) == rounds:
                break
            taken.append(key)
        if not _trimmable(entry, items):
            return _whole_rounds(head, taken[:-1])
        count = index + 1
    if count == len(head) and len(taken) < rounds:
        return _whole_rounds(head, taken[:-1])  # the last round may go on past the head read
    return count, len(taken)


def _whole_rounds(
    head: Sequence[Mapping[str, Any]], rounds: list[tuple[str, int]]
) -> tuple[int, int]:
    wanted = set(rounds)
    count = 0
    for entry in head:
        if (str(entry["turn_id"]), int(entry.get("round", 0))) not in wanted:
            break
        count += 1
    return count, len(rounds)
