"""The outcome of each external call, derived from an agent's history (never stored by a guess).

A call is recorded twice by the turn that makes it: `tool_call_started` before, and
`tool_call_finished {outcome}` after. A turn that dies in between leaves the second record out;
once that turn is over (its `turn_finished`, a later turn's `turn_started`, or the agent no longer
in it) nobody will ever write it, and the call's outcome is `unknown`. Until then it is `running`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

RUNNING = "running"
UNKNOWN = "unknown"


@dataclass
class CallOutcomes:
    """Feed it history events in order; `outcomes` maps each call started in the events fed with
    `track=True` to its outcome so far."""

    outcomes: dict[str, str] = field(default_factory=dict)
    _open: dict[str, str] = field(default_factory=dict)
    """Calls with no outcome yet, by call id: the turn that started each."""

    @property
    def settled(self) -> bool:
        return not self._open

    def see(self, events: Iterable[dict[str, Any]], *, track: bool = True) -> None:
        """`track=False`: events after the ones of interest, read only to settle their calls."""
        for event in events:
            kind, data = event.get("type"), event.get("data") or {}
            if kind == "tool_call_started" and track:
                self.outcomes[data["call_id"]] = RUNNING
                self._open[data["call_id"]] = data["turn_id"]
            elif kind == "tool_call_finished" and data.get("call_id") in self._open:
                self.outcomes[data["call_id"]] = data["outcome"]
                del self._open[data["call_id"]]
            elif kind == "turn_finished":
                self._end({data.get("turn_id")}, ended=True)
            elif kind == "turn_started":
                self._end({data.get("turn_id")}, ended=False)

    def settle(self, running_turn_id: str | None) -> dict[str, str]:
        """At the end of the history: the calls of any turn but the running one are over."""
        self._end({running_turn_id}, ended=False)
        return self.outcomes

    def _end(self, turns: set[str | None], *, ended: bool) -> None:
        """The calls of `turns` are over (`ended`), or those of every other turn."""
        for call_id, turn in list(self._open.items()):
            if (turn in turns) == ended:
                self.outcomes[call_id] = UNKNOWN
                del self._open[call_id]
