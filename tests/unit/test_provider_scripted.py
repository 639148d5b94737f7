"""The scripted provider: a deterministic policy that works the WorkItem loop from the projected
prompt, and a script-file mode that replays rounds per agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.turn_executor.projection import project_turn
from services.turn_executor.promotion import assistant_message, tool_message
from services.turn_executor.prompt import system_prompt
from services.turn_executor.providers import ProviderError, ProviderRound
from services.turn_executor.providers.conversation import read_conversation
from services.turn_executor.providers.script_file import (
    ScriptFileProvider,
    ScriptRound,
    load_script,
)
from services.turn_executor.providers.scripted import (
    ScriptedProvider,
    objective_of,
    plan_of,
    policy_round,
    todos_of,
)
from shared.domain.records import InboxMessage, MessageOrigin, WorkItem
from shared.domain.tools import ToolEnvelope
from tests.builders import (
    AGENT_ID,
    at,
    make_agent,
    make_plan_artifact,
    make_todo,
    make_wait,
    make_work_item,
    work_item_id,
)

NOW = at(minutes=10)
REQUEST = (
    "Draft the release notes for 2.0. Check every link, then wait for the approval callback. "
    "Then publish them."
)


def request(text: str = REQUEST) -> InboxMessage:
    return InboxMessage.model_validate(
        {
            "id": "msg_1",
            "agent_id": AGENT_ID,
            "origin": MessageOrigin.OPERATOR,
            "text": text,
            "created_at": at(minutes=1),
        }
    )


def conversation(
    items: list[WorkItem] | None = None,
    *,
    current: str | None = None,
    inbox: list[InboxMessage] | None = None,
    waits: list[Any] | None = None,
) -> list[dict[str, Any]]:
    agent = make_agent(current_work_item_id=current)
    prompt = project_turn(agent, items or [], waits or [], inbox or [], NOW)
    return [{"role": "system", "content": system_prompt(AGENT_ID)}, *map(dict, prompt)]


def answered(
    messages: list[dict[str, Any]], answer: ProviderRound, results: list[ToolEnvelope]
) -> list[dict[str, Any]]:
    """The conversation after a round: the assistant's calls and one answer per call."""
    calls = [(c.id, c.name, c.arguments) for c in answer.tool_calls]
    out = [*messages, assistant_message(answer.text, calls)]
    out += [tool_message(c.id, r) for c, r in zip(answer.tool_calls, results, strict=True)]
    return out


def calls_of(answer: ProviderRound) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, json.loads(c.arguments)) for c in answer.tool_calls]


def working_item(states: list[str], texts: list[str] | None = None, **overrides: Any) -> WorkItem:
    texts = texts or ["Draft the notes", "Check every link", "Publish them"]
    plan = plan_of(REQUEST, texts)
    fields: dict[str, Any] = {
        "plan_status": "ready",
        "todo_list": [make_todo(t, s) for t, s in zip(texts, states, strict=True)],
        "plan_artifact": make_plan_artifact(preview=plan, bytes=len(plan)),
    }
    fields.update(overrides)
    return make_work_item(**fields)


def view(item: WorkItem, *, is_current: bool) -> dict[str, Any]:
    return {**item.model_dump(mode="json"), "is_current": is_current}


def test_a_request_becomes_an_objective_and_two_to_four_todos() -> None:
    assert objective_of(REQUEST) == "Draft the release notes for 2.0"
    assert todos_of(REQUEST) == [
        "Draft the release notes for 2.0",
        "Check every link",
        "Wait for the approval callback",
        "Publish them",
    ]
    assert todos_of("Summarize the incident report.") == [
        "Work out the approach for: Summarize the incident report",
        "Carry out: Summarize the incident report",
    ]
    many = "Do a thing. Do b thing. Do c thing. Do d thing. Do e thing."
    assert len(todos_of(many)) == 4


def test_an_operator_request_is_recorded_with_a_plan_and_todos() -> None:
    answer = policy_round(conversation(inbox=[request()]))
    ((name, args),) = calls_of(answer)
    assert name == "CreateWorkItem"
    assert args["objective"] == "Draft the release notes for 2.0"
    assert args["plan_status"] == "ready"
    assert [t["text"] for t in args["todo_list"]] == todos_of(REQUEST)
    assert "## Progress" in args["plan"]
    assert "Check every link" in args["plan"]
    assert answer.text


def test_after_creating_it_picks_the_item_and_starts_the_first_todo() -> None:
    messages = conversation(inbox=[request()])
    first = policy_round(messages)
    created = working_item(["pending"] * 3)
    result = ToolEnvelope.success("CreateWorkItem", {"work_item": view(created, is_current=False)})
    second = policy_round(answered(messages, first, [result]))
    (pick, pick_args), (update, update_args) = calls_of(second)
    assert (pick, pick_args) == ("PickWorkItem", {"work_item_id": created.id})
    assert update == "UpdateWorkItem"
    assert [t["state"] for t in update_args["todo_list"]] == ["in_progress", "pending", "pending"]
    ids = [c.id for c in (*first.tool_calls, *second.tool_calls)]
    assert len(set(ids)) == len(ids)


def test_a_round_after_plain_updates_ends_the_turn_with_text_only() -> None:
    item = working_item(["in_progress", "pending", "pending"])
    messages = conversation([item], current=item.id)
    first = policy_round(messages)
    results = [ToolEnvelope.success(c.name, {}) for c in first.tool_calls]
    second = policy_round(answered(messages, first, results))
    assert second.tool_calls == ()
    assert second.finish_reason == "stop"
    assert second.text


def test_a_request_already_recorded_is_not_recorded_again() -> None:
    item = working_item(["pending"] * 3, objective=objective_of(REQUEST))
    answer = policy_round(conversation([item], inbox=[request()]))
    assert [name for name, _ in calls_of(answer)] == ["PickWorkItem"]


def test_one_todo_per_turn_with_a_plan_note() -> None:
    item = working_item(["completed", "in_progress", "pending"])
    answer = policy_round(conversation([item], current=item.id))
    (edit, edit_args), (update, update_args) = calls_of(answer)
    assert edit == "EditFile"
    assert edit_args["path"] == item.plan_artifact.path
    assert edit_args["new_text"].endswith("- done: Check every link")
    assert update == "UpdateWorkItem"
    states = [t["state"] for t in update_args["todo_list"]]
    assert states == ["completed", "completed", "in_progress"]


def mcp_spec(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def test_a_worked_todo_calls_the_first_mcp_tool_that_takes_text_about_it() -> None:
    item = working_item(["completed", "in_progress", "pending"])
    tools = [
        mcp_spec("CreateWorkItem", {"text": {"type": "string"}}),
        mcp_spec("web__fetch", {"url": {"type": "string"}}),
        mcp_spec("notes__lookup", {"text": {"type": "string"}}),
        mcp_spec("notes__echo", {"text": {"type": "string"}}),
    ]
    answer = policy_round(conversation([item], current=item.id), tools)
    assert [name for name, _ in calls_of(answer)] == ["EditFile", "UpdateWorkItem", "notes__lookup"]
    assert calls_of(answer)[-1][1] == {"text": "Check every link"}
    finishing = working_item(["completed", "completed", "in_progress"])
    answer = policy_round(conversation([finishing], current=finishing.id), tools)
    assert "notes__lookup" not in [name for name, _ in calls_of(answer)]


def test_the_wait_step_waits_for_an_external_callback() -> None:
    texts = ["Draft the notes", "Wait for the approval callback", "Publish them"]
    item = working_item(["completed", "in_progress", "pending"], texts)
    answer = policy_round(conversation([item], current=item.id))
    ((name, args),) = calls_of(answer)
    assert name == "WaitFor"
    assert args["wake"] == "external"
    assert "approval callback" in args["reason"]


def test_the_last_todo_completes_the_item_with_a_report_in_the_same_round() -> None:
    item = working_item(["completed", "completed", "in_progress"])
    answer = policy_round(conversation([item], current=item.id))
    (update, update_args), (complete, complete_args) = calls_of(answer)
    assert update == "UpdateWorkItem"
    assert {t["state"] for t in update_args["todo_list"]} == {"completed"}
    assert (complete, complete_args) == ("CompleteWorkItem", {"work_item_id": item.id})
    assert answer.text.startswith('Completed "Ship the release notes"')


def test_a_triggered_wait_is_reviewed_by_picking_the_item_and_clearing_its_blocker() -> None:
    texts = ["Draft the notes", "Wait for the approval callback", "Publish them"]
    item = working_item(["completed", "in_progress", "pending"], texts, blocked_by="Waiting")
    wait = make_wait(trigger_count=1, last_triggered_at=at(minutes=5))
    messages = conversation([item], waits=[wait])
    first = policy_round(messages)
    ((name, args),) = calls_of(first)
    assert name == "PickWorkItem"
    assert args["work_item_id"] == item.id
    assert args["clear_blocker"] is True
    picked = ToolEnvelope.success(
        "PickWorkItem", {"current_work_item": view(item, is_current=True)}
    )
    second = policy_round(answered(messages, first, [picked]))
    ((update, update_args),) = calls_of(second)
    assert update == "UpdateWorkItem"
    states = [t["state"] for t in update_args["todo_list"]]
    assert states == ["completed", "completed", "in_progress"]


def test_a_reviewed_trigger_is_not_reviewed_again() -> None:
    item = working_item(["pending"] * 3, blocked_by="Waiting")
    wait = make_wait(trigger_count=1, reviewed_trigger_count=1, last_triggered_at=at(minutes=5))
    answer = policy_round(conversation([item], waits=[wait]))
    assert answer.tool_calls == ()


def test_with_no_current_item_it_picks_the_first_queued_one() -> None:
    first = working_item(["pending"] * 3, id=work_item_id(1), updated_at=at(minutes=1))
    second = working_item(["pending"] * 3, id=work_item_id(2), updated_at=at(minutes=2))
    answer = policy_round(conversation([second, first]))
    assert calls_of(answer) == [("PickWorkItem", {"work_item_id": first.id})]


def test_nothing_runnable_means_a_text_only_round() -> None:
    answer = policy_round(conversation())
    assert answer.tool_calls == ()
    assert "Nothing is runnable" in answer.text


def test_the_conversation_reader_sees_what_the_projection_shows() -> None:
    item = working_item(["completed", "in_progress", "pending"])
    seen = read_conversation(conversation([item], current=item.id, inbox=[request()]))
    assert seen.agent_id == AGENT_ID
    assert seen.current is not None
    assert seen.current.id == item.id
    assert seen.current.runnable
    assert seen.current.todos == [
        ("completed", "Draft the notes"),
        ("in_progress", "Check every link"),
        ("pending", "Publish them"),
    ]
    assert seen.current.plan_path == item.plan_artifact.path
    assert seen.current.has_progress_section
    assert seen.requests == [REQUEST]


async def test_the_scripted_provider_answers_the_policy_round() -> None:
    messages = conversation(inbox=[request()])
    answer = await ScriptedProvider().complete(messages, [])
    assert answer == policy_round(messages)


# ---------------------------------------------------------------- script-file mode


def script(*rounds: dict[str, Any]) -> ScriptFileProvider:
    return ScriptFileProvider([ScriptRound.model_validate(r) for r in rounds])


async def test_script_rounds_replay_in_order_per_agent() -> None:
    provider = script({"text": "one"}, {"text": "two"})
    ours = conversation()
    theirs = [{"role": "system", "content": system_prompt("agent-2")}]
    assert (await provider.complete(ours, [])).text == "one"
    assert (await provider.complete(theirs, [])).text == "one"
    assert (await provider.complete(ours, [])).text == "two"
    over = await provider.complete(ours, [])
    assert over.tool_calls == ()
    assert "script is over" in over.text


async def test_script_placeholders_name_the_current_and_created_items() -> None:
    item = working_item(["pending"] * 3)
    provider = script(
        {
            "text": "done",
            "tool_calls": [
                {"name": "CompleteWorkItem", "arguments": {"work_item_id": "$CURRENT"}},
                {"name": "ReadFile", "arguments": {"path": "$PLAN"}},
                {"name": "GetWorkItem", "arguments": "{not json"},
            ],
        }
    )
    answer = await provider.complete(conversation([item], current=item.id), [])
    assert [(c.name, c.arguments) for c in answer.tool_calls] == [
        ("CompleteWorkItem", json.dumps({"work_item_id": item.id})),
        ("ReadFile", json.dumps({"path": item.plan_artifact.path})),
        ("GetWorkItem", "{not json"),
    ]
    assert answer.finish_reason == "tool_calls"


async def test_a_script_error_round_is_a_provider_error() -> None:
    provider = script({"error": "the model is down"})
    with pytest.raises(ProviderError, match="the model is down"):
        await provider.complete(conversation(), [])


def test_scripts_load_from_json_and_yaml(tmp_path: Path) -> None:
    as_json = tmp_path / "script.json"
    as_json.write_text(json.dumps([{"text": "hi", "tool_calls": [{"name": "ListWorkItems"}]}]))
    as_yaml = tmp_path / "script.yaml"
    as_yaml.write_text("- text: hi\n  tool_calls:\n    - name: ListWorkItems\n")
    assert load_script(as_json) == load_script(as_yaml)
    assert load_script(as_yaml)[0].tool_calls[0].name == "ListWorkItems"


def test_a_script_with_unknown_fields_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "script.json"
    bad.write_text(json.dumps([{"txt": "typo"}]))
    with pytest.raises(ValueError, match="txt"):
        load_script(bad)
