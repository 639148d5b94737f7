"""The scripted provider's script-file mode (LONGRUN_SCRIPT_FILE): replays a JSON or YAML list of
rounds, each agent from the start, with placeholders for the ids a script cannot know."""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from services.turn_executor.providers import (
    ChatMessage,
    ProviderError,
    ProviderRound,
    ToolCall,
    ToolSpec,
)
from services.turn_executor.providers.conversation import Seen, read_conversation


class ScriptCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """An object, or a raw string sent verbatim (to exercise malformed JSON)."""


class ScriptRound(BaseModel):
    """One scripted model answer: text and tool calls, or an error, after an optional delay."""

    model_config = ConfigDict(extra="forbid")
    text: str = ""
    tool_calls: list[ScriptCall] = Field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    sleep_ms: int = Field(default=0, ge=0)


_ROUNDS = TypeAdapter(list[ScriptRound])


def load_script(path: Path) -> list[ScriptRound]:
    """A JSON or YAML list of rounds (LONGRUN_SCRIPT_FILE)."""
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        return _ROUNDS.validate_python(importlib.import_module("yaml").safe_load(text))
    return _ROUNDS.validate_json(text)


def _fill(value: Any, names: dict[str, str]) -> Any:
    """Replace $AGENT, $CURRENT, $CREATED and $PLAN inside string arguments."""
    if isinstance(value, str):
        for name, actual in names.items():
            value = value.replace(name, actual)
        return value
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


def scripted_round(script: ScriptRound, seen: Seen) -> ProviderRound:
    current = seen.current
    names = {
        "$AGENT": seen.agent_id,
        "$CURRENT": current.id if current else "",
        "$CREATED": seen.created[-1] if seen.created else "",
        "$PLAN": (current.plan_path or "") if current else "",
    }
    calls = []
    for n, call in enumerate(script.tool_calls):
        filled = _fill(call.arguments, names)
        raw = filled if isinstance(filled, str) else json.dumps(filled)
        calls.append(ToolCall(id=f"call_{seen.rounds}_{n}", name=call.name, arguments=raw))
    reason = script.finish_reason or ("tool_calls" if calls else "stop")
    return ProviderRound(
        text=_fill(script.text, names), tool_calls=tuple(calls), finish_reason=reason
    )


class ScriptFileProvider:
    """Replays the rounds in order, each agent from the start; past the end it answers text only."""

    def __init__(self, rounds: Sequence[ScriptRound], *, latency_ms: int = 0) -> None:
        self.rounds = list(rounds)
        self.latency_s = latency_ms / 1000
        self.cursors: dict[str, int] = {}

    @classmethod
    def from_file(cls, path: Path, *, latency_ms: int = 0) -> ScriptFileProvider:
        return cls(load_script(path), latency_ms=latency_ms)

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        seen = read_conversation(messages)
        position = self.cursors.get(seen.agent_id, 0)
        self.cursors[seen.agent_id] = position + 1
        if position >= len(self.rounds):
            return ProviderRound(text="The script is over; nothing more to do.")
        script = self.rounds[position]
        delay = self.latency_s + script.sleep_ms / 1000
        if delay:
            await asyncio.sleep(delay)
        if script.error is not None:
            raise ProviderError(script.error)
        return scripted_round(script, seen)

    async def close(self) -> None:
        return None
