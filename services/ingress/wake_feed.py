"""The per-agent wake feed: `<prefix>:wakes` (the ticks the scheduler publishes for agents whose
loop is external) read with plain XREAD, no consumer group, by one reader per ingress process
shared by every open feed, each watcher given its own agent's ticks only.

The reading, catching up from a resume point and closing on shutdown are the console's live
feed (services.ingress.console.live); this module says which stream and what a tick is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from services.ingress.console.live import LiveFeed

WAKES_KEY = 0
"""The one stream's key among the feed's readers."""


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class WakeEntry:
    """One tick on `<prefix>:wakes`: its entry id (the feed's resume point) and the tick."""

    entry_id: str
    agent_id: str
    kind: str
    work_item_id: str | None
    candidates: list[Any]
    tick_id: str

    def tick(self) -> dict[str, Any]:
        """The tick object as published (§4): `candidates` decoded, an empty WorkItem id null."""
        return {
            "agent_id": self.agent_id,
            "kind": self.kind,
            "work_item_id": self.work_item_id,
            "candidates": self.candidates,
            "tick_id": self.tick_id,
        }

    def data(self) -> bytes:
        return orjson.dumps(self.tick())


def parse_wake(entry_id: bytes | str, fields: dict[Any, Any]) -> WakeEntry | None:
    """A wake entry, or None for an entry without an agent or a tick id."""

    def get(name: str) -> str:
        return _text(fields.get(name.encode(), fields.get(name)))

    agent_id, tick_id = get("agent_id"), get("tick_id")
    if not agent_id or not tick_id:
        return None
    try:
        candidates = orjson.loads(get("candidates") or "[]")
    except orjson.JSONDecodeError:
        candidates = []
    return WakeEntry(
        entry_id=_text(entry_id),
        agent_id=agent_id,
        kind=get("kind"),
        work_item_id=get("work_item_id") or None,
        candidates=candidates if isinstance(candidates, list) else [],
        tick_id=tick_id,
    )


class WakeFeed(LiveFeed[WakeEntry]):
    """Every agent's wake feed in this process: one reader of `<prefix>:wakes`."""

    def stream(self, key: int) -> str:
        return self.names.wakes

    def key_of(self, agent_id: str) -> int:
        return WAKES_KEY

    def all_keys(self) -> list[int]:
        return [WAKES_KEY]

    def parse(self, entry_id: bytes | str, fields: dict[Any, Any]) -> WakeEntry | None:
        return parse_wake(entry_id, fields)
