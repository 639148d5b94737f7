"""Finished WorkItems leave Redis for the archive with the services as processes (contract §23):
the scheduler's archiver writes each WorkItem's file (with its briefs and delivery summary) and a
batch manifest, the ledger drops the hot copies; the finished list, GetWorkItem, the briefs and
the console read across; every mutating tool on an archived id is 409 `work_item_not_open`; a
kill -9 of the archiver between the files and the commit, or of the ledger during the commit,
leaves every WorkItem exactly once across archive and Redis."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from services.scheduler.archiver import ArchiveLimits, Archiver
from shared.archive.items import ItemFiles
from shared.domain.archive import ORPHAN_AGE_S, ItemBatchEntry, item_batch, item_path
from shared.domain.readouts import work_item_json
from shared.ledger_client import LedgerClient
from shared.metrics import build_metrics
from shared.store.archived import FinishedItems, Position, encode_cursor
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.archive_checks import committed_item_ids, hot_item_ids, items_once
from tests.builders import make_work_item, work_item_id
from tests.integration.conftest import ServiceProcess
from tests.integration.stack import INGRESS, LEDGER, OPERATOR_TOKEN, SCHEDULER, history, poll

HOT_FINISHED = 5
"""LONGRUN_HOT_FINISHED: past 5 finished WorkItems, the oldest leave down to 4."""
ITEMS = 12
AGENT = "item-archivist"
Spawn = Callable[..., ServiceProcess]
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')

pytestmark = pytest.mark.timeout(300)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "LONGRUN_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "LONGRUN_HOT_FINISHED": str(HOT_FINISHED),
        "LONGRUN_ARCHIVE_INTERVAL_S": "0.2",
        "LONGRUN_ARCHIVE_DIR": str(tmp_path / "archive"),
        **extra,
    }


async def _ready(*procs: ServiceProcess) -> None:
    for proc in procs:
        await proc.wait_ready()


def _http(ingress: ServiceProcess) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{ingress.port}",
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        timeout=30,
    )


async def _tool(http: httpx.AsyncClient, tool: str, text: str | None = None, **args: Any) -> Any:
    body: dict[str, Any] = {"args": args}
    if text is not None:
        body["assistant_text"] = text
    return await http.post(f"/v1/agents/{AGENT}/tools/{tool}", json=body)


async def _finish(http: httpx.AsyncClient, count: int) -> list[str]:
    """`count` WorkItems created and completed with a report each (a result brief and a
    delivery summary), in order; their ids."""
    created = await http.put(f"/v1/agents/{AGENT}", json={"loop": "external"})
    assert created.status_code in (200, 201), created.text
    ids = []
    for n in range(count):
        made = await _tool(http, "CreateWorkItem", objective=f"Item {n}")
        assert made.status_code == 200, made.text
        ids.append(made.json()["result"]["work_item"]["id"])
        done = await _tool(http, "CompleteWorkItem", f"Report of item {n}", work_item_id=ids[-1])
        assert done.status_code == 200, done.text
    return ids


async def _settled(redis: AnyRedis, names: Names, archive: Path, ids: list[str]) -> list[str]:
    """Until the archive holds every WorkItem past the limit, each WorkItem once; the ids
    archived."""

    async def settled() -> list[str] | None:
        committed = await committed_item_ids(redis, names, archive, AGENT)
        if len(committed) < ITEMS - HOT_FINISHED:
            return None
        if await items_once(redis, names, archive, AGENT, set(ids)):
            return None
        return committed

    return await poll(settled, "every WorkItem exactly once across archive and hot")


async def _finished_pages(http: httpx.AsyncClient, limit: int) -> list[dict[str, Any]]:
    views: list[dict[str, Any]] = []
    params: dict[str, Any] = {"state": "finished", "limit": limit}
    while True:
        page = await http.get(f"/v1/agents/{AGENT}/work-items", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["total_matching"] == ITEMS
        views += body["work_items"]
        if body["next_cursor"] is None:
            return views
        params["cursor"] = body["next_cursor"]


async def _console(ingress: ServiceProcess, paths: list[str]) -> None:
    """Each console page answers 200 to a signed-in operator."""
    url = f"http://127.0.0.1:{ingress.port}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as browser:
        form = await browser.get("/ui/login")
        match = CSRF.search(form.text)
        assert match is not None, form.text
        signed = await browser.post(
            "/ui/login", data={"csrf_token": match.group(1), "token": OPERATOR_TOKEN, "next": "/ui"}
        )
        assert signed.status_code == 303, signed.text
        for path in paths:
            page = await browser.get(path)
            assert page.status_code == 200, (path, page.text[:500])


async def test_finished_items_read_the_same_from_the_archive(
    spawn: Spawn, redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    procs = [spawn(*LEDGER, **env), spawn(*INGRESS, **env)]
    await _ready(*procs)
    archive = tmp_path / "archive"
    async with _http(procs[1]) as http:
        ids = await _finish(http, ITEMS)
        # The archiver starts once all are finished, so that they leave in one batch.
        await _ready(spawn(*SCHEDULER, **env))
        archived = await _settled(redis, names, archive, ids)
        # The oldest left, in one batch (down to four fifths of the limit), nothing else.
        assert archived == ids[: ITEMS - HOT_FINISHED + 1]
        hot = await hot_item_ids(redis, names, AGENT)
        assert hot == set(ids[ITEMS - HOT_FINISHED + 1 :])
        # Their briefs and summaries left with them.
        for key in (names.briefs(AGENT), names.summaries(AGENT)):
            left = b"".join(await redis.lrange(key, 0, -1))
            assert not [i for i in archived if i.encode() in left]
        # The finished list: newest first, Redis then the archive, each once, in pages.
        for limit in (1, 3, 100):
            views = await _finished_pages(http, limit)
            assert [v["id"] for v in views] == ids[::-1]
            assert [v["archived"] for v in views] == [i in archived for i in ids[::-1]]
        # GetWorkItem of an archived id, and its briefs.
        old = archived[0]
        got = await http.get(
            f"/v1/agents/{AGENT}/work-items/{old}", params={"include_process_notes": True}
        )
        assert got.status_code == 200, got.text
        assert got.json()["archived"] is True
        assert got.json()["work_item"]["outcome"] == "done"
        assert got.json()["work_item"]["archived"] is True
        why = await http.get(f"/v1/agents/{AGENT}/work-items/{old}/why")
        assert why.status_code == 200, why.text
        assert why.json()["reason"] == "completed", why.text
        tool = await _tool(http, "GetWorkItem", work_item_id=old)
        assert tool.status_code == 200, tool.text
        assert tool.json()["result"]["archived"] is True
        briefs = (await http.get(f"/v1/agents/{AGENT}/briefs", params={"work_item_id": old})).json()
        assert [b["text"] for b in briefs["briefs"]] == ["Report of item 0"]
        assert [s["work_item_id"] for s in briefs["delivery_summaries"]] == [old]
        # Every brief, in pages: those in Redis, then the archived ones, newest first.
        for limit in (1, 5, 100):
            walked: list[dict[str, Any]] = []
            summaries: set[str] = set()
            params: dict[str, Any] = {"limit": limit, "kind": "result"}
            while True:
                page = (await http.get(f"/v1/agents/{AGENT}/briefs", params=params)).json()
                walked += page["briefs"]
                summaries |= {s["work_item_id"] for s in page["delivery_summaries"]}
                if page["next_cursor"] is None:
                    break
                params["cursor"] = page["next_cursor"]
            assert [b["text"] for b in walked] == [f"Report of item {n}" for n in range(11, -1, -1)]
            assert summaries == set(ids)
        # Every mutating tool on an archived id: 409 work_item_not_open.
        for tool_name, args in (
            ("UpdateWorkItem", {"objective": "Again"}),
            ("PickWorkItem", {}),
            ("CompleteWorkItem", {}),
            ("CancelWorkItem", {"reason": "Not needed"}),
            ("WaitFor", {"reason": "Later", "wake": "operator_input"}),
            ("SubmitVerdict", {"passed": True, "reason": "Fine"}),
        ):
            refused = await _tool(http, tool_name, work_item_id=old, **args)
            assert refused.status_code == 409, (tool_name, refused.text)
            assert refused.json()["error"]["kind"] == "work_item_not_open", refused.text
        # And the operator's routes that change a WorkItem.
        for action, body in (("cancel", {"reason": "Not needed"}), ("verdict", {"passed": True})):
            refused = await http.post(f"/v1/agents/{AGENT}/work-items/{old}/{action}", json=body)
            assert refused.status_code == 409, (action, refused.text)
            assert refused.json()["error"]["kind"] == "work_item_not_open", refused.text
        # Bad input: a cursor from another agent, a forged one, a limit out of range.
        other = encode_cursor("someone-else", Position(1, old))
        for params in (
            {"cursor": other},
            {"cursor": "forged!"},
            {"limit": 0},
            {"limit": 1001},
        ):
            bad = await http.get(
                f"/v1/agents/{AGENT}/work-items", params={"state": "finished", **params}
            )
            assert bad.status_code == 400, (params, bad.text)
            assert bad.json()["error"]["details"]["field"] == next(iter(params)), bad.text
        # The history says what left, and the console's pages still read.
        events = await history(http, AGENT)
        moved = [e for e in events if e["type"] == "work_items_archived"]
        assert [tuple(e["data"]["work_item_ids"]) for e in moved] == [tuple(archived)]
        await _console(
            procs[1],
            [
                f"/ui/agents/{AGENT}",
                f"/ui/agents/{AGENT}/history",
                f"/ui/agents/{AGENT}/work-items/{old}",
                f"/ui/agents/{AGENT}/work-items/{ids[-1]}",
            ],
        )


async def _commit_entries(redis: AnyRedis, names: Names) -> list[tuple[str, bytes]]:
    """(stream, entry id) of every CommitItemArchive in the command streams."""
    found = []
    for p in range(names.partitions):
        for entry_id, fields in await redis.xrange(names.commands(p)):
            if b"commit_item_archive" in fields[b"m"]:
                found.append((names.commands(p), entry_id))
    return found


async def _unsend(redis: AnyRedis, names: Names, sent: list[tuple[str, bytes]]) -> None:
    """As if the commands had never been sent: gone from the streams and any pending list."""
    for stream, entry_id in sent:
        await redis.xack(stream, "ledger", entry_id)
        await redis.xdel(stream, entry_id)


async def test_kill_9_of_the_archiver_between_the_files_and_the_commit(
    spawn: Spawn, redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    """The state a kill between the two phases leaves: the files written and fsynced, the
    CommitItemArchive never sent (the ledger is held so the command waits in its stream, the
    archiver is killed, the command removed). Both copies; reads prefer Redis. The next
    archiver commits the same batch once."""
    env = _env(tmp_path)
    ledger, ingress = spawn(*LEDGER, **env), spawn(*INGRESS, **env)
    await _ready(ledger, ingress)
    archive = tmp_path / "archive"
    async with _http(ingress) as http:
        ids = await _finish(http, ITEMS)
        assert ledger.proc is not None
        ledger.proc.send_signal(signal.SIGSTOP)
        scheduler = spawn(*SCHEDULER, **env)
        await _ready(scheduler)
        sent = await poll(lambda: _commit_entries(redis, names), "the CommitItemArchive sent")
        due = ids[: ITEMS - HOT_FINISHED + 1]
        assert all((archive / AGENT / item_path(i)).is_file() for i in due)
        scheduler.kill9()
        await _unsend(redis, names, sent)
        ledger.proc.send_signal(signal.SIGCONT)
        # Both copies: the files and every WorkItem in Redis; reads prefer Redis.
        assert await hot_item_ids(redis, names, AGENT) == set(ids)
        assert await redis.llen(names.item_batches(AGENT)) == 0
        got = (await http.get(f"/v1/agents/{AGENT}/work-items/{due[0]}")).json()
        assert "archived" not in got
        views = await _finished_pages(http, 100)
        assert [v["id"] for v in views] == ids[::-1]
        assert not any(v["archived"] for v in views)
        await _ready(spawn(*SCHEDULER, **env))
        assert await _settled(redis, names, archive, ids) == due
        views = await _finished_pages(http, 4)
        assert [v["id"] for v in views] == ids[::-1]
        events = await history(http, AGENT)
        assert len([e for e in events if e["type"] == "work_items_archived"]) == 1


async def test_kill_9_of_the_ledger_during_the_commit(
    spawn: Spawn, redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    """The ledger holding a CommitItemArchive dies before applying it; another takes the
    command over, applies it once, and the archiver's resend is a duplicate."""
    env = _env(tmp_path)
    ledger, ingress = spawn(*LEDGER, **env), spawn(*INGRESS, **env)
    await _ready(ledger, ingress)
    archive = tmp_path / "archive"
    async with _http(ingress) as http:
        ids = await _finish(http, ITEMS)
        assert ledger.proc is not None
        ledger.proc.send_signal(signal.SIGSTOP)
        await _ready(spawn(*SCHEDULER, **env))
        await poll(lambda: _commit_entries(redis, names), "the CommitItemArchive sent")
        ledger.kill9()
        await _ready(spawn(*LEDGER, **env))
        due = ids[: ITEMS - HOT_FINISHED + 1]
        assert await _settled(redis, names, archive, ids) == due
        entries = await redis.lrange(names.item_batches(AGENT), 0, -1)
        assert len(entries) == 1
        assert ItemBatchEntry.model_validate_json(entries[0]).items == len(due)
        # Give a resend time to arrive: still one batch, one event.
        await asyncio.sleep(0)
        events = await history(http, AGENT)
        moved = [e for e in events if e["type"] == "work_items_archived"]
        assert [tuple(e["data"]["work_item_ids"]) for e in moved] == [tuple(due)]
        views = await _finished_pages(http, 5)
        assert [v["id"] for v in views] == ids[::-1]


async def test_a_sweep_removes_only_files_no_commit_can_name(
    redis: AnyRedis, names: Names, client: LedgerClient, tmp_path: Path
) -> None:
    """The files of a batch never committed (its WorkItems still in Redis, its manifest not in
    `item-batches`) go once an hour old, when the ledger no longer takes their commit; the
    files of a committed batch stay; younger leftovers stay (their commit may be under way)."""
    archive = tmp_path / "archive"
    now = [datetime.now(UTC)]
    archiver = Archiver(
        redis,
        names,
        client,
        archive,
        build_metrics(CollectorRegistry()),
        limits=ArchiveLimits(),
        clock=lambda: now[0],
    )
    files = ItemFiles(archive)
    committed, leftover = (
        item_batch(
            AGENT,
            [(work_item_id(n), b'{"state":"completed"}', n) for n in numbers],
            briefs=[],
            reply_briefs=[],
            summaries=[],
        )
        for numbers in ((1, 2), (3, 4))
    )
    for batch in (committed, leftover):
        files.write(AGENT, batch)
    await redis.rpush(names.item_batches(AGENT), committed.entry().model_dump_json())
    await redis.zadd(names.finished_index(AGENT), {work_item_id(3): 3, work_item_id(4): 4})
    every = sorted(str(p.relative_to(archive / AGENT)) for p in (archive / AGENT).rglob("*.json"))
    await archiver._drop_item_orphans(AGENT)
    assert (
        sorted(str(p.relative_to(archive / AGENT)) for p in (archive / AGENT).rglob("*.json"))
        == every
    )
    now[0] += timedelta(seconds=ORPHAN_AGE_S + 1)
    await archiver._drop_item_orphans(AGENT)
    left = sorted(str(p.relative_to(archive / AGENT)) for p in (archive / AGENT).rglob("*.json"))
    assert left == sorted(
        [committed.manifest.name, item_path(work_item_id(1)), item_path(work_item_id(2))]
    )


async def test_a_work_item_archived_between_the_two_reads_of_a_page_is_listed_once(
    redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    """The finished index still names B but the hash no longer holds it (its batch committed
    between the page's two reads): the page shows it from the archive, in its place."""
    archive = tmp_path / "archive"
    docs = {
        n: orjson.dumps(
            work_item_json(make_work_item(id=work_item_id(n), state="completed", outcome="done")),
            option=orjson.OPT_SORT_KEYS,
        )
        for n in (1, 2, 3)
    }
    batch = item_batch(
        AGENT, [(work_item_id(2), docs[2], 2000)], briefs=[], reply_briefs=[], summaries=[]
    )
    ItemFiles(archive).write(AGENT, batch)
    await redis.rpush(names.item_batches(AGENT), batch.entry().model_dump_json())
    await redis.zadd(
        names.finished_index(AGENT),
        {work_item_id(1): 1000, work_item_id(2): 2000, work_item_id(3): 3000},
    )
    await redis.hset(
        names.items_finished(AGENT), mapping={work_item_id(1): docs[1], work_item_id(3): docs[3]}
    )
    reads = FinishedItems(redis, names, ItemFiles(archive))
    page = await reads.page(AGENT, limit=3, after=None, current=None)
    shown = [(v["id"], v["archived"]) for v in page["work_items"]]
    assert shown == [(work_item_id(3), False), (work_item_id(2), True), (work_item_id(1), False)]
