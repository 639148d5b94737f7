"""Chat-completions messages and tools as an Anthropic Messages API request, and a Messages API
answer as a round. Pure: the `anthropic` provider sends what this builds.

The request keeps the prompt cacheable: tools, then the system prompt, each closed by a cache
breakpoint, so the stable prefix is written to the cache once per spec version and read by every
later call (the system prompt and tools are byte-identical across turns).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from services.turn_executor.providers import ChatMessage, ProviderRound, ToolCall, ToolSpec
from shared.domain.usage import Usage

CACHE_BREAKPOINT = {"type": "ephemeral"}
DEFAULT_MAX_TOKENS = 4096
"""The Messages API needs a bound on the answer; a spec's `max_output_tokens` overrides it."""
FINISH_REASONS = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}


def convert_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Each function tool as `{name, description, input_schema}`; the last closes the cached
    prefix of tool definitions."""
    converted: list[dict[str, Any]] = []
    for spec in tools:
        function = spec["function"]
        tool = {
            "name": function["name"],
            "description": function.get("description", ""),
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        converted.append(tool)
    if converted:
        converted[-1] = {**converted[-1], "cache_control": CACHE_BREAKPOINT}
    return converted


def _arguments(raw: str) -> dict[str, Any]:
    """A tool_use block needs an object: arguments another model emitted as malformed JSON
    (answered as `invalid_tool_input` already) are kept as text under `_raw`."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _blocks(message: ChatMessage) -> tuple[str, list[dict[str, Any]]]:
    """The Anthropic role and content blocks of one chat-completions message."""
    role, content = message["role"], message.get("content")
    if role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": message.get("tool_call_id", ""),
            "content": str(content or ""),
        }
        return "user", [block]
    blocks: list[dict[str, Any]] = []
    if content:
        blocks.append({"type": "text", "text": str(content)})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": _arguments(function.get("arguments") or ""),
            }
        )
    return ("assistant" if role == "assistant" else "user"), blocks


def convert_messages(
    messages: Sequence[ChatMessage],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages). Leading system messages become the system prompt, closed by a
    cache breakpoint; consecutive messages of one role merge, so all the tool results of a round
    travel in the one user message that follows its tool calls."""
    system: list[dict[str, Any]] = []
    index = 0
    while index < len(messages) and messages[index]["role"] == "system":
        system.append({"type": "text", "text": str(messages[index].get("content") or "")})
        index += 1
    if system:
        system[-1] = {**system[-1], "cache_control": CACHE_BREAKPOINT}
    converted: list[dict[str, Any]] = []
    for message in messages[index:]:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if converted and converted[-1]["role"] == role:
            converted[-1]["content"] += blocks
        else:
            converted.append({"role": role, "content": blocks})
    return system, converted


def build_request(
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    model: str,
    temperature: float | None,
    max_output_tokens: int | None,
) -> dict[str, Any]:
    """The keyword arguments of `messages.create`."""
    system, converted = convert_messages(messages)
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": converted,
    }
    if system:
        request["system"] = system
    if tools:
        request["tools"] = convert_tools(tools)
    if temperature is not None:
        request["temperature"] = temperature
    return request


def usage_of(message: Any) -> Usage:
    """Anthropic counts uncached, cache-written and cache-read input apart; all three are input."""
    usage = getattr(message, "usage", None)
    if usage is None:
        return Usage()
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    return Usage(
        input_tokens=(usage.input_tokens or 0) + read + written,
        cached_input_tokens=read,
        output_tokens=usage.output_tokens or 0,
    )


def round_from_message(message: Any) -> ProviderRound:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in getattr(message, "content", None) or []:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
    stop = str(getattr(message, "stop_reason", None) or "end_turn")
    return ProviderRound(
        text="\n\n".join(texts),
        tool_calls=tuple(calls),
        finish_reason=FINISH_REASONS.get(stop, stop),
        usage=usage_of(message),
    )
