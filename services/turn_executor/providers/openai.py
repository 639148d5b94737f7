"""The `openai` provider: any OpenAI-compatible chat-completions endpoint with tool calling,
through the official SDK (which retries 429 and 5xx answers with back-off, honouring
Retry-After)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import openai
from openai import AsyncOpenAI

from services.turn_executor.providers import (
    ChatMessage,
    ProviderError,
    ProviderRound,
    ToolCall,
    ToolSpec,
)

NO_KEY = "unused"
"""Local OpenAI-compatible servers often take no key, but the SDK refuses to start without one."""


def _tool_call(raw: Any, position: int) -> ToolCall | None:
    function = getattr(raw, "function", None)
    if function is None:
        return None  # custom (non-function) tool calls name no tool of ours
    call_id = getattr(raw, "id", None) or f"call_{position}"
    return ToolCall(id=call_id, name=function.name or "", arguments=function.arguments or "")


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
    )


def _describe(exc: openai.OpenAIError, timeout_s: float) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return f"the model endpoint did not answer within {timeout_s:g}s"
    if isinstance(exc, openai.APIStatusError):
        return f"the model endpoint answered {exc.status_code}: {exc.message}"
    if isinstance(exc, openai.APIConnectionError):
        return f"the model endpoint is unreachable: {exc.message}"
    return f"model request failed: {exc}"


class OpenAIProvider:
    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout_s: float,
        max_retries: int,
    ) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self.client = AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or NO_KEY,
            timeout=timeout_s,
            max_retries=max_retries,
        )

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        try:
            completion = await self.client.chat.completions.create(
                model=self.model,
                messages=cast(Any, list(messages)),
                tools=cast(Any, list(tools)),
                tool_choice="auto",
            )
        except openai.OpenAIError as exc:
            raise ProviderError(_describe(exc, self.timeout_s)) from exc
        return round_from_completion(completion)

    async def close(self) -> None:
        await self.client.close()
