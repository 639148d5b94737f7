"""POST /v1/callbacks/{token} against a real ledger process: a capability triggers its wait
once per delivery id, a cancelled or unknown capability is 403 and changes nothing, a JSON
content type with a non-JSON body is 400 and counts nothing, bodies keep their provenance."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from prometheus_client import generate_latest

from shared.domain.capability import hash_token, token_id_of
from shared.domain.records import MessageOrigin, WaitingIntent
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire.names import Names
from tests.integration.ingress.conftest import Api


def path_of(url: str) -> str:
    return "/v1/callbacks/" + url.rsplit("/", 1)[1]


async def external_wait(api: Api, agent_id: str, reason: str = "waiting on CI") -> tuple[str, str]:
    """(wait id, callback path) of a fresh external wait."""
    answer = await api.tool(agent_id, "WaitFor", {"reason": reason, "wake": "external"})
    assert answer.status_code == 200, answer.text
    wait = answer.json()["result"]["wait"]
    assert wait["callback_url"].startswith("http://127.0.0.1:8080/v1/callbacks/")
    return wait["id"], path_of(wait["callback_url"])


async def wait_doc(redis: AnyRedis, names: Names, agent_id: str, wait_id: str) -> WaitingIntent:
    raw = await redis.hget(names.waits(agent_id), wait_id) or await redis.hget(
        names.waits_done(agent_id), wait_id
    )
    assert raw is not None
    return WaitingIntent.model_validate_json(raw)


def post(api: Api, path: str, body: bytes, content_type: str, key: str | None = None) -> Any:
    headers = {"content-type": content_type}
    if key is not None:
        headers["Idempotency-Key"] = key
    return api.http.post(path, content=body, headers=headers)


def callbacks_metric(api: Api) -> str:
    return generate_latest(api.built.app.state.registry).decode()


async def test_callback_triggers_its_wait_once_per_idempotency_key(
    api: Api, redis: AnyRedis, names: Names
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    wait_id, path = await external_wait(api, agent_id)
    first = await post(api, path, b'{"build": "green"}', "application/json", key="d-1")
    assert first.status_code == 202
    assert first.json() == {"delivery_id": "d-1", "disposition": "triggered", "wait_id": wait_id}
    again = await post(api, path, b'{"build": "green"}', "application/json", key="d-1")
    assert again.status_code == 202
    assert again.json()["disposition"] == "duplicate"
    assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 1
    other = await post(api, path, b"second", "text/plain", key="d-2")
    assert other.json()["disposition"] == "triggered"
    assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 2
    metrics = callbacks_metric(api)
    assert 'longrun_callbacks_total{outcome="triggered"} 2.0' in metrics
    assert 'longrun_callbacks_total{outcome="duplicate"} 1.0' in metrics


async def test_callbacks_without_a_key_get_fresh_delivery_ids(
    api: Api, redis: AnyRedis, names: Names
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    wait_id, path = await external_wait(api, agent_id)
    ids = set()
    for _ in range(2):
        answer = await api.http.post(path, content=b"ping")
        assert answer.json()["disposition"] == "triggered"
        ids.add(answer.json()["delivery_id"])
    assert len(ids) == 2
    assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 2


async def test_cancelled_waits_capability_is_403_and_changes_nothing(
    api: Api, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    old_wait, old_path = await external_wait(api, agent_id, "first")
    assert (await post(api, old_path, b"x", "text/plain", key="k0")).status_code == 202
    new_wait, _ = await external_wait(api, agent_id, "replacement")  # cancels the first
    history_before = await redis.llen(names.history(agent_id))
    evidence_before = len(await reads.evidence(agent_id))
    refused = await post(api, old_path, b"late", "text/plain", key="k1")
    assert refused.status_code == 403
    assert refused.json()["error"]["kind"] == "forbidden"
    cancelled = await wait_doc(redis, names, agent_id, old_wait)
    assert cancelled.status.value == "cancelled"
    assert cancelled.trigger_count == 1
    assert (await wait_doc(redis, names, agent_id, new_wait)).trigger_count == 0
    assert await redis.llen(names.history(agent_id)) == history_before
    assert len(await reads.evidence(agent_id)) == evidence_before


async def test_unknown_or_malformed_capability_is_403(api: Api) -> None:
    created = await api.create_agent()
    for token in (
        f"{created['agent_id']}~not-the-right-secret-at-all",
        "no-separator-here-at-all-000000",
        "bad agent~0123456789abcdefghijkl",
        "ghost-agent~0123456789abcdefghijkl",
        created["agent_token"],  # an agent token is not a capability
    ):
        answer = await api.http.post(f"/v1/callbacks/{token}", content=b"x")
        assert answer.status_code == 403, token
        assert answer.json()["error"]["kind"] == "forbidden"


async def test_json_content_type_with_a_non_json_body_is_400_and_counts_nothing(
    api: Api, redis: AnyRedis, names: Names
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    wait_id, path = await external_wait(api, agent_id)
    for content_type in ("application/json", "application/vnd.ci+json; charset=utf-8"):
        answer = await post(api, path, b"{not json", content_type, key="same")
        assert answer.status_code == 400
        assert answer.json()["error"]["kind"] == "invalid_request"
    assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 0
    # The refused attempt did not burn its delivery id.
    fixed = await post(api, path, b'{"ok": true}', "application/json", key="same")
    assert fixed.json()["disposition"] == "triggered"


async def test_bodies_are_kept_with_provenance(api: Api, reads: ReadModel) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    wait_id, path = await external_wait(api, agent_id)
    token = path.rsplit("/", 1)[1]
    binary = bytes(range(256))
    await post(api, path, b'{"a": 1}', "application/json", key="json-1")
    await post(api, path, "héllo".encode(), "text/plain; charset=utf-8", key="text-1")
    await post(api, path, binary, "application/octet-stream", key="bin-1")
    await post(api, path, base64.b64encode(binary), "text/plain", key="b64-text")
    evidence = {e.delivery_id: e for e in await reads.evidence(agent_id)}
    assert set(evidence) == {"json-1", "text-1", "bin-1", "b64-text"}
    assert evidence["json-1"].body == '{"a": 1}'
    assert evidence["text-1"].body == "héllo"
    assert base64.b64decode(evidence["bin-1"].body) == binary
    # A base64 body is told apart from text by its recorded encoding, not by guessing.
    assert evidence["bin-1"].body_encoding == "base64"
    assert evidence["json-1"].body_encoding == evidence["text-1"].body_encoding == "utf-8"
    assert evidence["b64-text"].body == evidence["bin-1"].body
    assert evidence["b64-text"].body_encoding == "utf-8"
    for e in evidence.values():
        assert e.origin == "callback"
        assert e.token_id == token_id_of(hash_token(token))
        assert e.wait_id == wait_id
    assert evidence["text-1"].content_type == "text/plain; charset=utf-8"


async def test_agent_scope_url_triggers_the_single_external_wait_or_fills_the_inbox(
    api: Api, reads: ReadModel
) -> None:
    created = await api.create_agent()
    agent_id, scope_path = created["agent_id"], path_of(created["callback_url"])
    inbox = await post(api, scope_path, b"news", "text/plain", key="s-1")
    assert inbox.status_code == 202
    assert inbox.json() == {"delivery_id": "s-1", "disposition": "delivered_to_inbox"}
    [message] = await reads.inbox(agent_id)
    assert (message.origin, message.text, message.delivery_id) == (
        MessageOrigin.CALLBACK,
        "news",
        "s-1",
    )
    wait_id, _ = await external_wait(api, agent_id)
    triggered = await post(api, scope_path, b"more", "text/plain", key="s-2")
    assert triggered.json() == {
        "delivery_id": "s-2",
        "disposition": "triggered",
        "wait_id": wait_id,
    }


async def test_over_size_callback_is_413_and_changes_nothing(
    make_api: Any, redis: AnyRedis, names: Names
) -> None:
    async with make_api(max_body_bytes=1024) as api:
        agent_id = (await api.create_agent())["agent_id"]
        wait_id, path = await external_wait(api, agent_id)
        sized = await post(api, path, b"x" * 1025, "text/plain", key="big")
        assert sized.status_code == 413
        assert sized.json()["error"]["kind"] == "payload_too_large"

        async def chunks() -> Any:
            for _ in range(5):
                yield b"y" * 300

        chunked = await api.http.post(path, content=chunks())
        assert chunked.status_code == 413
        assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 0
        exact = await post(api, path, b"z" * 1024, "text/plain", key="exact")
        assert exact.status_code == 202


async def test_capability_is_rate_limited_per_token(
    make_api: Any, redis: AnyRedis, names: Names
) -> None:
    async with make_api(callback_rate=0.5, callback_burst=3) as api:
        agent_id = (await api.create_agent())["agent_id"]
        wait_id, path = await external_wait(api, agent_id)
        _, other_path = await external_wait(api, (await api.create_agent())["agent_id"])
        statuses = [(await api.http.post(path, content=b"x")).status_code for _ in range(4)]
        assert statuses == [202, 202, 202, 429]
        limited = await api.http.post(path, content=b"x")
        assert limited.json()["error"]["kind"] == "rate_limited"
        assert int(limited.headers["retry-after"]) >= 1
        assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 3
        assert (await api.http.post(other_path, content=b"x")).status_code == 202


async def test_idempotency_key_must_be_short_and_non_empty(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    _, path = await external_wait(api, agent_id)
    for key in ("", "k" * 201):
        answer = await api.http.post(path, content=b"x", headers={"Idempotency-Key": key})
        assert answer.status_code == 400, key


async def test_http_and_stream_share_delivery_ids(api: Api, redis: AnyRedis, names: Names) -> None:
    """The in-process app also runs the callbacks consumer: a delivery id seen over HTTP is a
    duplicate on the stream and is not counted again."""
    agent_id = (await api.create_agent())["agent_id"]
    wait_id, path = await external_wait(api, agent_id)
    token = path.rsplit("/", 1)[1]
    assert (await post(api, path, b"{}", "application/json", key="shared-1")).status_code == 202
    await redis.xadd(
        names.callbacks,
        {
            "token": token,
            "body": b"{}",
            "content_type": "application/json",
            "delivery_id": "shared-1",
        },
    )
    await redis.xadd(names.callbacks, {"token": token, "body": b"x", "delivery_id": "stream-2"})
    deadline = 100
    while deadline and (await wait_doc(redis, names, agent_id, wait_id)).trigger_count < 2:
        deadline -= 1
        await asyncio.sleep(0.05)
    metrics = callbacks_metric(api)
    assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 2
    assert 'longrun_callbacks_total{outcome="duplicate"} 1.0' in metrics
    dup = await post(api, path, b"x", "text/plain", key="stream-2")
    assert dup.json()["disposition"] == "duplicate"


async def test_concurrent_identical_deliveries_trigger_once_and_the_second_is_a_duplicate(
    api: Api, redis: AnyRedis, names: Names
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    wait_id, path = await external_wait(api, agent_id)
    answers = await asyncio.gather(
        *(post(api, path, b'{"run": 7}', "application/json", key="same-time") for _ in range(2))
    )
    assert [a.status_code for a in answers] == [202, 202]
    assert sorted(a.json()["disposition"] for a in answers) == ["duplicate", "triggered"]
    assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 1
    metrics = callbacks_metric(api)
    assert 'longrun_callbacks_total{outcome="triggered"} 1.0' in metrics
    assert 'longrun_callbacks_total{outcome="duplicate"} 1.0' in metrics


async def test_stream_entries_share_the_rate_limit_and_over_limit_ones_are_dead_lettered(
    make_api: Any, redis: AnyRedis, names: Names
) -> None:
    async with make_api(callback_rate=0.01, callback_burst=2) as api:
        agent_id = (await api.create_agent())["agent_id"]
        wait_id, path = await external_wait(api, agent_id)
        token = path.rsplit("/", 1)[1]
        assert (await api.http.post(path, content=b"http")).status_code == 202
        ids = [
            (await redis.xadd(names.callbacks, {"token": token, "delivery_id": f"rl-{n}"})).decode()
            for n in range(3)
        ]
        letters: dict[str, dict[str, str]] = {}
        for _ in range(200):
            for _, fields in await redis.xrange(names.dead_letter):
                decoded = {k.decode(): v.decode() for k, v in fields.items()}
                if decoded.get("source_id") in ids:
                    letters[decoded["source_id"]] = decoded
            if len(letters) == 2:
                break
            await asyncio.sleep(0.05)
        # The burst of 2 held one HTTP and one stream delivery; the other two wait in the
        # dead-letter stream, with their fields, to be replayed.
        assert sorted(letters) == sorted(ids[1:])
        for letter in letters.values():
            assert letter["reason"].startswith("rate_limited: ")
            assert letter["token"] == token
            assert letter["source_stream"] == names.callbacks
        for _ in range(200):
            if (await wait_doc(redis, names, agent_id, wait_id)).trigger_count >= 2:
                break
            await asyncio.sleep(0.05)
        assert (await wait_doc(redis, names, agent_id, wait_id)).trigger_count == 2
        assert 'longrun_callbacks_total{outcome="rejected"} 2.0' in callbacks_metric(api)
        assert (await api.http.post(path, content=b"late")).status_code == 429


async def test_the_callback_shortcut_leaves_other_requests_to_the_app(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    _, path = await external_wait(api, agent_id)
    wrong_method = await api.http.get(path)
    assert (wrong_method.status_code, wrong_method.json()["error"]["kind"]) == (
        405,
        "method_not_allowed",
    )
    deeper = await api.http.post(path + "/more", content=b"x")
    assert (deeper.status_code, deeper.json()["error"]["kind"]) == (404, "not_found")
    assert (await api.http.post("/v1/callbacks/", content=b"x")).status_code == 404
    assert (await api.http.post(path, content=b"x")).status_code == 202
    metrics = callbacks_metric(api)
    label = 'longrun_http_requests_total{route="/v1/callbacks/{token}",status="202"} 1.0'
    assert label in metrics
    assert 'route="/v1/callbacks/{token}",status="405"' in metrics
