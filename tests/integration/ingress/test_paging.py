"""Every list route pages with `limit`/`cursor`/`next_cursor` over HTTP against a real ledger
process: walking the cursors gives every row once, in the route's order, and `next_cursor` is
null at the end. Cursors are sealed to their list, filters and agent: an edited or forged one,
one from another agent or another list is 400 naming `cursor`; a limit out of 1..1,000 is 400
naming `limit`."""

from __future__ import annotations

import html
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from services.cli import client as cli_client
from services.cli.client import LongrunClient
from services.ingress.console import pages
from shared.domain.usage import TurnUsage, Usage, UsageRecord, day_increments, last_seq_field
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration.ingress.conftest import OPERATOR_TOKEN, Api
from tests.integration.ingress.test_console_sign_in import new_address, sign_in

AGENT_ROW = re.compile(r'<tr data-agent="([^"]+)">')
NEXT = re.compile(r'<a href="([^"]+)" rel="next">')


async def create_item(api: Api, agent_id: str, objective: str) -> str:
    answer = await api.tool(agent_id, "CreateWorkItem", {"objective": objective})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"]["work_item"]["id"])


async def walk(
    api: Api, path: str, rows: str, params: dict[str, Any], *, headers: dict[str, str] | None = None
) -> tuple[list[Any], int]:
    """Every row of a list route, following next_cursor; and how many pages it took."""
    found: list[Any] = []
    query = dict(params)
    pages = 0
    while True:
        answer = await api.http.get(path, params=query, headers=headers or api.operator)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages += 1
        found += body[rows]
        if body["next_cursor"] is None:
            return found, pages
        query["cursor"] = body["next_cursor"]


def field_of(answer: Any) -> str:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["kind"] == "invalid_request"
    return str(error["details"]["field"])


async def test_agents_page_by_id_with_their_labels(api: Api) -> None:
    team = secrets.token_hex(4)
    ids = sorted([f"pg-{team}-{n}" for n in range(5)])
    for agent_id in ids:
        await api.create_agent(agent_id, spec={"labels": {"team": team}})
    await api.create_agent(f"pg-{team}-other")
    agents, pages = await walk(api, "/v1/agents", "agents", {"label": f"team={team}", "limit": 2})
    assert [a["agent_id"] for a in agents] == ids
    assert pages == 3
    everyone, _ = await walk(api, "/v1/agents", "agents", {"limit": 1000})
    assert {*ids, f"pg-{team}-other"} <= {a["agent_id"] for a in everyone}
    assert [a["agent_id"] for a in everyone] == sorted(a["agent_id"] for a in everyone)


async def test_work_items_page_in_ranking_order(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    made = [await create_item(api, agent_id, f"item {n}") for n in range(7)]
    base = f"/v1/agents/{agent_id}/work-items"
    whole = (await api.http.get(base, headers=api.operator)).json()
    assert (whole["total_matching"], whole["next_cursor"]) == (7, None)
    ranked = [w["id"] for w in whole["work_items"]]
    assert sorted(ranked) == sorted(made)
    paged, pages = await walk(api, base, "work_items", {"limit": 3, "filter": "open"})
    assert ([w["id"] for w in paged], pages) == (ranked, 3)


async def test_briefs_page_newest_first_with_their_summaries(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    for n in range(5):
        item = await create_item(api, agent_id, f"report {n}")
        done = await api.tool(
            agent_id, "CompleteWorkItem", {"work_item_id": item}, assistant_text=f"Report {n}."
        )
        assert done.status_code == 200, done.text
    base = f"/v1/agents/{agent_id}/briefs"
    first = (await api.http.get(base, params={"limit": 2}, headers=api.operator)).json()
    assert [b["text"] for b in first["briefs"]] == ["Report 4.", "Report 3."]
    assert sorted(s["text"] for s in first["delivery_summaries"]) == ["Report 3.", "Report 4."]
    briefs, pages = await walk(api, base, "briefs", {"limit": 2, "kind": "result"})
    assert ([b["text"] for b in briefs], pages) == ([f"Report {n}." for n in range(4, -1, -1)], 3)
    none, _ = await walk(api, base, "briefs", {"kind": "failure"})
    assert none == []


async def test_history_pages_by_cursor_and_after_alike(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    for n in range(4):
        await create_item(api, agent_id, f"event {n}")
    base = f"/v1/agents/{agent_id}/history"
    everything = (await api.http.get(base, params={"limit": 1000}, headers=api.operator)).json()
    assert everything["next_cursor"] is None
    seqs = [e["seq"] for e in everything["events"]]
    assert seqs == list(range(1, len(seqs) + 1))
    paged, pages = await walk(api, base, "events", {"limit": 2})
    assert [e["seq"] for e in paged] == seqs
    assert pages == (len(seqs) + 1) // 2
    both = await api.http.get(
        base, params={"after": 1, "cursor": everything["next_after"]}, headers=api.operator
    )
    assert field_of(both) == "cursor"


async def test_delegations_page_oldest_first(api: Api) -> None:
    parent = (await api.create_agent())["agent_id"]
    child = (await api.create_agent())["agent_id"]
    made = []
    for n in range(3):
        # A delegation waits on the current item: each comes from an item of its own.
        item = await create_item(api, parent, f"whole {n}")
        picked = await api.tool(parent, "PickWorkItem", {"work_item_id": item})
        assert picked.status_code == 200, picked.text
        answer = await api.tool(
            parent,
            "DelegateWorkItem",
            {"to_agent": child, "objective": f"child part {n}", "reason": "a part of it"},
        )
        assert answer.status_code == 200, answer.text
        made.append(answer.json()["result"]["delegation"]["id"])
    base = f"/v1/agents/{parent}/delegations"
    paged, pages = await walk(api, base, "delegations", {"limit": 2, "direction": "out"})
    assert ([d["id"] for d in paged], pages) == (made, 2)
    incoming, _ = await walk(api, f"/v1/agents/{child}/delegations", "delegations", {"limit": 1})
    assert [d["direction"] for d in incoming] == ["in"] * 3


async def test_usage_pages_per_day_rows_with_the_totals_of_the_range(
    api: Api, redis: AnyRedis, names: Names
) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    # Rows as the ledger files them (its own writing is tested in test_usage_days.py).
    start = datetime(2026, 2, 25, 12, tzinfo=UTC)
    for n in range(5):
        usage = TurnUsage().plus_call("openai/m", Usage(input_tokens=10 * (n + 1)))
        record = UsageRecord(turn_id=f"t{n}", at=start + timedelta(days=n), usage=usage)
        for field, amount in day_increments(record):
            await redis.hincrby(names.usage_days(agent_id), field, amount)
        await redis.hset(names.usage_days(agent_id), last_seq_field(record), 0)
    base = f"/v1/agents/{agent_id}/usage"
    days, pages = await walk(api, base, "days", {"by": "day", "limit": 2})
    assert [(d["day"], d["input_tokens"]) for d in days] == [
        ("2026-02-25", 10),
        ("2026-02-26", 20),
        ("2026-02-27", 30),
        ("2026-02-28", 40),
        ("2026-03-01", 50),
    ]
    assert pages == 3
    ranged = await api.http.get(
        base,
        params={"by": "day", "since": "2026-02-26T00:00:00Z", "until": "2026-03-01T00:00:00Z"},
        headers=api.operator,
    )
    body = ranged.json()
    assert [d["day"] for d in body["days"]] == ["2026-02-26", "2026-02-27", "2026-02-28"]
    assert (body["turns"], body["input_tokens"], body["next_cursor"]) == (3, 90, None)


@pytest.mark.parametrize("limit", [0, 1001, -5])
async def test_a_limit_out_of_range_is_400_naming_limit(api: Api, limit: int) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    for path, params in (
        ("work-items", {}),
        ("work-items", {"state": "finished"}),
        ("briefs", {}),
        ("history", {}),
        ("delegations", {}),
        ("usage", {"by": "day"}),
    ):
        answer = await api.http.get(
            f"/v1/agents/{agent_id}/{path}", params={**params, "limit": limit}, headers=api.operator
        )
        assert field_of(answer) == "limit", path
    assert (
        field_of(await api.http.get("/v1/agents", params={"limit": limit}, headers=api.operator))
        == "limit"
    )


async def test_forged_foreign_and_misplaced_cursors_are_400_naming_cursor(api: Api) -> None:
    created = await api.create_agent()
    agent_id = created["agent_id"]
    other = (await api.create_agent())["agent_id"]
    for n in range(3):
        await create_item(api, agent_id, f"item {n}")
    base = f"/v1/agents/{agent_id}"
    page = (
        await api.http.get(f"{base}/work-items", params={"limit": 1}, headers=api.operator)
    ).json()
    cursor = page["next_cursor"]
    assert cursor is not None
    body, mac = cursor.split(".")
    edited = ("B" if body[0] != "B" else "C") + body[1:] + "." + mac
    forged = body + "." + mac[::-1]
    for bad in (edited, forged, "garbage", "", "a.b.c", cursor[:-2]):
        answer = await api.http.get(
            f"{base}/work-items", params={"limit": 1, "cursor": bad}, headers=api.operator
        )
        assert field_of(answer) == "cursor", bad
    foreign = await api.http.get(
        f"/v1/agents/{other}/work-items", params={"cursor": cursor}, headers=api.operator
    )
    assert field_of(foreign) == "cursor"
    assert "another agent" in foreign.json()["error"]["message"]
    for misplaced, params in (
        ("history", {}),
        ("briefs", {}),
        ("delegations", {}),
        ("work-items", {"filter": "open"}),
        ("work-items", {"state": "finished"}),
        ("usage", {"by": "day"}),
    ):
        answer = await api.http.get(
            f"{base}/{misplaced}", params={**params, "cursor": cursor}, headers=api.operator
        )
        assert field_of(answer) == "cursor", misplaced
    # The agent's own token reads its own pages; the cursor is the same.
    own = {"Authorization": f"Bearer {created['agent_token']}"}
    mine = await api.http.get(
        f"{base}/work-items", params={"limit": 1, "cursor": cursor}, headers=own
    )
    assert mine.status_code == 200
    assert len(mine.json()["work_items"]) == 1


async def test_the_console_agents_page_links_to_the_next_page(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "AGENTS_PAGE", 2)
    for _ in range(3):
        await api.create_agent()
    transport = httpx.ASGITransport(app=api.built.app, client=(new_address(), 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://ingress.test") as http:
        assert (await sign_in(http, OPERATOR_TOKEN)).status_code in {303, 302}
        url: str | None = "/ui"
        seen: list[str] = []
        while url is not None:
            page = await http.get(url)
            assert page.status_code == 200, page.text
            rows = AGENT_ROW.findall(page.text)
            assert 1 <= len(rows) <= 2
            seen += rows
            following = NEXT.search(page.text)
            url = html.unescape(following.group(1)) if following else None
        assert seen == sorted(seen)
        assert len(seen) == len(set(seen)) >= 3
        forged = await http.get("/ui", params={"cursor": "not-a-cursor"})
        assert forged.status_code == 400


def test_the_cli_client_follows_the_cursors(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`longrun`'s client against an ingress process, two rows a page: every list read whole."""
    team = secrets.token_hex(4)
    with LongrunClient(base_url, OPERATOR_TOKEN) as client:
        ids = sorted(f"cli-{team}-{n}" for n in range(3))
        for agent_id in ids:
            client.put_agent(agent_id, loop="external")
        for n in range(5):
            client._request(
                "POST",
                f"/v1/agents/{ids[0]}/tools/CreateWorkItem",
                json={"args": {"objective": f"cli item {n}"}},
            )
        whole = client.list_work_items(ids[0])
        history = client.history(ids[0])["events"]
        monkeypatch.setattr(cli_client, "PAGE_MAX", 2)
        assert {*ids} <= {a["agent_id"] for a in client.list_agents()}
        paged = client.list_work_items(ids[0])
        assert [w["id"] for w in paged["work_items"]] == [w["id"] for w in whole["work_items"]]
        assert (paged["returned"], paged["total_matching"]) == (5, 5)
        assert [w["id"] for w in client.list_work_items(ids[0], limit=3)["work_items"]] == [
            w["id"] for w in whole["work_items"][:3]
        ]
        assert client.history_all(ids[0]) == history
