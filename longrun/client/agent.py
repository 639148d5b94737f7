"""`Agent` and `AsyncAgent`: an agent's own view of longrun over HTTP, with its agent token (or
the operator's, through `Operator.as_agent`). One method per tool, the WorkItem and briefs
routes, task results and callbacks, and `wakes()`: the agent's ticks from its wake feed,
resumed after every dropped connection without losing one."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, Literal

import httpx

from longrun.client import _calls
from longrun.client._http import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    TRANSIENT_STATUSES,
    AsyncTransport,
    Call,
    SseEvent,
    SyncTransport,
    async_sse_events,
    backoff,
    error_of,
    sse_events,
)
from longrun.client._tools import Filter, ToolMethods
from longrun.client.errors import tool_error_class
from longrun.client.models import (
    BriefsAnswer,
    CallbackAccepted,
    TaskResultAccepted,
    ToolEnvelope,
    ToolsAnswer,
    ToolSchema,
    WakePage,
    WakeTick,
    WorkItemAnswer,
    WorkItemPage,
)

WAKES_READ_TIMEOUT_S = 45.0
"""The feed sends a keep-alive comment every 15 s: this long without a byte means the
connection is dead, and the client reconnects."""
RECONNECT_ATTEMPT_CAP = 6
"""Reconnect delays grow to about 8 s and stay there while the server is away."""


def envelope_of(answer: httpx.Response) -> ToolEnvelope:
    """The tool envelope of a tools-route answer, or the typed error it carries."""
    body = answer.json() if answer.content else None
    if not isinstance(body, dict) or "tool_name" not in body:
        raise error_of(answer)  # refused before the tool ran (auth, malformed body)
    envelope = ToolEnvelope.model_validate(body)
    if envelope.status == "success":
        return envelope
    error = envelope.error
    raise tool_error_class(answer.status_code)(
        error.kind if error else "tool_error",
        error.message if error else "the tool failed",
        tool_name=envelope.tool_name,
        recovery_hint=error.recovery_hint if error else None,
        status=answer.status_code,
        details=error.details if error else None,
    )


def tick_of(event: SseEvent) -> WakeTick:
    return WakeTick.model_validate({**json.loads(event.data), "id": event.id})


def _wakes_path(agent_id: str) -> str:
    return f"/v1/agents/{_calls.seg(agent_id)}/wakes"


class _AgentBase:
    def __init__(self, token: str, agent_id: str | None, timeout: float, retries: int) -> None:
        self.token = token
        self.agent_id = agent_id or _calls.agent_of_token(token)
        self.timeout = timeout
        self.retries = retries

    @property
    def _path(self) -> str:
        return f"/v1/agents/{_calls.seg(self.agent_id)}"

    def _tool_call(
        self, name: str, tool_args: dict[str, Any], text: str | None, command_id: str | None
    ) -> Call:
        return _calls.tool(
            self.token, self.agent_id, name, tool_args, assistant_text=text, command_id=command_id
        )

    def _work_items(
        self,
        filter: str | None,
        limit: int | None,
        todo: bool,
        cursor: str | None,
        state: str | None,
    ) -> Call:
        return _calls.get(
            self.token,
            f"{self._path}/work-items",
            filter=filter,
            state=state,
            limit=limit,
            cursor=cursor,
            include_todo_list=str(todo).lower() if todo else None,
        )

    def _briefs(self, work_item_id: str | None, kind: str | None, limit: int | None,
                cursor: str | None) -> Call:  # fmt: skip
        return _calls.get(
            self.token,
            f"{self._path}/briefs",
            work_item_id=work_item_id,
            kind=kind,
            limit=limit,
            cursor=cursor,
        )

    def _work_item(self, work_item_id: str, todo: bool) -> Call:
        return _calls.get(
            self.token,
            f"{self._path}/work-items/{_calls.seg(work_item_id)}",
            include_todo_list=str(todo).lower() if todo else None,
        )

    def _task_result(self, task_id: str, status: str, summary: str) -> Call:
        path = f"{self._path}/tasks/{_calls.seg(task_id)}/result"
        body = {"status": status, "summary": summary}
        return _calls.write(self.token, "POST", path, body, keyed=False)

    def _stream_headers(self, last: str) -> dict[str, str]:
        return {**_calls.bearer(self.token), "Last-Event-ID": last, "Accept": "text/event-stream"}

    def _stream_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=WAKES_READ_TIMEOUT_S)


class Agent(_AgentBase, ToolMethods[ToolEnvelope]):
    """An agent's client (blocking). `Agent(base_url, token)`; the agent id is read from the
    token unless given. Close it (or use `with`) to release its connections."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        agent_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        http: httpx.Client | None = None,
    ) -> None:
        super().__init__(token, agent_id, timeout, retries)
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self._transport = SyncTransport(self._http, retries)

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def call_tool(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        *,
        assistant_text: str | None = None,
        command_id: str | None = None,
    ) -> ToolEnvelope:
        call = self._tool_call(tool_name, tool_args, assistant_text, command_id)
        return envelope_of(self._transport.send(call))

    def tools(self) -> list[ToolSchema]:
        """The tools this agent may call (`GET .../tools`), with their input schemas."""
        answer = self._transport.send(_calls.get(self.token, f"{self._path}/tools"))
        return ToolsAnswer.model_validate(answer.json()).tools

    def work_items(
        self,
        filter: Filter | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        state: Literal["finished"] | None = None,
        include_todo_list: bool = False,
    ) -> WorkItemPage:
        """`GET .../work-items`: the ListWorkItems result in ranking order (or, with
        `state="finished"`, the finished ones newest first), a page of up to `limit` (1..1,000,
        default 100); pass `next_cursor` as `cursor` for the next."""
        answer = self._transport.send(
            self._work_items(filter, limit, include_todo_list, cursor, state)
        )
        return WorkItemPage.model_validate(answer.json())

    def work_item(self, work_item_id: str, *, include_todo_list: bool = False) -> WorkItemAnswer:
        answer = self._transport.send(self._work_item(work_item_id, include_todo_list))
        return WorkItemAnswer.model_validate(answer.json())

    def briefs(
        self,
        *,
        work_item_id: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> BriefsAnswer:
        """`GET .../briefs`: newest first, a page at a time (`next_cursor`)."""
        call = self._briefs(work_item_id, kind, limit, cursor)
        return BriefsAnswer.model_validate(self._transport.send(call).json())

    def task_result(self, task_id: str, status: str, summary: str) -> TaskResultAccepted:
        """Report a task's result (`succeeded` or `failed`) to its `task_result` wait."""
        answer = self._transport.send(self._task_result(task_id, status, summary))
        return TaskResultAccepted.model_validate(answer.json())

    def callback(
        self,
        url: str,
        body: Any,
        key: str | None = None,
        *,
        content_type: str | None = None,
    ) -> CallbackAccepted:
        """Deliver a callback to a capability URL (a wait's `callback_url`): JSON for dicts and
        lists, bytes or text as given. `key` is its `Idempotency-Key` (a fresh one unless
        given): repeat a delivery with the same key and it counts once."""
        answer = self._transport.send(_calls.callback(url, body, key, content_type))
        return CallbackAccepted.model_validate(answer.json())

    def poll_wakes(self, cursor: str | None = None, *, wait_s: float = 30.0) -> WakePage:
        """One long poll of the wake feed: the ticks after `cursor` (or, without one, from the
        live tail), waiting up to `wait_s` (≤ 60) for the first."""
        call = _calls.wakes_poll(self.token, self.agent_id, cursor, wait_s, self.timeout)
        return WakePage.model_validate(self._transport.send(call).json())

    def wakes(self, after: str | None = None) -> Iterator[WakeTick]:
        """The agent's ticks, for ever: each tick once per connection, in order, at least once
        overall. Starts after tick id `after` (a `WakeTick.id` kept from before), or at the live
        tail; a dropped connection or a restarted ingress is reconnected with `Last-Event-ID`,
        so no tick is lost. Refusals (a wrong token: 401/403) raise."""
        last = after or self.poll_wakes(wait_s=0).next_cursor
        failures = 0
        while True:
            try:
                with self._http.stream(
                    "GET",
                    _wakes_path(self.agent_id),
                    headers=self._stream_headers(last),
                    timeout=self._stream_timeout(),
                ) as answer:
                    if answer.status_code != 200:
                        answer.read()
                        if answer.status_code not in TRANSIENT_STATUSES:
                            raise error_of(answer)
                    else:
                        failures = 0
                        for event in sse_events(answer.iter_lines()):
                            tick = tick_of(event)
                            last = tick.id
                            yield tick
            except httpx.TransportError:
                pass
            failures += 1
            time.sleep(backoff(min(failures, RECONNECT_ATTEMPT_CAP), None))


class AsyncAgent(_AgentBase, ToolMethods[Coroutine[Any, Any, ToolEnvelope]]):
    """An agent's client (asyncio): the methods of `Agent`, awaited; `wakes()` is an async
    iterator. Close it with `await aclose()` (or `async with`)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        agent_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(token, agent_id, timeout, retries)
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self._transport = AsyncTransport(self._http, retries)

    async def __aenter__(self) -> AsyncAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call_tool(
        self,
        tool_name: str,
        tool_args: dict[str, Any],
        *,
        assistant_text: str | None = None,
        command_id: str | None = None,
    ) -> ToolEnvelope:
        call = self._tool_call(tool_name, tool_args, assistant_text, command_id)
        return envelope_of(await self._transport.send(call))

    async def tools(self) -> list[ToolSchema]:
        answer = await self._transport.send(_calls.get(self.token, f"{self._path}/tools"))
        return ToolsAnswer.model_validate(answer.json()).tools

    async def work_items(
        self,
        filter: Filter | None = None,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        state: Literal["finished"] | None = None,
        include_todo_list: bool = False,
    ) -> WorkItemPage:
        answer = await self._transport.send(
            self._work_items(filter, limit, include_todo_list, cursor, state)
        )
        return WorkItemPage.model_validate(answer.json())

    async def work_item(
        self, work_item_id: str, *, include_todo_list: bool = False
    ) -> WorkItemAnswer:
        answer = await self._transport.send(self._work_item(work_item_id, include_todo_list))
        return WorkItemAnswer.model_validate(answer.json())

    async def briefs(
        self,
        *,
        work_item_id: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> BriefsAnswer:
        call = self._briefs(work_item_id, kind, limit, cursor)
        return BriefsAnswer.model_validate((await self._transport.send(call)).json())

    async def task_result(self, task_id: str, status: str, summary: str) -> TaskResultAccepted:
        answer = await self._transport.send(self._task_result(task_id, status, summary))
        return TaskResultAccepted.model_validate(answer.json())

    async def callback(
        self,
        url: str,
        body: Any,
        key: str | None = None,
        *,
        content_type: str | None = None,
    ) -> CallbackAccepted:
        answer = await self._transport.send(_calls.callback(url, body, key, content_type))
        return CallbackAccepted.model_validate(answer.json())

    async def poll_wakes(self, cursor: str | None = None, *, wait_s: float = 30.0) -> WakePage:
        call = _calls.wakes_poll(self.token, self.agent_id, cursor, wait_s, self.timeout)
        return WakePage.model_validate((await self._transport.send(call)).json())

    async def wakes(self, after: str | None = None) -> AsyncIterator[WakeTick]:
        """As `Agent.wakes`, as an async iterator."""
        last = after or (await self.poll_wakes(wait_s=0)).next_cursor
        failures = 0
        while True:
            try:
                async with self._http.stream(
                    "GET",
                    _wakes_path(self.agent_id),
                    headers=self._stream_headers(last),
                    timeout=self._stream_timeout(),
                ) as answer:
                    if answer.status_code != 200:
                        await answer.aread()
                        if answer.status_code not in TRANSIENT_STATUSES:
                            raise error_of(answer)
                    else:
                        failures = 0
                        async for event in async_sse_events(answer.aiter_lines()):
                            tick = tick_of(event)
                            last = tick.id
                            yield tick
            except httpx.TransportError:
                pass
            failures += 1
            await asyncio.sleep(backoff(min(failures, RECONNECT_ATTEMPT_CAP), None))
