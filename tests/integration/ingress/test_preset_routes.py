"""Presets over HTTP: created as version 1 (201), an identical PUT changing nothing (200, same
version), a changed spec the next version, a spec with a literal secret or an unknown field
refused storing nothing, 404 preset_not_found, operator only."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.integration.ingress.conftest import Api

SPEC: dict[str, Any] = {
    "instructions": "Research one question and report what you found.",
    "limits": {"max_rounds_per_turn": 6, "wake_budget": 4},
    "labels": {"role": "researcher"},
}


def preset_name() -> str:
    return f"researcher-{uuid.uuid4().hex[:8]}"


async def test_put_get_list_and_versions(api: Api) -> None:
    name = preset_name()
    created = await api.http.put(f"/v1/presets/{name}", headers=api.operator, json={"spec": SPEC})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["name"], body["version"]) == (name, 1)
    assert body["spec"]["instructions"] == SPEC["instructions"]
    assert body["spec"]["limits"]["max_rounds_per_turn"] == 6
    assert body["spec"]["tools"]["files"] is True  # defaults filled in
    again = await api.http.put(f"/v1/presets/{name}", headers=api.operator, json={"spec": SPEC})
    assert again.status_code == 200
    assert again.json()["version"] == 1
    changed = {**SPEC, "instructions": "Research two questions."}
    moved = await api.http.put(f"/v1/presets/{name}", headers=api.operator, json={"spec": changed})
    assert moved.status_code == 200
    assert moved.json()["version"] == 2
    shown = await api.http.get(f"/v1/presets/{name}", headers=api.operator)
    assert shown.status_code == 200
    assert shown.json()["spec"]["instructions"] == "Research two questions."
    listed = await api.http.get("/v1/presets", headers=api.operator)
    assert name in [p["name"] for p in listed.json()["presets"]]


async def test_concurrent_changes_take_distinct_versions(api: Api) -> None:
    name = preset_name()
    specs = [{**SPEC, "instructions": f"variant {i}"} for i in range(6)]
    answers = await asyncio.gather(
        *(
            api.http.put(f"/v1/presets/{name}", headers=api.operator, json={"spec": s})
            for s in specs
        )
    )
    versions = sorted(a.json()["version"] for a in answers)
    assert versions == [1, 2, 3, 4, 5, 6]
    assert sum(a.status_code == 201 for a in answers) == 1
    final = (await api.http.get(f"/v1/presets/{name}", headers=api.operator)).json()
    assert final["version"] == 6


async def test_bad_input_and_unknown_names(api: Api) -> None:
    name = preset_name()
    secret = {"instructions": "use sk-ant-api03-" + "a" * 40}
    refused = await api.http.put(f"/v1/presets/{name}", headers=api.operator, json={"spec": secret})
    assert refused.status_code == 400
    unknown = await api.http.put(
        f"/v1/presets/{name}", headers=api.operator, json={"spec": {"instructionz": "x"}}
    )
    assert unknown.status_code == 400
    missing = await api.http.get(f"/v1/presets/{name}", headers=api.operator)
    assert missing.status_code == 404
    assert missing.json()["error"]["kind"] == "preset_not_found"
    bad_name = await api.http.put("/v1/presets/-x", headers=api.operator, json={"spec": SPEC})
    assert bad_name.status_code == 400


async def test_only_the_operator(api: Api) -> None:
    agent = await api.create_agent()
    name = preset_name()
    as_agent = {"Authorization": f"Bearer {agent['agent_token']}"}
    put = await api.http.put(f"/v1/presets/{name}", headers=as_agent, json={"spec": SPEC})
    assert put.status_code == 403
    assert (await api.http.get("/v1/presets", headers=as_agent)).status_code == 403
    assert (await api.http.get("/v1/presets")).status_code == 401
