"""Signed history heads end to end, with the CLI an auditor would run: `longrun history anchor`
saves a head signed by the ledger; `longrun history verify --anchor` checks it after a restart
with a rotated key, and fails (exit 1, saying what failed) on a head checked with another key, on
tampering after the anchor, and on a whole history rewritten and re-chained in Redis."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as sync_redis

from shared.domain.history import GENESIS_HASH, seal_encoded
from shared.domain.signing import SigningKey
from shared.wire.names import Names
from tests.e2e.conftest import UpProcess, clean_env, longrun_command

AGENT = "audited"
TOKEN = "operator-" + "s" * 24


@pytest.fixture
def shared_redis() -> Iterator[tuple[str, str]]:
    """The test run's Redis and a fresh key prefix, shared by two `longrun up` runs."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = "sig" + secrets.token_hex(4)
    yield url, prefix
    client = sync_redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def start_up(tmp_path: Path, redis_url: str, prefix: str, key: SigningKey) -> UpProcess:
    tmp_path.mkdir()
    env = clean_env(
        tmp_path,
        LONGRUN_PREFIX=prefix,
        LONGRUN_SIGNING_KEY=key.private_base64(),
        LONGRUN_OPERATOR_TOKEN=TOKEN,
    )
    proc = subprocess.Popen(  # noqa: S603 - our own entry point
        [*longrun_command(), "up", "--redis-url", redis_url, "--http-port", "0"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    up = UpProcess(proc)
    up.start_reader()
    up.wait_for("longrun ready")
    assert not any(line.startswith("longrun signing-key-id") for line in up.seen)
    return up


def longrun(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LONGRUN_URL": url, "LONGRUN_OPERATOR_TOKEN": TOKEN}
    return subprocess.run(  # noqa: S603 - our own entry point
        [*longrun_command(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def add_items(url: str, count: int) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for n in range(count):
            answer = http.post(
                f"/v1/agents/{AGENT}/tools/CreateWorkItem",
                json={"args": {"objective": f"invoice {n}"}},
            )
            assert answer.status_code == 200, answer.text


def anchor(url: str, path: Path) -> dict[str, Any]:
    saved = longrun(url, "history", "anchor", AGENT)
    assert saved.returncode == 0, saved.stderr
    path.write_text(saved.stdout)
    head: dict[str, Any] = json.loads(saved.stdout)
    return head


def verify(url: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return longrun(url, "history", "verify", AGENT, "--anchor", str(path), *extra)


def rewrite_history(redis_url: str, prefix: str, edit: dict[int, dict[str, Any]]) -> None:
    """Replace the data of the events at the given indexes and re-chain everything after, the
    way an attacker with write access to Redis would: the chain stays consistent."""
    client = sync_redis.Redis.from_url(redis_url)
    key = Names(prefix=prefix).history(AGENT)
    docs = [json.loads(raw) for raw in client.lrange(key, 0, -1)]
    prev, sealed = GENESIS_HASH, []
    for index, doc in enumerate(docs):
        digest, raw = seal_encoded(
            seq=doc["seq"],
            event_type=doc["type"],
            at=_parse_at(doc["at"]),
            agent_id=doc["agent_id"],
            work_item_id=doc["work_item_id"],
            data=edit.get(index, doc["data"]),
            prev_hash=prev,
        )
        prev = digest
        sealed.append(raw)
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    pipe.rpush(key, *sealed)
    pipe.execute()
    client.close()


def tamper_event(redis_url: str, prefix: str, index: int) -> None:
    """Edit one event in place without re-chaining."""
    client = sync_redis.Redis.from_url(redis_url)
    key = Names(prefix=prefix).history(AGENT)
    doc = json.loads(client.lindex(key, index) or b"{}")
    doc["data"] = {**doc["data"], "tampered": True}
    client.lset(key, index, json.dumps(doc))
    client.close()


def _parse_at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_anchors_survive_key_rotation_and_catch_rewrites(
    tmp_path: Path, shared_redis: tuple[str, str]
) -> None:
    redis_url, prefix = shared_redis
    first_key, second_key = SigningKey.generate(), SigningKey.generate()

    first = start_up(tmp_path / "first", redis_url, prefix, first_key)
    try:
        url = first.value("longrun ready")
        assert longrun(url, "agent", "create", AGENT).returncode == 0
        add_items(url, 2)
        head1 = anchor(url, tmp_path / "head1.json")
        assert head1["key_id"] == first_key.key_id
        ok = verify(url, tmp_path / "head1.json")
        assert ok.returncode == 0, ok.stderr
        assert f"signature by key {first_key.key_id} good" in ok.stdout
    finally:
        assert first.stop() == 0
        first.close()

    # The ledger restarts with another key: heads it signs name the new key, old anchors verify
    # with the old key, which stays listed.
    second = start_up(tmp_path / "second", redis_url, prefix, second_key)
    try:
        url = second.value("longrun ready")
        add_items(url, 2)
        head2 = anchor(url, tmp_path / "head2.json")
        assert head2["key_id"] == second_key.key_id
        assert head2["seq"] > head1["seq"]
        rotated = verify(url, tmp_path / "head1.json")
        assert rotated.returncode == 0, rotated.stderr
        by_file = verify(url, tmp_path / "head1.json", "--public-key", first_key.public_key)
        assert by_file.returncode == 0, by_file.stderr

        other_key = verify(url, tmp_path / "head1.json", "--public-key", second_key.public_key)
        assert other_key.returncode == 1
        assert "signature:" in other_key.stderr

        add_items(url, 1)
        after = head2["seq"]  # 0-based index of the first event after the second anchor
        tamper_event(redis_url, prefix, after)
        tampered = verify(url, tmp_path / "head2.json")
        assert tampered.returncode == 1
        assert f"chain broken after the anchor: first bad event at index {after}" in (
            tampered.stderr
        )

        rewrite_history(redis_url, prefix, {1: {"rewritten": True}})
        plain = longrun(url, "history", "verify", AGENT)
        assert plain.returncode == 0, plain.stderr  # re-chained: the chain alone cannot tell
        for saved in ("head1.json", "head2.json"):
            caught = verify(url, tmp_path / saved)
            assert caught.returncode == 1, caught.stdout
            assert "head not on the chain" in caught.stderr
    finally:
        assert second.stop() == 0
        second.close()
