"""Console sign-in against a real Redis: five wrong tokens from one address, then 429 for the
rest of the minute whatever the token (other addresses unaffected); sign-out revokes the session
on the server, for every ingress worker; cookies are Secure when the public URL is https. And
a WorkItem held for the operator shows its verdict form."""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from services.ingress.app import IngressApp
from services.ingress.console.guard import MAX_FAILURES, WINDOW_SECONDS
from shared.wire.commands import RecordVerdict
from tests.integration.ingress.conftest import OPERATOR_TOKEN

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def new_address() -> str:
    """A client address of its own per test: the throttle is per address and shared in Redis."""
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 1}"


@asynccontextmanager
async def browser(built: IngressApp, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client of the in-process app, seen as coming from `address`."""
    transport = httpx.ASGITransport(app=built.app, client=(address, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://ingress.test") as http:
        yield http


@asynccontextmanager
async def started(make_api: Any, **settings: Any) -> AsyncIterator[IngressApp]:
    async with make_api(**settings) as api:
        yield api.built


async def sign_in(http: httpx.AsyncClient, token: str) -> httpx.Response:
    form = await http.get("/ui/login")
    assert form.status_code == 200, form.text
    match = CSRF.search(form.text)
    assert match is not None
    return await http.post(
        "/ui/login", data={"csrf_token": match.group(1), "token": token, "next": "/ui"}
    )


async def sign_out(http: httpx.AsyncClient) -> httpx.Response:
    page = await http.get("/ui")
    assert page.status_code == 200, page.text
    match = CSRF.search(page.text)
    assert match is not None
    return await http.post("/ui/logout", data={"csrf_token": match.group(1)})


async def test_six_wrong_tokens_then_429_whatever_the_token(make_api: Any) -> None:
    address = new_address()
    async with started(make_api) as built, browser(built, address) as http:
        for attempt in range(MAX_FAILURES):
            wrong = await sign_in(http, f"wrong-{attempt}")
            assert wrong.status_code == 401, (attempt, wrong.status_code)
        sixth = await sign_in(http, "wrong-6")
        assert sixth.status_code == 429
        assert "too many failed sign-ins" in sixth.text
        assert 1 <= int(sixth.headers["retry-after"]) <= WINDOW_SECONDS
        # The rest of the minute: even the operator token is refused, and no session is set.
        right = await sign_in(http, OPERATOR_TOKEN)
        assert right.status_code == 429
        assert "longrun_session" not in right.headers.get("set-cookie", "")
        # Another address is not throttled by this one's failures.
        async with browser(built, new_address()) as other:
            assert (await sign_in(other, OPERATOR_TOKEN)).status_code == 303


async def test_the_throttle_is_shared_by_every_ingress_worker(make_api: Any) -> None:
    address = new_address()
    async with started(make_api) as first, started(make_api) as second:
        async with browser(first, address) as http:
            for attempt in range(MAX_FAILURES):
                assert (await sign_in(http, f"wrong-{attempt}")).status_code == 401
        async with browser(second, address) as http:
            assert (await sign_in(http, OPERATOR_TOKEN)).status_code == 429


async def test_correct_sign_ins_do_not_count_as_failures(make_api: Any) -> None:
    address = new_address()
    async with started(make_api) as built, browser(built, address) as http:
        for attempt in range(MAX_FAILURES - 1):
            assert (await sign_in(http, f"wrong-{attempt}")).status_code == 401
        for _ in range(3):
            assert (await sign_in(http, OPERATOR_TOKEN)).status_code == 303
        assert (await sign_in(http, "wrong-last")).status_code == 401
        assert (await sign_in(http, "one-too-many")).status_code == 429


async def test_sign_out_revokes_the_session_for_every_worker(make_api: Any) -> None:
    address = new_address()
    async with started(make_api) as first, started(make_api) as second:
        async with browser(first, address) as http:
            assert (await sign_in(http, OPERATOR_TOKEN)).status_code == 303
            cookie = http.cookies["longrun_session"]
            assert (await http.get("/ui")).status_code == 200
            signed_out = await sign_out(http)
            assert signed_out.status_code == 303
            assert signed_out.headers["location"] == "/ui/login"
        # The cookie kept by someone else (a copy, a stolen one) no longer opens any page.
        for built in (first, second):
            async with browser(built, address) as thief:
                thief.cookies.set("longrun_session", cookie)
                page = await thief.get("/ui")
                assert page.status_code == 303
                assert page.headers["location"].startswith("/ui/login")
        # A new sign-in gets a new session that works.
        async with browser(second, address) as http:
            assert (await sign_in(http, OPERATOR_TOKEN)).status_code == 303
            assert (await http.get("/ui")).status_code == 200


async def test_cookies_are_secure_when_the_public_url_is_https(make_api: Any) -> None:
    https = started(make_api, public_url="https://longrun.example.com")
    async with https as built, browser(built, new_address()) as http:
        form = await http.get("/ui/login")
        assert "secure" in form.headers["set-cookie"].lower()
        # The app speaks plain HTTP here (as behind a TLS proxy), so the client would not
        # send back a Secure cookie by itself: hand it back as the browser would over https.
        nonce = http.cookies["longrun_login"]
        http.cookies.clear()
        http.cookies.set("longrun_login", nonce)
        match = CSRF.search(form.text)
        assert match is not None
        signed = await http.post(
            "/ui/login", data={"csrf_token": match.group(1), "token": OPERATOR_TOKEN}
        )
        assert signed.status_code == 303
        session = [c for c in signed.headers.get_list("set-cookie") if "longrun_session" in c]
        assert session
        assert "secure" in session[0].lower()
        assert "httponly" in session[0].lower()
    plain = started(make_api, public_url="http://127.0.0.1:8080")
    async with plain as built, browser(built, new_address()) as http:
        signed = await sign_in(http, OPERATOR_TOKEN)
        session = [c for c in signed.headers.get_list("set-cookie") if "longrun_session" in c]
        assert session
        assert "secure" not in session[0].lower()


async def test_a_held_item_shows_approve_and_reject_and_the_form_moves_it(make_api: Any) -> None:
    """A WorkItem held after its attempts were spent (webhook verdicts sent to the real ledger)
    shows the verdict form on the agent page; the console's Reject gives it fresh attempts."""
    async with make_api() as api, browser(api.built, new_address()) as http:
        created = await api.create_agent(loop="external")
        agent_id = created["agent_id"]
        check = {"kind": "webhook", "url": "http://10.0.0.1/check"}  # the operator's: allowed
        made = await api.tool(agent_id, "CreateWorkItem", {"objective": "o", "acceptance": [check]})
        item = made.json()["result"]["work_item"]["id"]
        client = api.built.ingress.client
        for attempt in (1, 2, 3):
            done = await api.tool(agent_id, "CompleteWorkItem", {"work_item_id": item})
            assert done.status_code == 200, done.text
            failed = RecordVerdict(
                command_id=f"v-{item}-{attempt}",
                agent_id=agent_id,
                work_item_id=item,
                attempt=attempt,
                check_index=0,
                source="webhook",
                passed=False,
                reason="red",
            )
            assert (await client.send(failed)).error is None
        assert (await sign_in(http, OPERATOR_TOKEN)).status_code == 303
        page = await http.get(f"/ui/agents/{agent_id}")
        assert page.status_code == 200
        assert "held for the operator" in page.text
        assert f"/work-items/{item}/verdict" in page.text
        form = re.search(
            rf'action="/ui/agents/{agent_id}/work-items/{item}/verdict".*?'
            r'name="csrf_token" value="([^"]+)".*?name="attempt" value="(\d+)"',
            page.text,
            re.S,
        )
        assert form is not None
        rejected = await http.post(
            f"/ui/agents/{agent_id}/work-items/{item}/verdict",
            data={"csrf_token": form.group(1), "attempt": form.group(2), "passed": "false",
                  "note": "try again"},
        )  # fmt: skip
        assert rejected.status_code in (200, 303), rejected.text
        view = await api.http.get(f"/v1/agents/{agent_id}/work-items/{item}", headers=api.operator)
        work_item = view.json()["work_item"]
        assert not work_item["verification"]["held_for_operator"]
        assert work_item["blocked_by"] is None
