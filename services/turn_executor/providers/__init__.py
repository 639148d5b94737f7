"""The model provider port: one chat-completions round with tools, and the factory that picks one.

Messages and tool specs are in the OpenAI chat-completions shape, the lingua franca every provider
speaks (the `anthropic` provider converts them); a round answers with the assistant's text, its
tool calls (arguments as the raw JSON string the model emitted, so malformed JSON reaches the turn
instead of crashing the provider), the finish reason and the tokens the call used.

A provider makes one attempt per `complete`: retrying is the turn's decision (`model_calls`), so a
provider maps what went wrong onto a `ModelFailure` that says whether a retry may help.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from shared.domain.usage import Usage

ChatMessage = Mapping[str, Any]
ToolSpec = Mapping[str, Any]
ProviderKind = Literal["scripted", "openai", "anthropic"]
NO_USAGE = Usage()


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
    usage: Usage = NO_USAGE


class ProviderError(Exception):
    """The model could not answer this round; the turn ends as failed with this message."""


class ModelFailure(ProviderError):
    """A model call failed on the wire: `transient` failures (429, 5xx, timeouts, refused or
    reset connections) may succeed on retry, the others never will."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status
        headers = headers or {}
        self.retry_after = headers.get("retry-after")
        """`Retry-After` as the provider sent it (read with the turn's clock, not here)."""
        self.retry_after_ms = headers.get("retry-after-ms")


class Provider(Protocol):
    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """What building a provider needs, so providers never read settings themselves."""

    kind: ProviderKind = "scripted"
    base_url: str | None = None
    api_key: str | None = None
    model: str = "gpt-4o-mini"
    timeout_s: float = 60.0
    max_retries: int = 3
    """Retries inside the SDK; the executor sets 0 and retries itself (`model_calls`)."""
    temperature: float | None = None
    max_output_tokens: int | None = None
    script_file: Path | None = None
    latency_ms: int = 0
    """Scripted only: a fixed delay per round, standing in for model latency (benchmarks)."""

    @property
    def label(self) -> str:
        """`provider/name`, how usage and metrics name this model."""
        return f"{self.kind}/{self.model}"


def build_provider(config: ProviderConfig) -> Provider:
    """The configured provider; a script file switches `scripted` to script mode."""
    # Imported on demand: each provider module imports this one, and only one is ever used.
    if config.kind == "openai":
        from services.turn_executor.providers.openai import OpenAIProvider  # noqa: PLC0415

        return OpenAIProvider(config)
    if config.kind == "anthropic":
        from services.turn_executor.providers.anthropic import AnthropicProvider  # noqa: PLC0415

        return AnthropicProvider(config)
    from services.turn_executor.providers.script_file import ScriptFileProvider  # noqa: PLC0415
    from services.turn_executor.providers.scripted import ScriptedProvider  # noqa: PLC0415

    if config.script_file is not None:
        return ScriptFileProvider.from_file(config.script_file, latency_ms=config.latency_ms)
    return ScriptedProvider(latency_ms=config.latency_ms)
