"""Hot reads are bounded by open work: a turn's opening (and the summary built from it), the
scheduler's snapshot and the ledger's load read the same WorkItem documents, and about the same
bytes, for an agent with many finished WorkItems as for one with a few. Each test measures the
documents a hot path actually received from Redis, so reading the finished items (the whole
items hash, as before the split) fails it.

The finished WorkItems still answer reads by id: GetWorkItem, the completed list, and a mutating
command naming one (refused as not open, not as unknown)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from services.ledger.service import LedgerService
from services.ledger.store import LedgerStore
from services.turn_executor.opening import RECENT_SHOWN, Opening, TurnItems, queue_reads
from services.turn_executor.summary import summary_text
from shared.domain.errors import ErrorKind
from shared.domain.tools import GetWorkItemInput, ListWorkItemsInput
from shared.domain.views import ListFilter
from shared.runtime import utc_now
from shared.store import snapshots
from shared.store.client import AnyRedis
from shared.store.protocol import AgentRow, Fn, LoadReply
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome
from tests.chaos.invariants import Findings
from tests.chaos.stored import stored_items
from tests.integration.ledger_driver import Driver

OLD, YOUNG = "agent-old", "agent-young"
FINISHED_OLD = 40
FINISHED_YOUNG = 2 * RECENT_SHOWN
"""Half of each agent's finished items are done with a report (the others cancelled): the young
agent has exactly as many as a summary shows, and every hot read may show those, so the old
agent must read no more than it."""
REPORT = "r" * 2_000
"""Each finished item carries a 2 KB report: one finished document read beyond the bound
shows in the bytes."""


async def finish(driver: Driver, count: int, *, start: int = 0) -> list[str]:
    """`count` WorkItems created, picked and completed with a report (every other one, from the
    first, cancelled instead: both ways of finishing are in the finished store)."""
    ids = []
    for n in range(start, start + count):
        wid = await driver.create(f"finished {n:04d}")
        if n % 2 == 0:
            reply = await driver.tool("CancelWorkItem", work_item_id=wid, reason="not needed")
        else:
            await driver.tool("PickWorkItem", work_item_id=wid)
            reply = await driver.tool("CompleteWorkItem", work_item_id=wid, report_text=REPORT)
        assert reply.outcome is CommandOutcome.APPLIED, reply
        ids.append(wid)
    return ids


async def open_work(driver: Driver) -> list[str]:
    """The same open work for both agents: a current item, a queued one, a blocked one."""
    current = await driver.create("current work", plan_status="ready")
    queued = await driver.create("queued work", plan_status="ready")
    blocked = await driver.create("blocked work")
    await driver.tool("UpdateWorkItem", work_item_id=blocked, blocked_by="waiting on a person")
    await driver.tool("PickWorkItem", work_item_id=current)
    return [current, queued, blocked]


@pytest.fixture
async def agents(ledger: LedgerService, reads: ReadModel) -> dict[str, tuple[list[str], list[str]]]:
    """Per agent: (finished ids, open ids)."""
    made = {}
    for agent, finished in ((OLD, FINISHED_OLD), (YOUNG, FINISHED_YOUNG)):
        driver = Driver(ledger, reads, agent)
        assert (await driver.ensure()).outcome is CommandOutcome.APPLIED
        # Both ways round: finished work before and after the open work was created.
        done = await finish(driver, finished - 1)
        work = await open_work(driver)
        done += await finish(driver, 1, start=finished - 1)
        await driver.tool("PickWorkItem", work_item_id=work[0])
        made[agent] = (done, work)
    return made


def item_docs(docs: list[Any]) -> tuple[int, int]:
    """(documents, bytes) of WorkItem JSON as Redis returned them."""
    return len(docs), sum(len(d) for d in docs)


# ---------------------------------------------------------------- the split itself


async def test_finished_items_leave_the_open_hash_in_the_commit_that_ends_them(
    agents: dict[str, tuple[list[str], list[str]]], redis: AnyRedis, names: Names
) -> None:
    done, work = agents[OLD]
    open_ids = {k.decode() for k in await redis.hkeys(names.items(OLD))}
    finished_ids = {k.decode() for k in await redis.hkeys(names.items_finished(OLD))}
    assert open_ids == set(work)
    assert finished_ids == set(done)
    # The finished index orders them by when they finished: the order they were ended in.
    indexed = [m.decode() for m in await redis.zrange(names.finished_index(OLD), 0, -1)]
    assert indexed == done
    states = {orjson.loads(d)["state"] for d in await redis.hvals(names.items_finished(OLD))}
    assert states == {"completed"}


async def test_a_finished_item_still_answers_by_id(
    agents: dict[str, tuple[list[str], list[str]]], ledger: LedgerService, reads: ReadModel
) -> None:
    done, _ = agents[OLD]
    view = await reads.get_work_item(OLD, GetWorkItemInput(work_item_id=done[0]))
    assert view["work_item"]["state"] == "completed"
    listed = await reads.list_work_items(
        OLD, ListWorkItemsInput(filter=ListFilter.COMPLETED, limit=5)
    )
    assert listed["total_matching"] == FINISHED_OLD
    assert len(listed["work_items"]) == 5
    # The ledger loads a named finished item from the finished hash: refused as not open.
    driver = Driver(ledger, reads, OLD)
    reply = await driver.tool("UpdateWorkItem", work_item_id=done[0], objective="again")
    assert reply.error is not None
    assert reply.error.kind is ErrorKind.WORK_ITEM_NOT_OPEN


# ---------------------------------------------------------------- hot paths


async def opening_of(redis: AnyRedis, names: Names, agent: str) -> tuple[Opening, int, int]:
    """The opening a turn reads (the very reads queued behind the lease), and the WorkItem
    documents and bytes in the answer."""
    pipe = redis.pipeline(transaction=False)
    queue_reads(names, agent)(pipe)
    answers = await pipe.execute()
    open_docs, (_, recent_docs) = answers[1], answers[2]
    docs, size = item_docs([*open_docs, *recent_docs])
    return Opening.decode(answers), docs, size


async def test_a_turns_opening_reads_open_items_and_the_recent_few_only(
    agents: dict[str, tuple[list[str], list[str]]], redis: AnyRedis, names: Names
) -> None:
    old, old_docs, old_bytes = await opening_of(redis, names, OLD)
    young, young_docs, young_bytes = await opening_of(redis, names, YOUNG)
    assert old_docs == young_docs == 3 + RECENT_SHOWN
    assert abs(old_bytes - young_bytes) < len(REPORT)
    assert {i.id for i in old.items if i.is_open} == set(agents[OLD][1])
    # The summary says how many there are, showing the newest few.
    assert old.completed_total == FINISHED_OLD // 2
    assert young.completed_total == FINISHED_YOUNG // 2
    assert old.record is not None
    text = summary_text(old.record.state, old.items, old.waits, utc_now(), **_total(old))
    shown = min(RECENT_SHOWN, FINISHED_OLD // 2)
    assert f"## Recently completed (showing {shown} of {FINISHED_OLD // 2})" in text
    assert f"finished {FINISHED_OLD - 1:04d}" in text  # the newest, finished last


def _total(opening: Opening) -> dict[str, int]:
    return {"completed_total": opening.completed_total}


async def test_an_interrupted_turns_second_read_is_bounded_too(
    agents: dict[str, tuple[list[str], list[str]]], reads: ReadModel
) -> None:
    old = await TurnItems.read(reads, OLD)
    young = await TurnItems.read(reads, YOUNG)
    assert len(old.items) == len(young.items) == 3 + RECENT_SHOWN
    assert old.completed_total == FINISHED_OLD // 2


async def test_the_scheduler_snapshot_reads_heads_not_the_finished_store(
    agents: dict[str, tuple[list[str], list[str]]],
    redis: AnyRedis,
    names: Names,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, AgentRow] = {}
    real = snapshots.snapshot_rows

    def recording(raw: Any) -> list[AgentRow | None]:
        rows = real(raw)
        for row in rows:
            if row is not None:
                seen[orjson.loads(row.doc)["state"]["agent_id"]] = row
        return rows

    monkeypatch.setattr(snapshots, "snapshot_rows", recording)
    views = await snapshots.SnapshotReader(redis, names).load([OLD, YOUNG])
    old_docs, old_bytes = item_docs(seen[OLD].items)
    young_docs, young_bytes = item_docs(seen[YOUNG].items)
    assert old_docs == young_docs
    assert abs(old_bytes - young_bytes) < len(REPORT)
    # The counts still cover every finished item, from the index sizes.
    counts = views[OLD].index_counts
    assert counts["completed_recent"] + counts["completed"] == FINISHED_OLD


async def test_the_ledger_load_reads_named_items_only(
    agents: dict[str, tuple[list[str], list[str]]], redis: AnyRedis, names: Names
) -> None:
    store = LedgerStore(redis, names)

    async def loaded(agent: str, work_item_id: str) -> tuple[int, int]:
        cmd = c.AppendOperatorMessage(
            command_id=f"probe-{agent}",
            agent_id=agent,
            message_id="m",
            text="hello",
            work_item_id=work_item_id or None,
        )
        keys, args = store.load_call(cmd)
        reply = LoadReply.parse(await redis.fcall_ro(Fn.LOAD, len(keys), *keys, *args))  # type: ignore[misc]
        return item_docs(reply.items)

    assert await loaded(OLD, "") == (1, await _size(redis, names, OLD, agents[OLD][1][0]))
    assert (await loaded(YOUNG, ""))[0] == 1  # the current item only
    # A command naming a finished item loads that one from the finished hash, nothing more.
    named = agents[OLD][0][0]
    docs, _ = await loaded(OLD, named)
    assert docs == 2  # the named item and the current one


async def _size(redis: AnyRedis, names: Names, agent: str, work_item_id: str) -> int:
    doc = await redis.hget(names.items(agent), work_item_id)
    assert doc is not None
    return len(doc)


async def test_the_chaos_check_finds_an_item_stored_against_its_state(
    agents: dict[str, tuple[list[str], list[str]]], redis: AnyRedis, names: Names
) -> None:
    """What the ledger wrote passes the chaos run's storage check; a finished item copied back
    into the open hash (what a hot read must never meet) and an index entry missing fail it."""
    clean = Findings()
    stored = await stored_items(redis, names, OLD, clean)
    assert clean.violations == []
    assert len(stored) == FINISHED_OLD + 3
    done, _ = agents[OLD]
    doc = await redis.hget(names.items_finished(OLD), done[0])
    assert doc is not None
    await redis.hset(names.items(OLD), done[0], doc)
    await redis.zrem(names.finished_index(OLD), done[1])
    found = Findings()
    await stored_items(redis, names, OLD, found)
    assert len(found.violations) == 2
    assert done[0] in found.violations[0]
    assert done[1] in found.violations[1]
