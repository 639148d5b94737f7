"""The delegation invariants of the chaos run, read from the ledger after quiescence (the rounds
that produce them: tests/chaos/delegation.py): every accepted delegation ended in exactly one
status, each result reached its parent once (one `delegation_finished`, one inbox message),
nothing was delivered for a delegation its parent cancelled, and no child is still running
under a finished parent."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.chaos.delegation import ENDED, Delegation, DelegationLog
from tests.chaos.invariants import Findings
from tests.chaos.stored import stored_history, stored_items


async def check_delegations(
    redis: AnyRedis, names: Names, log: DelegationLog, found: Findings
) -> None:
    """The delegation invariants, for every accepted delegation (see the module's docstring)."""
    agents = log.agents
    records = {a: await _hash(redis, names.delegations(a)) for a in agents}
    items = {a: await stored_items(redis, names, a) for a in agents}
    finished = {a: await _finished_events(redis, names, a) for a in agents}
    inbox = {a: await _results_in_inbox(redis, names, a) for a in agents}
    for delegation in log.accepted:
        found.figures["delegations"] += 1
        mine = records[delegation.parent].get(delegation.id)
        theirs = records[delegation.child].get(delegation.id)
        _one_status(delegation, mine, theirs, finished, found)
        _result_once(delegation, mine, finished, inbox, found)
        _nothing_running_below(delegation, mine, theirs, items, found)


async def _hash(redis: AnyRedis, key: str) -> dict[str, dict[str, Any]]:
    return {_text(k): orjson.loads(v) for k, v in (await redis.hgetall(key)).items()}


async def _finished_events(redis: AnyRedis, names: Names, agent: str) -> list[dict[str, Any]]:
    docs = await stored_history(redis, names, agent)
    return [d["data"] for d in docs if d["type"] == "delegation_finished"]


async def _results_in_inbox(redis: AnyRedis, names: Names, agent: str) -> Counter[str]:
    messages = [orjson.loads(m) for m in await redis.lrange(names.inbox(agent), 0, -1)]
    return Counter(
        str(m.get("delegation_id")) for m in messages if m.get("origin") == "task_result"
    )


def _one_status(
    delegation: Delegation,
    mine: dict[str, Any] | None,
    theirs: dict[str, Any] | None,
    finished: dict[str, list[dict[str, Any]]],
    found: Findings,
) -> None:
    """Ended on the parent's side, once; the child's side agrees unless the parent cancelled
    first (its own decision: the child's later end changes nothing there)."""
    name = f"{delegation.parent}: delegation {delegation.id}"
    if mine is None or mine.get("status") not in ENDED:
        found.fail(f"{name} is {mine and mine.get('status')} after quiescence")
        return
    found.figures[f"delegations {mine['status']}"] += 1
    ends = [d for d in finished[delegation.parent] if d.get("delegation_id") == delegation.id]
    if len(ends) != 1:
        found.fail(f"{name} finished {len(ends)} times on the parent's side")
    child_ends = [d for d in finished[delegation.child] if d.get("delegation_id") == delegation.id]
    if len(child_ends) > 1:
        found.fail(f"{name} finished {len(child_ends)} times on the child's side")
    if theirs is None or theirs.get("status") == mine["status"]:
        return
    if mine["status"] != "cancelled":
        found.fail(f"{name}: parent says {mine['status']}, child says {theirs.get('status')}")


def _result_once(
    delegation: Delegation,
    mine: dict[str, Any] | None,
    finished: dict[str, list[dict[str, Any]]],
    inbox: dict[str, Counter[str]],
    found: Findings,
) -> None:
    """A result the child sent reached the parent once, as one trigger and one message; a
    delegation the parent cancelled (or whose root it ended) delivers nothing."""
    if mine is None:
        return
    name = f"{delegation.parent}: delegation {delegation.id}"
    ends = [d for d in finished[delegation.parent] if d.get("delegation_id") == delegation.id]
    from_child = any(d.get("cause") == "child_result" for d in ends)
    messages = inbox[delegation.parent][delegation.id]
    if messages != (1 if from_child else 0):
        found.fail(f"{name}: {messages} result messages (child result: {from_child})")
    found.figures["delegation results delivered"] += messages


def _nothing_running_below(
    delegation: Delegation,
    mine: dict[str, Any] | None,
    theirs: dict[str, Any] | None,
    items: dict[str, dict[str, dict[str, Any]]],
    found: Findings,
) -> None:
    """Once the parent's WorkItem ended, the child's item ended too, or it was never created
    (the cancel overtook it), or the crash rule blocked it (its delegation failed, visibly)."""
    if mine is None:
        return
    parent_item = items[delegation.parent].get(str(mine["parent_work_item_id"])) or {}
    if parent_item.get("state") != "completed":
        return
    child_item = items[delegation.child].get(str(mine["child_work_item_id"]))
    if child_item is None or child_item.get("state") == "completed":
        return
    if theirs is not None and theirs.get("status") == "failed":
        found.figures["delegated items blocked by the crash rule"] += 1
        return
    found.fail(
        f"{delegation.child}: WorkItem {child_item.get('id')} still open under the finished "
        f"{delegation.parent} WorkItem {mine['parent_work_item_id']}"
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
