"""What an org edit becomes: one operator command (a `Move`) or a reason not to send one, and
the board as the edits so far leave it, so that a later line sees the earlier ones. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

Json = dict[str, Any]

ORG_EDIT_REASON = "operator: org edit"
"""The reason every pick, put down and cancel from the org file carries into the history."""


class Action(StrEnum):
    PICK = "pick"
    PUT_DOWN = "put down"
    CANCEL = "cancel"
    ASK = "ask"
    """An operator message asking the agent to take a new headline on."""
    SET_CHECK = "set check"
    """`:DONE-WHEN:` (or a `sh :check` block) made the item's command check (UpdateWorkItem)."""


class Status(StrEnum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Move:
    """One operator command: `text` is the reason, or the message of an ask."""

    action: Action
    agent_id: str
    work_item_id: str | None
    text: str = ORG_EDIT_REASON
    acceptance: tuple[Json, ...] = ()
    """SET_CHECK only: the item's whole check list to send."""


@dataclass(frozen=True, slots=True)
class EditResult:
    """What became of one headline or verdict line: `move` is set only when applied."""

    line: int
    subject: str
    status: Status
    detail: str
    move: Move | None = None


@dataclass(frozen=True, slots=True)
class LiveBoard:
    """The ledger's side, read just before applying: agents by id, WorkItem views by id (any
    agent's), ids the API refused to show under the agent they were filed under, and the
    operator messages already in each agent's history (by text)."""

    agents: Mapping[str, Json]
    items: Mapping[str, Json]
    denied: frozenset[str] = frozenset()
    asked: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(slots=True)
class Simulation:
    """The board as the moves planned so far leave it."""

    live: LiveBoard
    currents: dict[str, str | None] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    picks: dict[str, int] = field(default_factory=dict)
    """Agent id -> the line that picks one of its items (one pick per agent per file)."""
    asked: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for agent_id, agent in self.live.agents.items():
            self.currents[agent_id] = agent.get("current_work_item_id")
            self.asked[agent_id] = set(self.live.asked.get(agent_id, ()))

    def already(self, action: Action, view: Json) -> str | None:
        """Why `action` on the item has nothing left to do, if it has not."""
        agent_id, work_item_id = str(view["agent_id"]), str(view["id"])
        current = self.currents.get(agent_id)
        if action is Action.PICK and current == work_item_id:
            return "already the current item"
        if action is Action.PUT_DOWN and current != work_item_id:
            return "not the current item (already put down)"
        if action is Action.CANCEL and (
            view.get("outcome") == "cancelled" or work_item_id in self.cancelled
        ):
            return "already cancelled"
        return None

    def settle(
        self, line: int, subject: str, action: Action, view: Json, revision: int
    ) -> EditResult:
        """The result of `action` on a WorkItem whose headline was exported at `revision`:
        unchanged when it already holds, refused when the item moved on since the export or
        cannot take it, else applied (and remembered for the lines that follow)."""
        held = self.already(action, view)
        if held is not None:
            return EditResult(line, subject, Status.UNCHANGED, held)
        refusal = self._refusal(action, view, revision)
        if refusal is not None:
            return EditResult(line, subject, Status.REFUSED, refusal)
        agent_id, work_item_id = str(view["agent_id"]), str(view["id"])
        if action is Action.PICK:
            self.picks[agent_id] = line
            self.currents[agent_id] = work_item_id
        elif action is Action.PUT_DOWN or self.currents.get(agent_id) == work_item_id:
            self.currents[agent_id] = None
        if action is Action.CANCEL:
            self.cancelled.add(work_item_id)
        move = Move(action, agent_id, work_item_id)
        return EditResult(line, subject, Status.APPLIED, str(action), move)

    def _refusal(self, action: Action, view: Json, revision: int) -> str | None:
        if revision != view.get("revision"):
            return (
                f"stale: {view['id']} changed since this file was exported (revision "
                f"{revision} → {view.get('revision')}); export the board again and redo the edit"
            )
        if view.get("state") != "open":
            return f"{view['id']} is finished ({view.get('outcome')}); it cannot be changed"
        picked = self.picks.get(str(view["agent_id"]))
        if action is Action.PICK and picked is not None:
            return (
                f"line {picked} already picks an item of {view['agent_id']}: an agent has one "
                "current item, so pick one per file"
            )
        return None

    def ask(self, line: int, subject: str, agent_id: str, text: str) -> EditResult:
        """An operator message to the agent, unless the same one is in its history already."""
        sent = self.asked.setdefault(agent_id, set())
        if text in sent:
            return EditResult(
                line, subject, Status.UNCHANGED, "already asked (the message is sent)"
            )
        sent.add(text)
        move = Move(Action.ASK, agent_id, None, text)
        return EditResult(line, subject, Status.APPLIED, f"asked {agent_id} to take it on", move)
