"""The `openai` provider: any OpenAI-compatible chat-completions endpoint with tool calling,
through the official SDK. The stable prefix (system prompt, then the tools) comes first in every
request, so endpoints that cache prompt prefixes reuse it across turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import openai
from openai import AsyncOpenAI

from services.turn_executor.providers import (
    ChatMessage,
    ProviderConfig,
    ProviderError,
    ProviderRound,
    ToolCall,
    ToolSpec,
)
from services.turn_executor.providers.failures import (
    connection_failure,
    status_failure,
    timeout_failure,
)
from shared.domain.usage import Usage

NO_KEY = "unused"
"""Local OpenAI-compatible servers often take no key, but the SDK refuses to start without one."""


def _tool_call(raw: Any, position: int) -> ToolCall | None:
    function = getattr(raw, "function", None)
    if function is None:
        return None  # custom (non-function) tool calls name no tool of ours
    call_id = getattr(raw, "id", None) or f"call_{position}"
    return ToolCall(id=call_id, name=function.name or "", arguments=function.arguments or "")


def usage_of(completion: Any) -> Usage:
    """`prompt_tokens` counts cached tokens too; `cached_tokens` says how many of them."""
    usage = getattr(completion, "usage", None)
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        cached_input_tokens=cached,
        output_tokens=usage.completion_tokens or 0,
    )


def round_from_completion(completion: Any) -> ProviderRound:
    """Map one chat completion onto a round; an answer without a choice is a provider error."""
    choices = getattr(completion, "choices", None) or []
    if not choices:
        raise ProviderError("the model endpoint answered without any choice")
    choice = choices[0]
    message = choice.message
    calls = [_tool_call(raw, i) for i, raw in enumerate(message.tool_calls or [])]
    return ProviderRound(
        text=message.content or "",
        tool_calls=tuple(call for call in calls if call is not None),
        finish_reason=str(choice.finish_reason or "stop"),
        usage=usage_of(completion),
    )


def _failure(exc: openai.OpenAIError, timeout_s: float) -> ProviderError:
    if isinstance(exc, openai.APITimeoutError):
        return timeout_failure(timeout_s)
    if isinstance(exc, openai.APIStatusError):
        return status_failure(exc)
    if isinstance(exc, openai.APIConnectionError):
        return connection_failure(exc)
    return ProviderError(f"model request failed: {exc}")


class OpenAIProvider:
    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.model = config.model
        self.timeout_s = config.timeout_s
        self.client = AsyncOpenAI(
            base_url=config.base_url,
            api_key=config.api_key or NO_KEY,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.config.temperature is not None:
            options["temperature"] = self.config.temperature
        if self.config.max_output_tokens is not None:
            # `max_tokens`: the name every compatible endpoint understands.
            options["max_tokens"] = self.config.max_output_tokens
        return options

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        try:
            completion = await self.client.chat.completions.create(
                model=self.model,
                messages=cast(Any, list(messages)),
                tools=cast(Any, list(tools)),
                tool_choice="auto",
                **self._options(),
            )
        except openai.OpenAIError as exc:
            raise _failure(exc, self.timeout_s) from exc
        return round_from_completion(completion)

    async def close(self) -> None:
        await self.client.close()
