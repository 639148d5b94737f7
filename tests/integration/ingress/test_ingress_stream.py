"""Ingress as a real process beside a real ledger process: the `<prefix>:callbacks` consumer
triggers waits for valid entries, dead-letters bad ones with the reason and keeps going,
shares delivery ids with HTTP, reads entries older than its group, reclaims a dead consumer's
pending entries; and the process refuses to start without an operator token."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as sync_redis

from shared.consumer import DELIVERY_CAP
from shared.domain.records import WaitingIntent
from shared.store.client import AnyRedis, connect
from shared.streams import ensure_groups
from shared.wire.names import Group, Names
from tests.integration.conftest import ServiceProcess, free_port, service_process
from tests.integration.ingress.conftest import (
    OPERATOR_TOKEN,
    STOPPED,
    new_agent_id,
    stack_env,
    start_ingress,
    until,
)

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


async def external_wait(http: httpx.AsyncClient) -> tuple[str, str, str]:
    """(agent id, wait id, capability token) of a new agent's fresh external wait."""
    agent_id = new_agent_id()
    assert (await http.put(f"/v1/agents/{agent_id}", headers=OPERATOR)).status_code == 201
    answer = await http.post(
        f"/v1/agents/{agent_id}/tools/WaitFor",
        headers=OPERATOR,
        json={"args": {"reason": "waiting for the deploy", "wake": "external"}},
    )
    wait = answer.json()["result"]["wait"]
    return agent_id, wait["id"], wait["callback_url"].rsplit("/", 1)[1]


async def triggers(redis: AnyRedis, names: Names, agent_id: str, wait_id: str) -> int:
    raw = await redis.hget(names.waits(agent_id), wait_id)
    assert raw is not None
    return WaitingIntent.model_validate_json(raw).trigger_count


async def dead_letters(redis: AnyRedis, names: Names, ids: set[str]) -> dict[str, dict[str, str]]:
    entries = await redis.xrange(names.dead_letter)
    found = {}
    for _, fields in entries:
        decoded = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
        if decoded.get("source_id") in ids:
            found[decoded["source_id"]] = decoded
    return found


async def test_stream_entries_trigger_and_bad_ones_are_dead_lettered_without_stopping(
    http: httpx.AsyncClient, redis: AnyRedis, names: Names
) -> None:
    agent_id, wait_id, token = await external_wait(http)
    stream = names.callbacks
    good = {"token": token, "content_type": "application/json", "body": b'{"ok": 1}'}
    bad_entries: list[tuple[str, dict[str, Any]]] = [
        ("invalid_request: missing token", {"body": b"x", "delivery_id": "b1"}),
        ("invalid_request: missing delivery_id", {"token": token, "body": b"x"}),
        (
            "invalid_request: the content type is JSON but the body is not",
            {**good, "body": b"{nope", "delivery_id": "b3"},
        ),
        (
            "forbidden: unknown capability token",
            {"token": f"{agent_id}~wrong-wrong-wrong-wrong", "delivery_id": "b4"},
        ),
        ("invalid_request: missing token", {"__data__": b"\x89FS\x00\x01garbage"}),
    ]
    await redis.xadd(stream, {**good, "delivery_id": "g1"})
    bad_ids = {}
    for reason, fields in bad_entries:
        bad_ids[(await redis.xadd(stream, fields)).decode()] = reason
    await redis.xadd(stream, {"token": token, "body": bytes([255, 0]), "delivery_id": "g2"})
    await redis.xadd(stream, {**good, "delivery_id": "g1"})  # a duplicate
    await until(lambda: _equals(triggers(redis, names, agent_id, wait_id), 2))
    found = await _until_dead_lettered(redis, names, set(bad_ids))
    for source_id, reason in bad_ids.items():
        entry = found[source_id]
        assert entry["reason"].startswith(reason), entry
        assert entry["source_stream"] == stream
    assert found[_key_of(bad_ids, "invalid_request: missing delivery_id")]["token"] == token
    await until(lambda: _equals(_pending(redis, names), 0))
    # The consumer kept going: a later entry is still applied.
    await redis.xadd(stream, {"token": token, "body": b"later", "delivery_id": "g3"})
    await until(lambda: _equals(triggers(redis, names, agent_id, wait_id), 3))
    assert (await http.get("/readyz")).status_code == 200


async def test_a_delivery_id_is_one_key_across_stream_and_http(
    http: httpx.AsyncClient, redis: AnyRedis, names: Names
) -> None:
    agent_id, wait_id, token = await external_wait(http)
    await redis.xadd(names.callbacks, {"token": token, "body": b"s", "delivery_id": "both-1"})
    await until(lambda: _equals(triggers(redis, names, agent_id, wait_id), 1))
    again = await http.post(
        f"/v1/callbacks/{token}", content=b"s", headers={"Idempotency-Key": "both-1"}
    )
    assert again.json()["disposition"] == "duplicate"
    first_http = await http.post(
        f"/v1/callbacks/{token}", content=b"h", headers={"Idempotency-Key": "both-2"}
    )
    assert first_http.json()["disposition"] == "triggered"
    await redis.xadd(names.callbacks, {"token": token, "body": b"h", "delivery_id": "both-2"})
    await redis.xadd(names.callbacks, {"token": token, "body": b"z", "delivery_id": "both-3"})
    await until(lambda: _equals(triggers(redis, names, agent_id, wait_id), 3))
    await until(lambda: _equals(_pending(redis, names), 0))
    assert await triggers(redis, names, agent_id, wait_id) == 3
    metrics = (await http.get("/metrics")).text
    assert 'longrun_callbacks_total{outcome="duplicate"}' in metrics


async def test_chunked_body_over_the_limit_is_413_on_a_real_socket(
    ingress_process: ServiceProcess,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", ingress_process.port)
    head = b"POST /v1/callbacks/a~0123456789abcdefghij HTTP/1.1\r\nHost: x\r\n"
    writer.write(head + b"Transfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n")
    chunk = b"x" * 65536
    try:
        for _ in range(5):  # 320 KiB > the default 256 KiB
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass  # the server may answer and close before reading everything
    status = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    assert b" 413 " in status


async def _equals(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def _pending(redis: AnyRedis, names: Names) -> int:
    info = await redis.xpending(names.callbacks, Group.INGRESS)
    return int(info["pending"])


async def _until_dead_lettered(
    redis: AnyRedis, names: Names, ids: set[str]
) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}

    async def complete() -> bool:
        found.update(await dead_letters(redis, names, ids))
        return set(found) == ids

    await until(complete)
    return found


def _key_of(mapping: dict[str, str], value: str) -> str:
    return next(k for k, v in mapping.items() if v == value)


# ---- lifecycle: a fresh prefix per test, so groups start empty
@pytest.fixture
def lone_env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    """Env for processes on a prefix of their own (the module's ledger does not serve it)."""
    return stack_env(redis_url, f"{prefix}x{free_port()}", tmp_path / "home")


async def test_entries_older_than_the_group_and_a_dead_consumers_pending_are_consumed(
    lone_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    names = Names(prefix=lone_env["LONGRUN_PREFIX"], partitions=4)
    redis = connect(redis_url)
    ledger = service_process("services.ledger", lone_env, "LONGRUN_LEDGER_PORT", tmp_path / "l")
    ledger.start()
    try:
        await ledger.wait_ready()
        async with httpx.AsyncClient(timeout=30) as http:
            ingress = start_ingress(lone_env, tmp_path / "i1.log")
            await ingress.wait_ready()
            http.base_url = httpx.URL(f"http://127.0.0.1:{ingress.port}")
            agent_id, wait_id, token = await external_wait(http)
            assert ingress.stop() in STOPPED
            await redis.xadd(names.callbacks, {"token": token, "body": b"a", "delivery_id": "p1"})
            # A consumer that died holding an entry: it stays pending until reclaimed.
            await ensure_groups(redis, [names.callbacks], Group.INGRESS)
            await redis.xreadgroup(Group.INGRESS, "dead-one", {names.callbacks: ">"}, count=1)
            # One that every consumer died on: past the delivery cap it is dead-lettered.
            cursed = await redis.xadd(
                names.callbacks, {"token": token, "body": b"c", "delivery_id": "p3"}
            )
            await redis.xreadgroup(Group.INGRESS, "dead-two", {names.callbacks: ">"}, count=1)
            for n in range(DELIVERY_CAP):
                await redis.xclaim(names.callbacks, Group.INGRESS, f"dead-{n}", 0, [cursed])
            await redis.xadd(names.callbacks, {"token": token, "body": b"b", "delivery_id": "p2"})
            restarted = start_ingress(lone_env, tmp_path / "i2.log")
            await restarted.wait_ready()
            await until(lambda: _equals(triggers(redis, names, agent_id, wait_id), 2), 20)
            await until(lambda: _equals(_pending(redis, names), 0), 20)
            letters = {f[b"source_id"]: f for _, f in await redis.xrange(names.dead_letter)}
            reason = f"delivery_cap: {DELIVERY_CAP + 2} deliveries".encode()
            assert letters[cursed][b"reason"] == reason
            assert letters[cursed][b"delivery_id"] == b"p3"
            assert restarted.stop() in STOPPED
            assert await triggers(redis, names, agent_id, wait_id) == 2
    finally:
        ledger.stop()
        await _drop(redis, names.prefix)


async def test_several_batches_wait_on_the_ledger_at_once_and_each_entry_applies_once(
    lone_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    """LONGRUN_INGRESS_STREAM_CONSUMERS batches in flight: with the ledger stopped, three
    consumers each hold a batch waiting for the ledger's verdicts; once it is back, every entry
    triggers the wait exactly once and nothing stays pending."""
    names = Names(prefix=lone_env["LONGRUN_PREFIX"], partitions=4)
    redis = connect(redis_url)
    ledger = service_process("services.ledger", lone_env, "LONGRUN_LEDGER_PORT", tmp_path / "l")
    extra = {
        "LONGRUN_INGRESS_STREAM_CONSUMERS": "3",
        "LONGRUN_INGRESS_BATCH_SIZE": "10",
        "LONGRUN_LEDGER_TIMEOUT_S": "60",
        "LONGRUN_RECLAIM_IDLE_MS": "120000",
    }
    ledger.start()
    ingress = start_ingress(lone_env, tmp_path / "i.log", **extra)
    try:
        await ledger.wait_ready()
        async with httpx.AsyncClient(timeout=30) as http:
            await ingress.wait_ready()
            http.base_url = httpx.URL(f"http://127.0.0.1:{ingress.port}")
            agent_id, wait_id, token = await external_wait(http)
            ledger.stop()
            for n in range(60):
                await redis.xadd(names.callbacks, {"token": token, "delivery_id": f"d{n}"})

            async def holders() -> int:
                info = await redis.xpending(names.callbacks, Group.INGRESS)
                return sum(1 for c in info["consumers"] if int(c["pending"]) > 0)

            await until(lambda: _equals(holders(), 3), 20)
            assert await triggers(redis, names, agent_id, wait_id) == 0
            ledger.start()
            await ledger.wait_ready()
            await until(lambda: _equals(triggers(redis, names, agent_id, wait_id), 60), 30)
            await until(lambda: _equals(_pending(redis, names), 0), 30)
            assert await triggers(redis, names, agent_id, wait_id) == 60
            assert ingress.stop() in STOPPED
    finally:
        ingress.stop()
        ledger.stop()
        await _drop(redis, names.prefix)


async def _drop(redis: AnyRedis, prefix: str) -> None:
    keys = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ingress_refuses_to_start_without_an_operator_token(
    lone_env: dict[str, str], tmp_path: Path, workers: str
) -> None:
    """Also with several workers, whose supervisor never builds the app."""
    env = {**lone_env, "LONGRUN_HTTP_PORT": str(free_port()), "LONGRUN_INGRESS_WORKERS": workers}
    done = subprocess.run(
        [sys.executable, "-m", "services.ingress"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert b"LONGRUN_OPERATOR_TOKEN is not set" in done.stderr


async def test_readyz_fails_while_redis_is_away_and_recovers(
    lone_env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    server = await _redis_server(port, tmp_path)
    ingress = None
    try:
        env = {**lone_env, "REDIS_URL": f"redis://127.0.0.1:{port}/0"}
        ingress = start_ingress(env, tmp_path / "ingress.log")
        await ingress.wait_ready()
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ingress.port}") as http:
            answer = await http.get("/readyz")
            assert answer.status_code == 503
            assert "redis" in answer.text
            server = await _redis_server(port, tmp_path)
            await until(lambda: _status_is(http, "/readyz", 200), within=30)
    finally:
        if ingress is not None:
            ingress.stop()
        if server.returncode is None:
            server.terminate()
            await server.wait()


async def _redis_server(port: int, cwd: Path) -> asyncio.subprocess.Process:
    """A private redis-server this test owns (and stops)."""
    server = await asyncio.create_subprocess_exec(
        "redis-server",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        cwd=cwd,
        stdout=asyncio.subprocess.DEVNULL,
    )
    await asyncio.to_thread(_wait_for_port, port)
    return server


async def _status_is(http: httpx.AsyncClient, path: str, status: int) -> bool:
    return (await http.get(path)).status_code == status


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            sync_redis.Redis(port=port, socket_connect_timeout=0.2).ping()
            return
        except (sync_redis.ConnectionError, OSError):
            time.sleep(0.05)
    raise TimeoutError(f"redis-server on {port} did not start")


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(c) for c in text.split()]


def _is_worker(pid: int) -> bool:
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False


async def test_several_worker_processes_serve_one_port_and_stop_cleanly(
    *,
    redis_url: str,
    stack_prefix: str,
    agent_home: Path,
    ledger_process: ServiceProcess,
    tmp_path: Path,
    redis: AnyRedis,
    names: Names,
) -> None:
    env = stack_env(redis_url, stack_prefix, agent_home)
    ingress = start_ingress(env, tmp_path / "workers.log", LONGRUN_INGRESS_WORKERS="2")
    assert ingress.proc is not None
    try:
        await ingress.wait_ready(60)
        workers = [c for c in _children(ingress.proc.pid) if _is_worker(c)]
        assert len(workers) == 2
        base = f"http://127.0.0.1:{ingress.port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            agent_id, wait_id, token = await external_wait(http)
            for n in range(20):  # a fresh connection each: the kernel spreads them
                async with httpx.AsyncClient(base_url=base, timeout=30) as one:
                    answer = await one.post(f"/v1/callbacks/{token}", content=b"%d" % n)
                    assert "disposition" in answer.json(), (answer.status_code, answer.text)
                    assert answer.json()["disposition"] == "triggered"
            await redis.xadd(names.callbacks, {"token": token, "delivery_id": "w-stream"})
            await until(lambda: _equals(triggers(redis, names, agent_id, wait_id), 21))
    finally:
        status = ingress.stop()
    assert status in STOPPED
    assert not any(_is_worker(w) for w in workers)
