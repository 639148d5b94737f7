"""The chaos run's invariants, read from the ledger and the histories in Redis (never from logs),
checked against what the load generator was told was accepted.

`check` returns the violations (empty when every invariant holds) and the figures behind them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from services.scheduler import policy
from shared.domain.history import verify
from shared.runtime import utc_now
from shared.store.client import AnyRedis
from shared.store.snapshots import SnapshotReader
from shared.wire.names import Group, Names
from tests.bench.loadgen import Accepted
from tests.chaos.gated import check_gate
from tests.chaos.stored import check_archive, stored_history, stored_items


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    figures: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    stuck: list[dict[str, Any]] = field(default_factory=list)
    """For every agent with a violation: its open WorkItems, waits and last events."""

    def fail(self, text: str) -> None:
        self.violations.append(text)


def consumed_streams(names: Names) -> list[tuple[str, str]]:
    """Every (stream, consumer group) pair of the deployment."""
    pairs = [(names.callbacks, Group.INGRESS)]
    for p in range(names.partitions):
        pairs += [
            (names.commands(p), Group.LEDGER),
            (names.events(p), Group.SCHEDULER),
            (names.timers_fired(p), Group.SCHEDULER),
            (names.ticks(p), Group.EXECUTOR),
        ]
    return pairs


async def backlog(redis: AnyRedis, names: Names) -> dict[str, int]:
    """Pending and undelivered entries per (stream, group) that still have any."""
    left = {}
    for stream, group in consumed_streams(names):
        if not await redis.exists(stream):
            continue
        for info in await redis.xinfo_groups(stream):
            if _text(info["name"]) != group:
                continue
            # Not XINFO's `lag`: Redis 7.0 loses its entries-read counter over an AOF restart,
            # so `lag` stays positive although the group has read every entry.
            after = "(" + _text(info["last-delivered-id"])
            undelivered = len(await redis.xrange(stream, after, "+", count=1000))
            count = int(info["pending"]) + undelivered
            if count:
                left[f"{stream}/{group}"] = count
    for p in range(names.partitions):
        # Commands a partition owes another (a delegation's steps), re-sent until applied.
        owed = await redis.hlen(names.outbox(p))
        if owed:
            left[names.outbox(p)] = owed
    return left


TIMER_HORIZON_MS = 3_000
"""Timers due this soon still count as work in flight when quiescing: the checks' own reads of
every stream take a moment, and a timer firing meanwhile (a nudge or a 300 ms WaitFor armed by
the last events handled) put an entry on a fired stream that the backlog check then counted as
left over, though the scheduler took it up a moment later."""


async def timers_due_soon(redis: AnyRedis, names: Names) -> dict[str, int]:
    """Per partition, the timers due within TIMER_HORIZON_MS (or overdue), where there are any."""
    horizon = int(time.time() * 1000) + TIMER_HORIZON_MS
    soon = {}
    for p in range(names.partitions):
        due = await redis.zcount(names.timers(p), "-inf", horizon)
        if due:
            soon[names.timers(p)] = int(due)
    return soon


async def quiesce(redis: AnyRedis, names: Names, within: float) -> dict[str, int]:
    """Wait until every group has delivered and acknowledged everything and no timer is about to
    fire; returns what is left (entries, or timers still due soon)."""
    deadline = time.monotonic() + within
    while True:
        left = await backlog(redis, names) or await timers_due_soon(redis, names)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.5)


async def check(
    redis: AnyRedis,
    names: Names,
    accepted: Accepted,
    agent_ids: Sequence[str],
    external: Sequence[str] = (),
) -> Findings:
    """`external`: external-loop agents. Their ticks go to the wakes stream for a loop of their
    own, which the run does not have, so no tick is owed to them or marked for them here."""
    found = Findings()
    left = await backlog(redis, names)
    for stream, count in left.items():
        found.fail(f"{stream}: {count} entries neither acknowledged nor dead-lettered")
    await _dead_letters(redis, names, found)
    for agent in [*agent_ids, *external]:
        await _agent(redis, names, accepted, agent, found, builtin=agent not in external)
    await _nothing_owed(redis, names, agent_ids, found)
    return found


async def _dead_letters(redis: AnyRedis, names: Names, found: Findings) -> None:
    entries: Any = await redis.xrange(names.dead_letter)
    for _, fields in entries:
        reason = fields.get(b"reason")
        if not reason:
            found.fail(f"dead-letter entry without a reason: {fields!r}"[:300])
        found.dead_letters[_text(reason or b"?")[:80]] += 1


async def _agent(
    redis: AnyRedis,
    names: Names,
    accepted: Accepted,
    agent: str,
    found: Findings,
    *,
    builtin: bool = True,
) -> None:
    docs = await stored_history(redis, names, agent)
    result = verify(docs)
    found.figures["agents"] += 1
    found.figures["history events"] += len(docs)
    if not result.ok:
        found.fail(f"{agent}: history verify failed at index {result.first_bad_index}")
    types = Counter(str(d["type"]) for d in docs)
    found.figures["liveness repairs"] += types["liveness_repaired"]
    check_messages(agent, docs, accepted, found)
    check_callbacks(agent, docs, accepted, found)
    await _trigger_counts(redis, names, agent, docs, found)
    check_turns(agent, docs, found)
    items = await stored_items(redis, names, agent, found)
    await check_archive(redis, names, agent, found)
    waits = [
        orjson.loads(v)
        for key in (names.waits(agent), names.waits_done(agent))
        for v in (await redis.hgetall(key)).values()
    ]
    check_completions(agent, docs, accepted, found, items=items, waits=waits)
    check_gate(agent, docs, items, found)
    lease = await redis.exists(names.lease(agent))
    if lease:
        found.fail(f"{agent}: a turn lease is still held after quiescence")
    marker = await redis.get(names.outstanding_tick(agent))
    if marker is not None and builtin:
        # Every tick stream is drained, so no tick is in flight: the marker holds the agent
        # (the scheduler and the watchdog both wait for it) until its TTL runs out.
        found.fail(f"{agent}: tick marker {_text(marker)} outstanding with no tick in flight")
    if any(v.startswith(f"{agent}:") for v in found.violations):
        found.stuck.append(await _describe(redis, names, agent, docs))


async def _describe(
    redis: AnyRedis, names: Names, agent: str, docs: list[dict[str, Any]]
) -> dict[str, Any]:
    """What a reader needs to tell why an agent went wrong, from the ledger alone."""
    items = [orjson.loads(raw) for raw in (await redis.hgetall(names.items(agent))).values()]
    keep = ("id", "state", "blocked_by", "plan_status", "recheck_at", "attempts")
    waits = [orjson.loads(raw) for raw in (await redis.hgetall(names.waits(agent))).values()]
    record = await redis.hget(names.agent(agent), "doc")
    marker = await redis.get(names.outstanding_tick(agent))
    return {
        "agent": agent,
        "tick_marker": _text(marker) if marker else None,
        "tick_marker_ttl_ms": await redis.pttl(names.outstanding_tick(agent)),
        "record": orjson.loads(record) if record else None,
        "open_items": [{k: i.get(k) for k in keep} for i in items if i.get("state") != "completed"],
        "active_waits": waits,
        "last_events": [
            {
                "seq": d["seq"],
                "type": d["type"],
                "wi": d["work_item_id"],
                **{
                    k: v
                    for k, v in d["data"].items()
                    if isinstance(v, (str, int, bool)) and k != "text"
                },
            }
            for d in docs[-40:]
        ],
    }


def check_messages(
    agent: str, docs: list[dict[str, Any]], accepted: Accepted, found: Findings
) -> None:
    """Every accepted message applied exactly once; nothing applied beyond the ambiguous."""
    applied = Counter(
        str(d["data"]["message_id"]) for d in docs if d["type"] == "operator_message_received"
    )
    for message_id, count in applied.items():
        if count > 1:
            found.fail(f"{agent}: message {message_id} applied {count} times")
    mine = accepted.messages.get(agent, [])
    for message_id in mine:
        if applied[message_id] != 1:
            found.fail(f"{agent}: accepted message {message_id} applied {applied[message_id]}x")
    extra = len(applied) - len(mine)
    found.figures["messages applied"] += len(applied)
    found.figures["messages from lost answers"] += extra
    if extra > accepted.ambiguous_messages.get(agent, 0) or extra < 0:
        found.fail(f"{agent}: {len(applied)} messages applied, {len(mine)} accepted")


def check_callbacks(
    agent: str, docs: list[dict[str, Any]], accepted: Accepted, found: Findings
) -> None:
    """Every accepted delivery counted once, as a trigger or an inbox delivery; repeats never."""
    counted = Counter(
        str(d["data"]["delivery_id"])
        for d in docs
        if d["type"] in ("wait_triggered", "callback_delivered_to_inbox")
        and d["data"].get("delivery_id")
    )
    inbox = sum(1 for d in docs if d["type"] == "callback_delivered_to_inbox")
    found.figures["callbacks delivered to inbox"] += inbox
    for key in accepted.callbacks.get(agent, []):
        found.figures["accepted callbacks"] += 1
        if counted[key] != 1:
            found.fail(f"{agent}: accepted callback {key} counted {counted[key]} times")
    for key, count in counted.items():
        if count > 1:
            found.fail(f"{agent}: delivery {key} counted {count} times")


async def _trigger_counts(
    redis: AnyRedis, names: Names, agent: str, docs: list[dict[str, Any]], found: Findings
) -> None:
    """Each wait's trigger_count equals its wait_triggered events; each wait got one trigger."""
    events = Counter(str(d["data"]["wait_id"]) for d in docs if d["type"] == "wait_triggered")
    waits = {
        **await redis.hgetall(names.waits_done(agent)),
        **await redis.hgetall(names.waits(agent)),
    }
    kinds: Counter[str] = Counter()
    for raw_id, raw in waits.items():
        wait = orjson.loads(raw)
        wait_id = _text(raw_id)
        count = int(wait.get("trigger_count") or 0)
        kinds[str(wait.get("wake"))] += 1
        if count != events[wait_id]:
            found.fail(f"{agent}: wait {wait_id} trigger_count {count}, events {events[wait_id]}")
        if count > 1:
            found.fail(f"{agent}: wait {wait_id} triggered {count} times (one delivery each)")
    for wake, n in kinds.items():
        found.figures[f"waits {wake}"] += n
    timers = sum(
        1 for d in docs if d["type"] == "wait_triggered" and d["data"]["source"] == "timer"
    )
    found.figures["timer triggers"] += timers


def check_turns(agent: str, docs: list[dict[str, Any]], found: Findings) -> None:
    """Turns never overlap: a turn starts only when none is open, or when it names the open one
    as interrupted; fencing tokens only grow; only the open turn finishes."""
    open_turn: str | None = None
    fence = 0
    for d in docs:
        data = d["data"]
        if d["type"] == "turn_started":
            found.figures["turns"] += 1
            if data.get("interrupted_turn_id"):
                found.figures["interrupted turns"] += 1
            if open_turn is not None and data.get("interrupted_turn_id") != open_turn:
                found.fail(f"{agent}: turn {data['turn_id']} started while {open_turn} was open")
            if int(data["fencing_token"]) <= fence:
                found.fail(f"{agent}: fencing token {data['fencing_token']} after {fence}")
            fence = int(data["fencing_token"])
            open_turn = str(data["turn_id"])
        elif d["type"] == "turn_finished":
            if data["turn_id"] != open_turn:
                found.fail(f"{agent}: turn {data['turn_id']} finished while {open_turn} was open")
            open_turn = None
    if open_turn is not None:
        found.fail(f"{agent}: turn {open_turn} still open after quiescence")


def check_completions(
    agent: str,
    docs: list[dict[str, Any]],
    accepted: Accepted,
    found: Findings,
    *,
    items: Mapping[str, dict[str, Any]] | None = None,
    waits: Sequence[dict[str, Any]] = (),
) -> None:
    created = [str(d["work_item_id"]) for d in docs if d["type"] == "work_item_created"]
    done = Counter(str(d["work_item_id"]) for d in docs if d["type"] == "work_item_completed")
    found.figures["work items"] += len(created)
    found.figures["work items completed"] += sum(done.values())
    cancelled = Counter(str(d["work_item_id"]) for d in docs if d["type"] == "work_item_cancelled")
    found.figures["work items cancelled"] += sum(cancelled.values())
    done.update(cancelled)  # an item ends once: completed or cancelled (a delegation's cascade)
    for item in created:
        if done[item] == 1:
            continue
        blocked_by = str((items or {}).get(item, {}).get("blocked_by") or "")
        if not done[item] and blocked_by.startswith("turn failed"):
            # The crash rule (contract §4): a visible blocker, never a stuck running item.
            found.figures["work items blocked by the crash rule"] += 1
        else:
            found.fail(f"{agent}: WorkItem {item} completed {done[item]} times")
    for item in accepted.completed.get(agent, []):
        if done[item] != 1:
            found.fail(f"{agent}: round's WorkItem {item} completed {done[item]} times")


async def _nothing_owed(
    redis: AnyRedis, names: Names, agent_ids: Sequence[str], found: Findings
) -> None:
    """After quiescence the scheduler's policy owes no agent a tick: the watchdog, which repairs
    exactly the owed ticks nothing will publish, would find nothing to repair."""
    reader = SnapshotReader(redis, names)
    now = utc_now()
    for start in range(0, len(agent_ids), 200):
        views = await reader.load(list(agent_ids[start : start + 200]))
        for agent_id, view in views.items():
            decision = policy.decide(view.snapshot, now)
            if decision.tick is not None:
                found.fail(f"{agent_id}: still owed a {decision.tick.kind} tick after quiescence")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
