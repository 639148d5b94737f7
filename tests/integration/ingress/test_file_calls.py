"""File tool calls on the HTTP tools route against a real ledger process: a repeated command id
applies once and answers the first envelope (a first call that died between its records answers
`outcome_unknown`, never runs again), and an edit of a plan file refreshes the WorkItem's plan
descriptor in the views and the history."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from services.ingress import file_calls
from shared.agent_home import resolve_in_home
from shared.wire import commands as c
from tests.integration.ingress.conftest import Api

ADD = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1,2 @@\n one\n+added\n"
"""A pure addition: its context still matches after it applied, so running it twice adds twice."""


async def test_a_repeated_command_id_applies_a_file_change_once(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    path = resolve_in_home(api.built.settings.agent_home, agent_id, "notes.txt")
    assert (
        await api.tool(agent_id, "WriteFile", {"path": "notes.txt", "content": "one\n"})
    ).is_success
    first = await api.tool(agent_id, "ApplyPatch", {"patch": ADD}, command_id="patch-1")
    again = await api.tool(agent_id, "ApplyPatch", {"patch": ADD}, command_id="patch-1")
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    assert path.read_text() == "one\nadded\n"
    edit = {"path": "notes.txt", "old_text": "one", "new_text": "one one"}
    edited = await api.tool(agent_id, "EditFile", edit, command_id="edit-1")
    repeated = await api.tool(agent_id, "EditFile", edit, command_id="edit-1")
    assert repeated.json() == edited.json()
    assert path.read_text() == "one one\nadded\n"
    fresh = await api.tool(agent_id, "ApplyPatch", {"patch": ADD}, command_id="patch-2")
    assert fresh.status_code == 400  # a new command id is a new call: the context moved on
    assert path.read_text() == "one one\nadded\n"


async def test_a_repeat_of_a_call_that_died_mid_run_is_unknown_and_changes_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_calls, "FIRST_ANSWER_WAIT_S", 0.3)
    agent_id = (await api.create_agent())["agent_id"]
    # The first call's claim was recorded, then its ingress died before the answer was.
    claim = c.BeginFileToolCall(command_id="write-1", agent_id=agent_id, tool="WriteFile")
    assert (await api.built.ingress.client.send(claim)).error is None
    answer = await api.tool(
        agent_id, "WriteFile", {"path": "a.txt", "content": "x"}, command_id="write-1"
    )
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["kind"] == "outcome_unknown"
    assert not resolve_in_home(api.built.settings.agent_home, agent_id, "a.txt").exists()


async def plan_of(api: Api, agent_id: str, item_id: str) -> dict[str, Any]:
    got = await api.tool(agent_id, "GetWorkItem", {"work_item_id": item_id})
    plan: dict[str, Any] = got.json()["result"]["work_item"]["plan_artifact"]
    return plan


async def test_editing_a_plan_file_over_the_tools_route_refreshes_its_descriptor(api: Api) -> None:
    agent_id = (await api.create_agent())["agent_id"]
    created = await api.tool(agent_id, "CreateWorkItem", {"objective": "Plan it", "plan": "# Old"})
    item_id = created.json()["result"]["work_item"]["id"]
    relative = (await plan_of(api, agent_id, item_id))["relative_path"]
    text = "# New plan\n\n1. Do the thing\n"
    written = await api.tool(agent_id, "WriteFile", {"path": relative, "content": text})
    assert written.status_code == 200, written.text
    plan = await plan_of(api, agent_id, item_id)
    assert plan["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert (plan["bytes"], plan["preview"]) == (len(text), text)
    patch = f"--- a/{relative}\n+++ b/{relative}\n@@ -3 +3 @@\n-1. Do the thing\n+1. Did it\n"
    patched = await api.tool(agent_id, "ApplyPatch", {"patch": patch}, command_id="plan-patch")
    assert patched.status_code == 200, patched.text
    assert (await plan_of(api, agent_id, item_id))["preview"] == "# New plan\n\n1. Did it\n"
    history = await api.http.get(f"/v1/agents/{agent_id}/history", headers=api.operator)
    refreshed = [e for e in history.json()["events"] if e["type"] == "plan_artifact_refreshed"]
    assert [e["work_item_id"] for e in refreshed] == [item_id, item_id]
