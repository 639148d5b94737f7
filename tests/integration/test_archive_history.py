"""History segments with the services as processes (contract §23): the scheduler's archiver
writes a segment, the ledger drops the hot copies; reads and verify go across the boundary; a
kill -9 of the archiver between the file and the commit, or of the ledger during the commit,
loses and repeats nothing; an edited segment fails verify at its first bad seq."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from shared.domain.archive import SegmentManifest, segment_lines
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.archive_checks import disk_seqs, events_once
from tests.integration.conftest import ServiceProcess
from tests.integration.stack import INGRESS, LEDGER, OPERATOR_TOKEN, SCHEDULER, history, poll

HOT = "20"
"""LONGRUN_HOT_EVENTS: a segment every 16 events past 20."""
AGENT = "archivist"
Spawn = Callable[..., ServiceProcess]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "LONGRUN_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "LONGRUN_HOT_EVENTS": HOT,
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


async def _grow(http: httpx.AsyncClient, messages: int) -> None:
    """History events by way of operator messages to an agent with its own loop."""
    created = await http.put(f"/v1/agents/{AGENT}", json={"loop": "external"})
    assert created.status_code in (200, 201), created.text

    async def send(n: int) -> None:
        sent = await http.post(f"/v1/agents/{AGENT}/messages", json={"text": f"note {n}"})
        assert sent.status_code == 202, sent.text

    for start in range(0, messages, 10):
        await asyncio.gather(*(send(n) for n in range(start, min(start + 10, messages))))


async def _segments(redis: AnyRedis, names: Names) -> list[SegmentManifest]:
    docs = await redis.lrange(names.segments(AGENT), 0, -1)
    return [SegmentManifest.model_validate_json(d) for d in docs]


async def _settled(redis: AnyRedis, names: Names, archive: Path) -> None:
    """Until the hot history is back within its limit and each event is held once."""

    async def settled() -> bool:
        hot = await redis.llen(names.history(AGENT))
        return hot <= int(HOT) and not await events_once(redis, names, archive, AGENT)

    await poll(settled, "every event exactly once across archive and hot")


async def _whole(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    events = await history(http, AGENT)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    return events


async def test_history_reads_and_verifies_across_the_archive(
    spawn: Spawn, redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    env = _env(tmp_path)
    procs = [spawn(*LEDGER, **env), spawn(*INGRESS, **env), spawn(*SCHEDULER, **env)]
    await _ready(*procs)
    archive = tmp_path / "archive"
    async with _http(procs[1]) as http:
        await _grow(http, 60)
        await _settled(redis, names, archive)
        segments = await _segments(redis, names)
        assert len(segments) >= 2
        # The chain goes on across each boundary: a segment starts where the one before ended.
        for before, after in itertools.pairwise(segments):
            assert after.first_seq == before.last_seq + 1
            assert after.first_prev_hash == before.last_hash
        first_hot = orjson.loads(await redis.lindex(names.history(AGENT), 0))
        assert first_hot["seq"] == segments[-1].last_seq + 1
        assert first_hot["prev_hash"] == segments[-1].last_hash
        events = await _whole(http)
        types = [e["type"] for e in events]
        assert types.count("history_archived") == len(segments)
        page = (await http.get(f"/v1/agents/{AGENT}/history", params={"after": 10})).json()
        assert page["events"][0]["seq"] == 11  # a page that starts inside a segment
        verified = (await http.get(f"/v1/agents/{AGENT}/history/verify")).json()
        assert verified["ok"] is True, verified
        assert verified["count"] == len(events)
        assert verified["archived"] == segments[-1].last_seq
        assert verified["head"] == events[-1]["hash"]
        # An edited segment: verify names the first event whose hash does not recompute.
        path = archive / AGENT / segments[0].segment
        lines = segment_lines(path.read_bytes())
        edited = orjson.loads(lines[6])
        edited["data"]["text"] = "not what the operator wrote"
        lines[6] = orjson.dumps(edited)
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        broken = (await http.get(f"/v1/agents/{AGENT}/history/verify")).json()
        assert (broken["ok"], broken["first_bad_seq"]) == (False, 7), broken


async def test_kill_9_of_the_archiver_between_the_segment_and_its_commit(
    spawn: Spawn, redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    """The state a kill between the two phases leaves: the segment file written and fsynced,
    its CommitArchive never sent (the ledger is held so the command waits in its stream, the
    archiver is killed, the command removed). Reads prefer hot. The next archiver runs with a
    smaller limit (its segments are cut smaller), so the file left behind is never committed:
    once the archive passes its first event it is removed, and each event is held once."""
    env = _env(tmp_path)
    ledger, ingress = spawn(*LEDGER, **env), spawn(*INGRESS, **env)
    await _ready(ledger, ingress)
    archive = tmp_path / "archive"
    async with _http(ingress) as http:
        await _grow(http, 30)
        before = await _whole(http)
        assert ledger.proc is not None
        ledger.proc.send_signal(signal.SIGSTOP)
        scheduler = spawn(*SCHEDULER, **env)
        await _ready(scheduler)
        sent = await poll(lambda: _commit_entries(redis, names), "the CommitArchive sent")
        assert disk_seqs(archive, AGENT) == list(range(1, 17))
        scheduler.kill9()
        await _unsend(redis, names, sent)
        ledger.proc.send_signal(signal.SIGCONT)
        # Both copies: the file and every hot event; reads prefer hot, so nothing doubles.
        assert await redis.llen(names.history(AGENT)) == len(before)
        assert await _segments(redis, names) == []
        assert await _whole(http) == before
        await _ready(spawn(*SCHEDULER, **{**env, "LONGRUN_HOT_EVENTS": "10"}))
        await _settled(redis, names, archive)
        after = await _whole(http)
        assert after[: len(before)] == before
        segments = await _segments(redis, names)
        assert [(m.first_seq, m.last_seq) for m in segments[:2]] == [(1, 8), (9, 16)]
        files = sorted(p.name for p in (archive / AGENT / "history").glob("*.jsonl"))
        assert files == sorted(Path(m.segment).name for m in segments)
        verified = (await http.get(f"/v1/agents/{AGENT}/history/verify")).json()
        assert verified["ok"] is True, verified
        assert verified["archived"] == segments[-1].last_seq


async def _commit_entries(redis: AnyRedis, names: Names) -> list[tuple[str, bytes]]:
    """(stream, entry id) of every CommitArchive in the command streams."""
    found = []
    for p in range(names.partitions):
        for entry_id, fields in await redis.xrange(names.commands(p)):
            if b"commit_archive" in fields[b"m"]:
                found.append((names.commands(p), entry_id))
    return found


async def _unsend(redis: AnyRedis, names: Names, sent: list[tuple[str, bytes]]) -> None:
    """As if the commands had never been sent: gone from the streams and any pending list."""
    for stream, entry_id in sent:
        await redis.xack(stream, "ledger", entry_id)
        await redis.xdel(stream, entry_id)


async def test_kill_9_of_the_ledger_during_the_commit(
    spawn: Spawn, redis: AnyRedis, names: Names, tmp_path: Path
) -> None:
    """The ledger holding a CommitArchive dies before applying it; another takes the command
    over (reclaimed or read), applies it once, and the archiver's resend is a duplicate."""
    env = _env(tmp_path)
    ledger, ingress = spawn(*LEDGER, **env), spawn(*INGRESS, **env)
    await _ready(ledger, ingress)
    archive = tmp_path / "archive"
    async with _http(ingress) as http:
        await _grow(http, 30)
        assert ledger.proc is not None
        ledger.proc.send_signal(signal.SIGSTOP)
        await _ready(spawn(*SCHEDULER, **env))
        await poll(lambda: _commit_entries(redis, names), "the CommitArchive sent")
        ledger.kill9()
        await _ready(spawn(*LEDGER, **env))
        await _settled(redis, names, archive)
        events = await _whole(http)
        archived = [e for e in events if e["type"] == "history_archived"]
        assert [e["data"]["upto_seq"] for e in archived] == [16]
        verified = (await http.get(f"/v1/agents/{AGENT}/history/verify")).json()
        assert verified["ok"] is True, verified
        assert verified["archived"] == 16
