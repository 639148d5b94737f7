"""The model provider port: one chat-completions round with tools, and the factory that picks one.

Messages and tool specs are in the OpenAI chat-completions shape, the lingua franca every provider
speaks; a round answers with the assistant's text, its tool calls (arguments as the raw JSON
string the model emitted, so malformed JSON reaches the turn instead of crashing the provider)
and the finish reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

ChatMessage = Mapping[str, Any]
ToolSpec = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The raw JSON text of the arguments, unparsed."""


@dataclass(frozen=True, slots=True)
class ProviderRound:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"


class ProviderError(Exception):
    """The model could not answer this round; the turn ends as failed with this message."""


class Provider(Protocol):
    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """What building a provider needs, so providers never read settings themselves."""

    kind: Literal["scripted", "openai"] = "scripted"
    base_url: str | None = None
    api_key: str | None = None
    model: str = "gpt-4o-mini"
    timeout_s: float = 60.0
    max_retries: int = 3
    script_file: Path | None = None
    latency_ms: int = 0
    """Scripted only: a fixed delay per round, standing in for model latency (benchmarks)."""


def build_provider(config: ProviderConfig) -> Provider:
    """The configured provider; a script file switches `scripted` to script mode."""
    # Imported on demand: each provider module imports this one, and only one is ever used.
    if config.kind == "openai":
        from services.turn_executor.providers.openai import OpenAIProvider  # noqa: PLC0415

        return OpenAIProvider(
            base_url=config.base_url,
            api_key=config.api_key,
            model=config.model,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
        )
    from services.turn_executor.providers.script_file import ScriptFileProvider  # noqa: PLC0415
    from services.turn_executor.providers.scripted import ScriptedProvider  # noqa: PLC0415

    if config.script_file is not None:
        return ScriptFileProvider.from_file(config.script_file, latency_ms=config.latency_ms)
    return ScriptedProvider(latency_ms=config.latency_ms)
