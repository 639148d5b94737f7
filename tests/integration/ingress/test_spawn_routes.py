"""SpawnAgent through the tools route against a real ledger process: a public named agent
created with the parent's spec less its labels and its message as a `peer` message; a template's
spec copied; a shared workspace where the child's files land in the parent's home and a path
out of it is refused; and every refusal (unknown preset or template, a private child without a
message, a public named agent without an id or with a taken one, too many children), each
writing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.ingress.conftest import Api, new_agent_id, until

SPEC: dict[str, Any] = {"instructions": "Lead the team.", "labels": {"team": "core"}}


async def spawn(api: Api, parent: str, **args: Any) -> Any:
    return await api.tool(parent, "SpawnAgent", args)


async def exists(api: Api, agent_id: str) -> bool:
    return (await api.http.get(f"/v1/agents/{agent_id}", headers=api.operator)).status_code == 200


def error_kind(answer: Any) -> str:
    return str(answer.json()["error"]["kind"])


async def test_a_public_named_agent_gets_the_parents_spec_less_labels(api: Api) -> None:
    parent = (await api.create_agent(spec=SPEC))["agent_id"]
    child = new_agent_id()
    answer = await spawn(
        api, parent, kind="public_named", agent_id=child, initial_message="Watch the queue."
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result == {"agent_id": child, "loop": "builtin"}
    await until(lambda: exists(api, child))
    shown = (await api.http.get(f"/v1/agents/{child}", headers=api.operator)).json()
    assert shown["spec"]["instructions"] == "Lead the team."
    assert shown["spec"]["labels"] == {}
    assert shown["inbox_pending"] == 1
    again = await spawn(api, parent, kind="public_named", agent_id=child)
    assert again.status_code == 409
    assert error_kind(again) == "agent_exists"


async def test_a_template_and_a_preset_give_their_spec(api: Api) -> None:
    parent = (await api.create_agent())["agent_id"]
    template = (await api.create_agent(spec={"instructions": "Template."}))["agent_id"]
    put = await api.http.put(
        "/v1/presets/spawn-preset", headers=api.operator, json={"spec": {"instructions": "Preset."}}
    )
    assert put.status_code in (200, 201)
    from_template = await spawn(
        api, parent, kind="private_child", initial_message="One job", template=template
    )
    assert from_template.status_code == 200, from_template.text
    from_preset = await spawn(
        api, parent, kind="private_child", initial_message="Other job", preset="spawn-preset"
    )
    assert from_preset.status_code == 200, from_preset.text
    for answer, words in ((from_template, "Template."), (from_preset, "Preset.")):
        child = answer.json()["result"]["agent_id"]
        assert child.startswith(f"{parent}--")
        assert answer.json()["result"]["delegation"]["child_work_item_id"] is None
        await until(lambda c=child: exists(api, c))
        spec = (await api.http.get(f"/v1/agents/{child}", headers=api.operator)).json()["spec"]
        assert spec["instructions"] == words


async def test_a_shared_workspace_is_the_parents_home(api: Api, agent_home: Path) -> None:
    parent = (await api.create_agent())["agent_id"]
    answer = await spawn(
        api, parent, kind="private_child", initial_message="Edit notes", workspace_mode="shared"
    )
    assert answer.status_code == 200, answer.text
    child = answer.json()["result"]["agent_id"]
    await until(lambda: exists(api, child))
    wrote = await api.tool(child, "WriteFile", {"path": "notes.md", "content": "from the child"})
    assert wrote.status_code == 200, wrote.text
    assert (agent_home / parent / "notes.md").read_text() == "from the child"
    escaped = await api.tool(child, "WriteFile", {"path": "../x.md", "content": "no"})
    assert escaped.status_code == 403
    assert not (agent_home / "x.md").exists()


async def test_refusals_write_nothing(api: Api) -> None:
    parent = (await api.create_agent())["agent_id"]
    cases = [
        (
            {"kind": "private_child", "initial_message": "x", "preset": "no-such"},
            404,
            "preset_not_found",
        ),
        (
            {"kind": "private_child", "initial_message": "x", "template": "no-such"},
            404,
            "agent_not_found",
        ),
        ({"kind": "private_child"}, 400, "invalid_tool_input"),
        ({"kind": "public_named"}, 400, "invalid_tool_input"),
        ({"kind": "public_named", "agent_id": parent}, 409, "agent_exists"),
    ]
    for args, status, kind in cases:
        answer = await spawn(api, parent, **args)
        assert (answer.status_code, error_kind(answer)) == (status, kind), (args, answer.text)
    assert not (await api.http.get(f"/v1/agents/{parent}/history", headers=api.operator)).json()[
        "events"
    ][1:]


async def test_too_many_children(api: Api) -> None:
    parent = (await api.create_agent())["agent_id"]
    for n in range(8):  # LONGRUN_MAX_CHILDREN's default
        answer = await spawn(api, parent, kind="private_child", initial_message=f"job {n}")
        assert answer.status_code == 200, answer.text
    refused = await spawn(api, parent, kind="private_child", initial_message="one more")
    assert refused.status_code == 409
    assert error_kind(refused) == "too_many_children"
    assert refused.json()["error"]["details"]["limit"] == 8
    public = await spawn(api, parent, kind="public_named", agent_id=new_agent_id())
    assert public.status_code == 200, public.text  # not a private child


async def test_send_message_to_parent_children_and_listed_peers_only(api: Api) -> None:
    stranger = (await api.create_agent())["agent_id"]
    friend = (await api.create_agent())["agent_id"]
    parent = (await api.create_agent(spec={"peers": [friend]}))["agent_id"]
    answer = await spawn(api, parent, kind="private_child", initial_message="Help me")
    child = answer.json()["result"]["agent_id"]
    await until(lambda: exists(api, child))
    down = await api.tool(parent, "SendMessage", {"to_agent": child, "text": "Status?"})
    assert down.status_code == 200, down.text
    asked = down.json()["result"]["message_id"]
    up = await api.tool(
        child, "SendMessage", {"to_agent": parent, "text": "Half done.", "reply_to": asked}
    )
    assert up.status_code == 200, up.text
    listed = await api.tool(parent, "SendMessage", {"to_agent": friend, "text": "Hello"})
    assert listed.status_code == 200, listed.text
    refused = await api.tool(parent, "SendMessage", {"to_agent": stranger, "text": "Hi"})
    assert refused.status_code == 403
    assert error_kind(refused) == "peer_not_allowed"
    back = await api.tool(friend, "SendMessage", {"to_agent": parent, "text": "Hi"})
    assert back.status_code == 403  # peers are listed one way

    async def answered() -> bool:
        events = (await api.http.get(f"/v1/agents/{parent}/history", headers=api.operator)).json()[
            "events"
        ]
        got = [e for e in events if e["type"] == "peer_message_received"]
        return bool(got) and got[0]["data"]["reply_to"] == asked

    await until(answered)
    shown = (await api.http.get(f"/v1/agents/{stranger}", headers=api.operator)).json()
    assert shown["inbox_pending"] == 0
