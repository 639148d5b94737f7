"""The `anthropic` provider: the Messages API through the official SDK, with the conversation
and tools converted from the chat-completions shape (`anthropic_wire`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic
from anthropic import AsyncAnthropic

from services.turn_executor.providers import (
    ChatMessage,
    ProviderConfig,
    ProviderError,
    ProviderRound,
    ToolSpec,
)
from services.turn_executor.providers.anthropic_wire import build_request, round_from_message
from services.turn_executor.providers.failures import (
    connection_failure,
    status_failure,
    timeout_failure,
)

NO_KEY = "unused"
"""A gateway in front of the API may take no key, but the SDK refuses to start without one."""


def _failure(exc: anthropic.AnthropicError, timeout_s: float) -> ProviderError:
    if isinstance(exc, anthropic.APITimeoutError):
        return timeout_failure(timeout_s)
    if isinstance(exc, anthropic.APIStatusError):
        return status_failure(exc)
    if isinstance(exc, anthropic.APIConnectionError):
        return connection_failure(exc)
    return ProviderError(f"model request failed: {exc}")


class AnthropicProvider:
    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.client = AsyncAnthropic(
            base_url=config.base_url,
            api_key=config.api_key or NO_KEY,
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        request = build_request(
            messages,
            tools,
            model=self.config.model,
            temperature=self.config.temperature,
            max_output_tokens=self.config.max_output_tokens,
        )
        try:
            message: Any = await self.client.messages.create(**request)
        except anthropic.AnthropicError as exc:
            raise _failure(exc, self.config.timeout_s) from exc
        return round_from_message(message)

    async def close(self) -> None:
        await self.client.close()
