"""`Operator` and `AsyncOperator`: the operator token's routes (agents, specs, presets,
messages, pause, resume, retire, cancel, verdicts, history and its proof), and `as_agent` to
act as any agent on the agent routes."""

from __future__ import annotations

from typing import Any

import httpx

from longrun.client import _calls
from longrun.client._calls import seg
from longrun.client._http import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    AsyncTransport,
    Call,
    SyncTransport,
)
from longrun.client.agent import Agent, AsyncAgent
from longrun.client.models import (
    AgentCreated,
    AgentDetail,
    AgentExists,
    AgentList,
    HistoryPage,
    MessageAccepted,
    VerifyResult,
    WorkItemView,
)


class _Calls:
    """The operator's requests, built once for both classes."""

    def __init__(self, token: str) -> None:
        self.token = token

    def agents(self, label: list[str] | None, limit: int | None, cursor: str | None) -> Call:
        params: dict[str, Any] = {"label": label, "limit": limit, "cursor": cursor}
        given = {k: v for k, v in params.items() if v is not None}
        return Call("GET", "/v1/agents", params=given or None, headers=_calls.bearer(self.token))

    def put_agent(self, agent_id: str, loop: str | None, spec: dict[str, Any] | None) -> Call:
        body = {k: v for k, v in {"loop": loop, "spec": spec}.items() if v is not None}
        # Idempotent by itself: a repeated PUT answers 200 without the token.
        return Call("PUT", f"/v1/agents/{seg(agent_id)}", json=body or None,
                    headers=_calls.bearer(self.token))  # fmt: skip

    def agent(self, agent_id: str) -> Call:
        return _calls.get(self.token, f"/v1/agents/{seg(agent_id)}")

    def message(self, agent_id: str, text: str, work_item_id: str | None, key: str | None) -> Call:
        body: dict[str, Any] = {"text": text}
        if work_item_id is not None:
            body["work_item_id"] = work_item_id
        path = f"/v1/agents/{seg(agent_id)}/messages"
        return _calls.write(self.token, "POST", path, body, idempotency_key=key)

    def control(self, agent_id: str, action: str, body: dict[str, Any] | None) -> Call:
        path = f"/v1/agents/{seg(agent_id)}/{action}"
        return _calls.write(self.token, "POST", path, body, keyed=False)

    def work_item_action(
        self, agent_id: str, work_item_id: str, action: str, body: dict[str, Any], key: str | None
    ) -> Call:
        path = f"/v1/agents/{seg(agent_id)}/work-items/{seg(work_item_id)}/{action}"
        return _calls.write(self.token, "POST", path, body, idempotency_key=key)

    def history(
        self, agent_id: str, after: int | None, limit: int | None, cursor: str | None
    ) -> Call:
        path = f"/v1/agents/{seg(agent_id)}/history"
        return _calls.get(self.token, path, after=after, limit=limit, cursor=cursor)

    def verify(self, agent_id: str) -> Call:
        return _calls.get(self.token, f"/v1/agents/{seg(agent_id)}/history/verify")

    def put_preset(self, name: str, spec: dict[str, Any]) -> Call:
        return Call("PUT", f"/v1/presets/{seg(name)}", json={"spec": spec},
                    headers=_calls.bearer(self.token))  # fmt: skip

    def presets(self) -> Call:
        return _calls.get(self.token, "/v1/presets")

    def preset(self, name: str) -> Call:
        return _calls.get(self.token, f"/v1/presets/{seg(name)}")


def _created(answer: httpx.Response) -> AgentCreated | AgentExists:
    body = answer.json()
    if answer.status_code == 201:
        return AgentCreated.model_validate(body)
    return AgentExists.model_validate(body)


def _verdict(passed: bool, note: str | None, attempt: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"passed": passed}
    if note is not None:
        body["note"] = note
    if attempt is not None:
        body["attempt"] = attempt
    return body


class Operator:
    """The operator's client (blocking): `Operator(base_url, operator_token)`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self._send = SyncTransport(self._http, retries).send
        self._calls = _Calls(token)

    def __enter__(self) -> Operator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def as_agent(self, agent_id: str) -> Agent:
        """An `Agent` acting as `agent_id` with the operator token (tools and agent routes;
        the wake feed takes the agent's own token only)."""
        return Agent(self.base_url, self.token, agent_id=agent_id, timeout=self.timeout,
                     retries=self.retries, http=self._http)  # fmt: skip

    def agents(
        self,
        *,
        label: list[str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AgentList:
        """A page of agents by id; pass `next_cursor` as `cursor` for the next."""
        call = self._calls.agents(label, limit, cursor)
        return AgentList.model_validate(self._send(call).json())

    def create_agent(
        self, agent_id: str, *, loop: str | None = None, spec: dict[str, Any] | None = None
    ) -> AgentCreated | AgentExists:
        """`PUT /v1/agents/{id}`: `AgentCreated` (with the agent token, shown once) the first
        time, `AgentExists` after."""
        return _created(self._send(self._calls.put_agent(agent_id, loop, spec)))

    def agent(self, agent_id: str) -> AgentDetail:
        return AgentDetail.model_validate(self._send(self._calls.agent(agent_id)).json())

    def send_message(
        self,
        agent_id: str,
        text: str,
        *,
        work_item_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> MessageAccepted:
        call = self._calls.message(agent_id, text, work_item_id, idempotency_key)
        return MessageAccepted.model_validate(self._send(call).json())

    def pause(self, agent_id: str, reason: str, *, interrupt: bool = False) -> AgentDetail:
        call = self._calls.control(agent_id, "pause", {"reason": reason, "interrupt": interrupt})
        return AgentDetail.model_validate(self._send(call).json())

    def resume(self, agent_id: str) -> AgentDetail:
        call = self._calls.control(agent_id, "resume", None)
        return AgentDetail.model_validate(self._send(call).json())

    def retire(self, agent_id: str, reason: str) -> AgentDetail:
        call = self._calls.control(agent_id, "retire", {"reason": reason})
        return AgentDetail.model_validate(self._send(call).json())

    def cancel_work_item(
        self, agent_id: str, work_item_id: str, reason: str, *, idempotency_key: str | None = None
    ) -> WorkItemView:
        call = self._calls.work_item_action(
            agent_id, work_item_id, "cancel", {"reason": reason}, idempotency_key
        )
        return WorkItemView.model_validate(self._send(call).json())

    def verdict(
        self,
        agent_id: str,
        work_item_id: str,
        passed: bool,
        *,
        note: str | None = None,
        attempt: int | None = None,
        idempotency_key: str | None = None,
    ) -> WorkItemView:
        body = _verdict(passed, note, attempt)
        call = self._calls.work_item_action(
            agent_id, work_item_id, "verdict", body, idempotency_key
        )
        return WorkItemView.model_validate(self._send(call).json())

    def history(
        self,
        agent_id: str,
        *,
        after: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> HistoryPage:
        call = self._calls.history(agent_id, after, limit, cursor)
        return HistoryPage.model_validate(self._send(call).json())

    def verify(self, agent_id: str) -> VerifyResult:
        return VerifyResult.model_validate(self._send(self._calls.verify(agent_id)).json())

    def put_preset(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return dict(self._send(self._calls.put_preset(name, spec)).json())

    def presets(self) -> dict[str, Any]:
        return dict(self._send(self._calls.presets()).json())

    def preset(self, name: str) -> dict[str, Any]:
        return dict(self._send(self._calls.preset(name)).json())


class AsyncOperator:
    """The operator's client (asyncio): the methods of `Operator`, awaited."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self._send = AsyncTransport(self._http, retries).send
        self._calls = _Calls(token)

    async def __aenter__(self) -> AsyncOperator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def as_agent(self, agent_id: str) -> AsyncAgent:
        return AsyncAgent(self.base_url, self.token, agent_id=agent_id, timeout=self.timeout,
                          retries=self.retries, http=self._http)  # fmt: skip

    async def agents(
        self,
        *,
        label: list[str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AgentList:
        call = self._calls.agents(label, limit, cursor)
        return AgentList.model_validate((await self._send(call)).json())

    async def create_agent(
        self, agent_id: str, *, loop: str | None = None, spec: dict[str, Any] | None = None
    ) -> AgentCreated | AgentExists:
        return _created(await self._send(self._calls.put_agent(agent_id, loop, spec)))

    async def agent(self, agent_id: str) -> AgentDetail:
        return AgentDetail.model_validate((await self._send(self._calls.agent(agent_id))).json())

    async def send_message(
        self,
        agent_id: str,
        text: str,
        *,
        work_item_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> MessageAccepted:
        call = self._calls.message(agent_id, text, work_item_id, idempotency_key)
        return MessageAccepted.model_validate((await self._send(call)).json())

    async def pause(self, agent_id: str, reason: str, *, interrupt: bool = False) -> AgentDetail:
        call = self._calls.control(agent_id, "pause", {"reason": reason, "interrupt": interrupt})
        return AgentDetail.model_validate((await self._send(call)).json())

    async def resume(self, agent_id: str) -> AgentDetail:
        call = self._calls.control(agent_id, "resume", None)
        return AgentDetail.model_validate((await self._send(call)).json())

    async def retire(self, agent_id: str, reason: str) -> AgentDetail:
        call = self._calls.control(agent_id, "retire", {"reason": reason})
        return AgentDetail.model_validate((await self._send(call)).json())

    async def cancel_work_item(
        self, agent_id: str, work_item_id: str, reason: str, *, idempotency_key: str | None = None
    ) -> WorkItemView:
        call = self._calls.work_item_action(
            agent_id, work_item_id, "cancel", {"reason": reason}, idempotency_key
        )
        return WorkItemView.model_validate((await self._send(call)).json())

    async def verdict(
        self,
        agent_id: str,
        work_item_id: str,
        passed: bool,
        *,
        note: str | None = None,
        attempt: int | None = None,
        idempotency_key: str | None = None,
    ) -> WorkItemView:
        body = _verdict(passed, note, attempt)
        call = self._calls.work_item_action(
            agent_id, work_item_id, "verdict", body, idempotency_key
        )
        return WorkItemView.model_validate((await self._send(call)).json())

    async def history(
        self,
        agent_id: str,
        *,
        after: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> HistoryPage:
        call = self._calls.history(agent_id, after, limit, cursor)
        return HistoryPage.model_validate((await self._send(call)).json())

    async def verify(self, agent_id: str) -> VerifyResult:
        return VerifyResult.model_validate((await self._send(self._calls.verify(agent_id))).json())

    async def put_preset(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return dict((await self._send(self._calls.put_preset(name, spec))).json())

    async def presets(self) -> dict[str, Any]:
        return dict((await self._send(self._calls.presets())).json())

    async def preset(self, name: str) -> dict[str, Any]:
        return dict((await self._send(self._calls.preset(name))).json())
