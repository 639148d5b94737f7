"""The openai provider against a real HTTP server on 127.0.0.1 that speaks the chat-completions
wire format: tool calls, finish reasons, error bodies, retries and timeouts through the SDK."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pytest
import uvicorn
from openai.types.chat import ChatCompletion

from services.turn_executor.prompt import tool_specs
from services.turn_executor.providers import ProviderConfig, ProviderError, build_provider
from services.turn_executor.providers.openai import OpenAIProvider, round_from_completion

Reply = tuple[int, dict[str, Any], dict[str, str]]
"""HTTP status, JSON body, extra headers."""


def completion(
    content: str | None, tool_calls: list[dict[str, Any]] | None = None, finish: str = "stop"
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "stub-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


@dataclass
class ChatServer:
    """A chat-completions endpoint: answers queued replies in order, records every request."""

    replies: list[Reply] = field(default_factory=list)
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    base_url: str = ""

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        self.requests.append({"path": scope["path"], **json.loads(body or b"{}")})
        self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await asyncio.sleep(self.delay_s)
        status, payload, extra = self.replies.pop(0) if self.replies else (200, completion(""), {})
        raw = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        headers += [(k.encode(), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


class ServedApp(Protocol):
    """An ASGI model endpoint that learns the address it is served at."""

    base_url: str

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[..., Any], send: Any
    ) -> None: ...


Served = TypeVar("Served", bound=ServedApp)


@contextlib.asynccontextmanager
async def serving(app: Served) -> AsyncIterator[Served]:
    """Serve `app` with uvicorn on a free loopback port for the duration of the block."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off")
    running = uvicorn.Server(config)
    task = asyncio.create_task(running.serve())
    for _ in range(1000):
        if running.started:
            break
        await asyncio.sleep(0.01)
    port = running.servers[0].sockets[0].getsockname()[1]
    app.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield app
    finally:
        running.should_exit = True
        running.force_exit = True  # do not wait for a deliberately slow answer
        await task


@pytest.fixture
async def server() -> AsyncIterator[ChatServer]:
    async with serving(ChatServer()) as app:
        yield app


def provider(server: ChatServer, *, timeout_s: float = 5.0, retries: int = 2) -> OpenAIProvider:
    built = build_provider(
        ProviderConfig(
            kind="openai",
            base_url=server.base_url,
            api_key="sk-test",
            model="stub-model",
            timeout_s=timeout_s,
            max_retries=retries,
        )
    )
    assert isinstance(built, OpenAIProvider)
    return built


MESSAGES = [{"role": "system", "content": "You are agent-1"}, {"role": "user", "content": "hi"}]


async def test_tool_calls_come_back_with_raw_arguments_and_the_finish_reason(server) -> None:
    calls = [
        function_call("call_a", "CreateWorkItem", '{"objective": "Ship it"}'),
        function_call("call_b", "GetWorkItem", '{"work_item_id": '),
    ]
    server.replies.append((200, completion("On it.", calls, "tool_calls"), {}))
    llm = provider(server)
    answer = await llm.complete(MESSAGES, tool_specs())
    await llm.close()
    assert answer.text == "On it."
    assert answer.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [
        ("call_a", "CreateWorkItem", '{"objective": "Ship it"}'),
        ("call_b", "GetWorkItem", '{"work_item_id": '),
    ]


async def test_the_request_carries_model_messages_tools_and_the_key(server) -> None:
    llm = provider(server)
    await llm.complete(MESSAGES, tool_specs())
    await llm.close()
    (sent,) = server.requests
    assert sent["path"] == "/v1/chat/completions"
    assert sent["model"] == "stub-model"
    assert sent["messages"] == MESSAGES
    assert sent["tools"] == tool_specs()
    assert sent["tool_choice"] == "auto"
    assert server.headers[0]["authorization"] == "Bearer sk-test"


async def test_text_only_answers_keep_their_finish_reason(server) -> None:
    server.replies.append((200, completion("cut off", finish="length"), {}))
    llm = provider(server)
    answer = await llm.complete(MESSAGES, [])
    await llm.close()
    assert (answer.text, answer.tool_calls, answer.finish_reason) == ("cut off", (), "length")


async def test_a_429_is_retried_after_its_retry_after(server) -> None:
    server.replies.append(
        (429, error_body("slow down", "rate_limit_exceeded"), {"retry-after-ms": "20"})
    )
    server.replies.append((200, completion("fine now"), {}))
    llm = provider(server, retries=2)
    answer = await llm.complete(MESSAGES, [])
    await llm.close()
    assert answer.text == "fine now"
    assert len(server.requests) == 2


async def test_a_persistent_500_becomes_a_provider_error_with_the_server_message(server) -> None:
    for _ in range(2):
        server.replies.append(
            (500, error_body("upstream exploded", "server_error"), {"retry-after-ms": "10"})
        )
    llm = provider(server, retries=1)
    with pytest.raises(ProviderError, match=r"answered 500: .*upstream exploded"):
        await llm.complete(MESSAGES, [])
    await llm.close()
    assert len(server.requests) == 2


async def test_a_400_is_not_retried(server) -> None:
    server.replies.append((400, error_body("bad tools", "invalid_request_error"), {}))
    llm = provider(server, retries=3)
    with pytest.raises(ProviderError, match="answered 400"):
        await llm.complete(MESSAGES, [])
    await llm.close()
    assert len(server.requests) == 1


async def test_a_slow_endpoint_times_out_as_a_provider_error(server) -> None:
    server.delay_s = 1.0
    llm = provider(server, timeout_s=0.2, retries=0)
    with pytest.raises(ProviderError, match=r"did not answer within 0\.2s"):
        await llm.complete(MESSAGES, [])
    await llm.close()


async def test_an_answer_without_choices_is_a_provider_error(server) -> None:
    empty = completion("x")
    empty["choices"] = []
    server.replies.append((200, empty, {}))
    llm = provider(server)
    with pytest.raises(ProviderError, match="without any choice"):
        await llm.complete(MESSAGES, [])
    await llm.close()


async def test_an_unreachable_endpoint_is_a_provider_error() -> None:
    llm = OpenAIProvider(
        ProviderConfig(
            kind="openai", base_url="http://127.0.0.1:9/v1", model="m", timeout_s=1.0, max_retries=0
        )
    )
    with pytest.raises(ProviderError, match="unreachable"):
        await llm.complete(MESSAGES, [])
    await llm.close()


def test_calls_without_ids_get_positional_ones() -> None:
    raw = completion(None, [function_call("", "ListWorkItems", "{}")], "tool_calls")
    answer = round_from_completion(ChatCompletion.model_validate(raw))
    assert answer.text == ""
    assert [(c.id, c.name) for c in answer.tool_calls] == [("call_0", "ListWorkItems")]
