"""The ledger's memory of each agent's slice as of its last commit, so the common case decides
without an `lr_load` round trip.

Correctness never rests on it: `lr_commit` checks the agent's version and the fencing token
atomically, a refused commit forgets the entry and the command is decided again from a fresh load.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from datetime import datetime

from services.ledger.store import Loaded, agents_named, fencing_token, named
from shared.domain.records import WorkItem
from shared.wire import commands as c

DEFAULT_CAPACITY = 20_000
KEEP_RECENT = 16
"""Items kept per cached slice besides the current one and those with active waits: the most
recently updated (what the next commands are likely to name). Without a bound, a slice grew by
every item the agent created, and each decision copied and scanned all of them."""
TRIM_AT = 2 * KEEP_RECENT
"""A slice is trimmed back to KEEP_RECENT once it holds more items than this: trimming ranks
every item, and doing it after each commit of an agent that keeps creating items was a
measured cost to the ledger (docs/benchmarks.md)."""


class SliceCache:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._slices: OrderedDict[str, Loaded] = OrderedDict()

    def lookup(self, cmd: c.Command) -> Loaded | None:
        """The cached slice, if it holds everything this command reads."""
        entry = self._slices.get(cmd.agent_id)
        if entry is None or not covers(entry, cmd):
            return None
        self._slices.move_to_end(cmd.agent_id)
        return entry

    def base(self, cmd: c.Command) -> Loaded | None:
        """The cached slice a light lr_load can confirm for a command that reads what is not
        cached (a callback's capability and delivery mark)."""
        entry = self._slices.get(cmd.agent_id)
        if entry is None or not covers(entry, cmd, loading=True):
            return None
        return entry

    def remember(self, agent_id: str, loaded: Loaded) -> None:
        self._slices[agent_id] = trimmed(loaded)
        self._slices.move_to_end(agent_id)
        while len(self._slices) > self.capacity:
            self._slices.popitem(last=False)

    def forget(self, agent_id: str) -> None:
        self._slices.pop(agent_id, None)


def covers(entry: Loaded, cmd: c.Command, *, loading: bool = False) -> bool:
    """Whether the slice holds everything the command reads (the run planner asks it too);
    `loading`: apart from the capability and delivery mark, which a load reads anyway."""
    state = entry.state
    if state.agent is None or isinstance(cmd, c.EnsureAgent):
        return False
    if isinstance(cmd, (c.CommitArchive, c.CommitItemArchive)) or (
        not loading and (isinstance(cmd, c.RecordCallback) or agents_named(cmd))
    ):
        # Hot history events, capabilities, delivery marks and other agents are not cached.
        return False
    token = fencing_token(cmd)
    if token is not None and token != state.fence:
        return False  # a newer lease may exist: read the fence again
    if isinstance(cmd, c.CreateWorkItem):
        return True  # it names only the item it creates
    items, waits = named(cmd)
    if not items and not waits:
        return True
    return all(i in state.items for i in items) and all(w in state.waits for w in waits)


def trimmed(loaded: Loaded) -> Loaded:
    """The slice to cache: whole while it holds at most TRIM_AT items, else what an `lr_load`
    reads for the next command (the current item and the items of active waits) plus the
    KEEP_RECENT most recently updated items; a command that names another item misses the cache
    and loads it."""
    state = loaded.state
    if len(state.items) <= TRIM_AT:
        return loaded
    keep = {i.id for i in heapq.nlargest(KEEP_RECENT, state.items.values(), key=_updated)}
    keep.add(state.current_id or "")
    keep.update(w.work_item_id or "" for w in state.waits.values() if w.is_active)
    items = {i: item for i, item in state.items.items() if i in keep}
    return Loaded(loaded.stored_reply, state._copy(items=items), loaded.version)


def _updated(item: WorkItem) -> datetime:
    return item.updated_at
