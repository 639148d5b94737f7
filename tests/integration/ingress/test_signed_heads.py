"""Signed history heads over HTTP against a real ledger process: the head is the chain's tip
signed by the ledger's key, the key is listed, and only the operator may ask."""

from __future__ import annotations

from typing import Any

from shared.domain.history import verify
from shared.domain.signing import SignedHead, check_chain_through, signature_valid
from tests.integration.ingress.conftest import Api, new_agent_id


async def history(api: Api, agent_id: str) -> list[dict[str, Any]]:
    answer = await api.http.get(
        f"/v1/agents/{agent_id}/history", params={"limit": 1000}, headers=api.operator
    )
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def signed_head(api: Api, agent_id: str) -> SignedHead:
    answer = await api.http.get(f"/v1/agents/{agent_id}/history/head", headers=api.operator)
    assert answer.status_code == 200, answer.text
    assert set(answer.json()) == {"agent_id", "seq", "hash", "at", "key_id", "signature"}
    return SignedHead.model_validate(answer.json())


async def listed_keys(api: Api) -> dict[str, str]:
    answer = await api.http.get("/v1/signing-keys", headers=api.operator)
    assert answer.status_code == 200, answer.text
    return {k["key_id"]: k["public_key"] for k in answer.json()["keys"]}


async def test_the_head_is_the_chain_tip_signed_by_a_listed_key(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    created = await api.tool(agent_id, "CreateWorkItem", {"objective": "ship it"})
    assert created.status_code == 200, created.text
    events = await history(api, agent_id)
    head = await signed_head(api, agent_id)
    assert (head.agent_id, head.seq, head.hash) == (agent_id, len(events), events[-1]["hash"])
    assert head.hash == verify(events).head
    keys = await listed_keys(api)
    assert signature_valid(head, keys[head.key_id])
    assert check_chain_through(events, head).ok


async def test_a_head_saved_earlier_still_checks_after_the_history_grows(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    anchor = await signed_head(api, agent_id)
    for n in range(3):
        answer = await api.tool(agent_id, "CreateWorkItem", {"objective": f"item {n}"})
        assert answer.status_code == 200, answer.text
    later = await signed_head(api, agent_id)
    assert later.seq == anchor.seq + 3
    assert check_chain_through(await history(api, agent_id), anchor).ok


async def test_asking_for_a_head_records_nothing(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    before = await history(api, agent_id)
    await signed_head(api, agent_id)
    await signed_head(api, agent_id)
    assert await history(api, agent_id) == before


async def test_only_the_operator_may_ask_for_heads_and_keys(api: Api) -> None:
    created = await api.create_agent()
    agent_token = {"Authorization": f"Bearer {created['agent_token']}"}
    head = await api.http.get(f"/v1/agents/{created['agent_id']}/history/head", headers=agent_token)
    assert head.status_code == 403, head.text
    assert (await api.http.get("/v1/signing-keys", headers=agent_token)).status_code == 403
    assert (await api.http.get("/v1/signing-keys")).status_code == 401


async def test_the_head_of_an_unknown_agent_is_404(api: Api) -> None:
    answer = await api.http.get(f"/v1/agents/{new_agent_id()}/history/head", headers=api.operator)
    assert answer.status_code == 404, answer.text
