"""Where each headline of a board org file sits (which agent's section, under which parent)
and what its export recorded (`ID`, `AGENT_ID`, `KEYWORD`, `REVISION`): the facts both the
keyword edits and the verdict lines are judged by. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.cli.org.keywords import LONGRUN_KEYWORDS
from services.cli.org.moves import LiveBoard
from services.cli.org.parse import Headline, OrgDocument

_AGENT_TITLE = re.compile(r"^agent\s+(\S+)$")


@dataclass(frozen=True, slots=True)
class Placed:
    """A headline and where it sits: the agent section (`agent_id`, None outside one), whether
    that agent exists, and its nearest parent below the section headline."""

    headline: Headline
    agent_id: str | None
    known_agent: bool
    parent: Headline | None = None

    @property
    def nested(self) -> bool:
        return self.parent is not None


def place(doc: OrgDocument, live: LiveBoard) -> list[Placed]:
    placed: list[Placed] = []
    agent_id: str | None = None
    ancestors: list[Headline] = []
    for headline in doc.headlines:
        if headline.level == 1:
            agent_id, ancestors = section_agent(headline), []
            placed.append(Placed(headline, agent_id, agent_id in live.agents))
            continue
        ancestors = [a for a in ancestors if a.level < headline.level]
        parent = ancestors[-1] if ancestors else None
        placed.append(Placed(headline, agent_id, agent_id in live.agents, parent))
        ancestors.append(headline)
    return placed


def section_agent(headline: Headline) -> str | None:
    """The agent a level-1 headline stands for: its AGENT_ID property, or `agent ID`."""
    if "AGENT_ID" in headline.properties:
        return headline.properties["AGENT_ID"] or None
    match = _AGENT_TITLE.match(headline.text)
    return match[1] if match else None


def owner_problem(spot: Placed, view: dict[str, object]) -> str | None:
    """Why the headline is another agent's: a top-level item must be its section's agent's; a
    nested one (a delegated item) the agent its AGENT_ID property names."""
    headline, owner = spot.headline, str(view.get("agent_id"))
    claimed = headline.properties.get("AGENT_ID") if spot.nested else None
    expected = claimed or spot.agent_id
    if owner == expected and headline.properties.get("AGENT_ID", owner) == owner:
        return None
    return (
        f"a headline of another agent: {view.get('id')} belongs to {owner}, but sits under "
        f"`* agent {spot.agent_id}`; edit it under its own agent"
    )


def unknown_item(work_item_id: str, spot: Placed, live: LiveBoard) -> str:
    if work_item_id in live.denied:
        return (
            f"a headline of another agent: {work_item_id} is not one of {spot.agent_id}'s "
            "WorkItems; edit it under its own agent"
        )
    return f"unknown :ID: {work_item_id}: {spot.agent_id} has no such WorkItem"


def exported_marks(headline: Headline) -> tuple[str | None, int | None]:
    exported = headline.properties.get("KEYWORD")
    revision = headline.properties.get("REVISION", "")
    return (
        exported if exported in LONGRUN_KEYWORDS else None,
        int(revision) if revision.isdigit() else None,
    )


def export_problem(headline: Headline, exported: str | None, revision: int | None) -> str | None:
    if exported is None or revision is None:
        missing = ":KEYWORD:" if exported is None else ":REVISION:"
        return f"no valid {missing} property: export the board again (`longrun board --format org`)"
    return None
