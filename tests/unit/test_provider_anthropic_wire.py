"""The conversation and tools as an Anthropic Messages API request, and its answer as a round:
tool schemas carried over faithfully, tool results paired with their calls, the stable prefix
closed by cache breakpoints, usage counted by the common rule."""

from __future__ import annotations

import json

from anthropic.types import Message

from services.turn_executor.prompt import system_prompt, tool_specs
from services.turn_executor.providers.anthropic_wire import (
    CACHE_BREAKPOINT,
    build_request,
    round_from_message,
)
from shared.domain.usage import Usage

CONVERSATION = [
    {"role": "system", "content": "You are agent-1, a long-lived agent"},
    {"role": "user", "content": "# WorkItems of agent-1"},
    {"role": "user", "content": "Operator message (m1):\nship it"},
    {
        "role": "assistant",
        "content": "On it.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "CreateWorkItem", "arguments": '{"objective": "Ship"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "GetWorkItem", "arguments": '{"work_item_id": '},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"status": "success"}'},
    {"role": "tool", "tool_call_id": "c2", "content": '{"status": "error"}'},
]


def test_tools_keep_their_schemas_and_close_the_cached_prefix() -> None:
    specs = tool_specs()
    request = build_request([], specs, model="m", temperature=None, max_output_tokens=None)
    tools = request["tools"]
    assert [t["name"] for t in tools] == [s["function"]["name"] for s in specs]
    for tool, spec in zip(tools, specs, strict=True):
        assert tool["input_schema"] == spec["function"]["parameters"]
        assert tool["description"] == spec["function"]["description"]
    assert [t.get("cache_control") for t in tools[:-1]] == [None] * (len(tools) - 1)
    assert tools[-1]["cache_control"] == CACHE_BREAKPOINT


def test_the_system_prompt_is_cached_and_byte_stable() -> None:
    messages = [{"role": "system", "content": system_prompt("agent-1")}]
    first = build_request(messages, tool_specs(), model="m", temperature=0.2, max_output_tokens=900)
    again = build_request(messages, tool_specs(), model="m", temperature=0.2, max_output_tokens=900)
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    (block,) = first["system"]
    assert block == {
        "type": "text",
        "text": system_prompt("agent-1"),
        "cache_control": CACHE_BREAKPOINT,
    }
    assert (first["temperature"], first["max_tokens"], first["model"]) == (0.2, 900, "m")


def test_tool_calls_and_results_pair_up_in_alternating_turns() -> None:
    request = build_request(CONVERSATION, [], model="m", temperature=None, max_output_tokens=None)
    assert "tools" not in request
    assert "temperature" not in request
    assert request["max_tokens"] > 0
    user, assistant, results = request["messages"]
    assert user["role"] == "user"
    assert [b["text"] for b in user["content"]] == [
        "# WorkItems of agent-1",
        "Operator message (m1):\nship it",
    ]
    assert assistant["role"] == "assistant"
    text, create, get = assistant["content"]
    assert text == {"type": "text", "text": "On it."}
    assert create == {
        "type": "tool_use",
        "id": "c1",
        "name": "CreateWorkItem",
        "input": {"objective": "Ship"},
    }
    assert get["input"] == {"_raw": '{"work_item_id": '}
    assert results["role"] == "user"
    assert [(b["type"], b["tool_use_id"]) for b in results["content"]] == [
        ("tool_result", "c1"),
        ("tool_result", "c2"),
    ]


def test_an_answer_becomes_a_round_with_usage_by_the_common_rule() -> None:
    message = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [
                {"type": "text", "text": "Recording it."},
                {
                    "type": "tool_use",
                    "id": "tu_1",
                    "name": "CreateWorkItem",
                    "input": {"objective": "Ship"},
                },
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 30,
                "output_tokens": 12,
                "cache_read_input_tokens": 900,
                "cache_creation_input_tokens": 70,
            },
        }
    )
    answer = round_from_message(message)
    assert answer.text == "Recording it."
    (call,) = answer.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "tu_1",
        "CreateWorkItem",
        {"objective": "Ship"},
    )
    assert answer.finish_reason == "tool_calls"
    assert answer.usage == Usage(input_tokens=1000, cached_input_tokens=900, output_tokens=12)
