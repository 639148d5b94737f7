"""Webhook safety with real sockets: an agent's check is called only where LONGRUN_WEBHOOK_ALLOW
lets it, at the address that was checked. Loopback, the cloud metadata address and a private
address are refused (no connection is made), an allowed name resolving to loopback is refused
when it resolves, a redirect from an allowed host is not followed, and the operator's checks are
not limited. With the ledger as a process, an agent setting such a check gets 400-class
`webhook_not_allowed` and nothing is stored."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.scheduler import webhooks
from services.scheduler.webhooks import (
    NOT_ALLOWED,
    Destination,
    PendingCheck,
    WebhookRunner,
    pending_checks,
)
from shared.domain.acceptance import SetBy, WebhookCheck
from shared.domain.webhooks import WebhookAllow
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from tests.builders import make_work_item
from tests.integration.ledger_driver import plan_artifact
from tests.integration.scheduler_driver import LEDGER, LEDGER_PORT, ensure
from tests.integration.webhook_server import WebhookServer

SECRET = "webhook-secret-for-tests"


@pytest.fixture
async def server() -> AsyncIterator[WebhookServer]:
    started = await WebhookServer().start()
    yield started
    await started.stop()


@pytest.fixture
async def elsewhere() -> AsyncIterator[WebhookServer]:
    """A second server a redirect points to: it must never be called."""
    started = await WebhookServer().start()
    yield started
    await started.stop()


@pytest.fixture
async def make_runner(redis: AnyRedis, names: Names) -> AsyncIterator[Any]:
    made: list[WebhookRunner] = []

    def _make(allow: str) -> WebhookRunner:
        client = LedgerClient(redis, names, clock=utc_now, new_id=new_id)
        runner = WebhookRunner(
            redis, names, client, secret=SECRET, concurrency=4, allow=WebhookAllow.parse(allow)
        )
        made.append(runner)
        return runner

    yield _make
    for runner in made:
        await runner.close()


def check_of(url: str, set_by: SetBy = SetBy.AGENT) -> PendingCheck:
    item = make_work_item(
        acceptance=(WebhookCheck(url=url, timeout_s=5, set_by=set_by),),
        verification={
            "status": "verifying",
            "attempt": 1,
            "checks": [{"kind": "webhook"}],
            "report_candidate": "done",
            "started_at": utc_now(),
        },
    )
    (pending,) = pending_checks(item)
    return pending


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/pass",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://10.0.0.1/check",
    ],
    ids=["loopback", "metadata", "private"],
)
async def test_unlisted_addresses_are_refused_without_a_connection(
    server: WebhookServer, make_runner: Any, url: str
) -> None:
    runner = make_runner("hooks.example.com")
    passed, reason = await runner.call(check_of(url.format(port=server.port)))
    assert not passed
    assert reason.startswith(f"{NOT_ALLOWED}: ")
    assert "is not in LONGRUN_WEBHOOK_ALLOW" in reason
    assert runner.calls == 0
    assert server.connections == 0


async def test_an_allowed_name_that_resolves_to_loopback_is_refused_when_it_resolves(
    server: WebhookServer, make_runner: Any
) -> None:
    runner = make_runner("localhost")  # the name is listed; its address (loopback) is not
    passed, reason = await runner.call(check_of(f"http://localhost:{server.port}/pass"))
    assert not passed
    assert reason.startswith(f"{NOT_ALLOWED}: localhost resolves to ")
    assert "loopback" in reason
    assert server.connections == 0


async def test_a_listed_address_is_called_with_its_own_host_header(
    server: WebhookServer, make_runner: Any
) -> None:
    runner = make_runner("127.0.0.1")
    assert await runner.call(check_of(server.url("/pass"))) == (True, "all green")
    (got,) = server.received
    assert got.host == f"127.0.0.1:{server.port}"


async def test_a_redirect_from_an_allowed_host_is_not_followed(
    server: WebhookServer, elsewhere: WebhookServer, make_runner: Any
) -> None:
    server.redirect_to = elsewhere.url("/pass")
    runner = make_runner("127.0.0.1")
    passed, reason = await runner.call(check_of(server.url("/redirect")))
    assert (passed, reason) == (False, "webhook answered HTTP 302")
    assert [r.path for r in server.received] == ["/redirect"]
    assert elsewhere.connections == 0


async def test_the_operators_checks_are_not_limited(
    server: WebhookServer, make_runner: Any
) -> None:
    runner = make_runner("")
    got = await runner.call(check_of(server.url("/pass"), set_by=SetBy.OPERATOR))
    assert got == (True, "all green")
    agent_set = await runner.call(check_of(server.url("/pass")))
    assert agent_set[0] is False
    assert len(server.received) == 1


# ---------------------------------------------------------------- the ledger, when a check is set


def create(agent_id: str, work_item_id: str, url: str, *, by_operator: bool) -> c.CreateWorkItem:
    return c.CreateWorkItem.model_validate(
        {
            "command_id": f"create-{work_item_id}",
            "agent_id": agent_id,
            "by_operator": by_operator,
            "args": {"objective": "ship", "acceptance": [{"kind": "webhook", "url": url}]},
            "work_item_id": work_item_id,
            "plan_artifact": plan_artifact(work_item_id),
        }
    )


@pytest.mark.timeout(120)
async def test_the_ledger_refuses_an_agents_unlisted_webhook_and_stores_nothing(
    spawn: Any, redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    ledger = spawn(LEDGER, LEDGER_PORT, LONGRUN_WEBHOOK_ALLOW="hooks.example.com")
    await ledger.wait_ready()
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id)
    await client.start()
    try:
        agent = "hook-" + new_id("a").lower()[-8:]
        await client.send(ensure(agent))
        urls = ["http://127.0.0.1:9/x", "http://169.254.169.254/", "http://10.0.0.1/"]
        for url in urls:
            reply = await client.send(create(agent, new_id("wi_"), url, by_operator=False))
            assert reply.error is not None, url
            assert reply.error.kind == "webhook_not_allowed"
        assert await reads.all_items(agent) == []
        listed = await client.send(
            create(agent, new_id("wi_"), "https://hooks.example.com/c", by_operator=False)
        )
        assert listed.error is None
        by_operator = await client.send(
            create(agent, new_id("wi_"), "http://10.0.0.1/", by_operator=True)
        )
        assert by_operator.error is None
        assert len(await reads.all_items(agent)) == 2
    finally:
        await client.stop()


async def test_the_call_goes_to_the_address_that_was_checked(
    make_runner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each call resolves the name once, checks every address, and connects to the address it
    checked with the name kept for Host and TLS, so no later lookup (a rebinding DNS answer)
    decides where it goes."""
    answers = [[ipaddress.ip_address("93.184.216.34")], [ipaddress.ip_address("127.0.0.1")]]
    looked_up: list[str] = []

    async def resolve(host: str, port: int) -> list[Any]:
        looked_up.append(host)
        return answers.pop(0)

    monkeypatch.setattr(webhooks, "resolve", resolve)
    runner = make_runner("hooks.example.com")
    https = await runner.destination(WebhookCheck(url="https://hooks.example.com/check?x=1"))
    assert isinstance(https, Destination)
    assert https.url == "https://93.184.216.34/check?x=1"
    assert https.headers == {"Host": "hooks.example.com"}
    assert https.extensions == {"sni_hostname": "hooks.example.com"}
    # The next call's lookup answers loopback: that call is refused.
    rebound = await runner.destination(WebhookCheck(url="http://hooks.example.com:8080/check"))
    assert isinstance(rebound, str)
    assert "127.0.0.1 (loopback)" in rebound
    assert looked_up == ["hooks.example.com", "hooks.example.com"]
