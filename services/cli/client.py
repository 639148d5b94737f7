"""The operator's side of longrun's HTTP API (docs/contract.md §6), over httpx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"
Json = dict[str, Any]


class ApiError(Exception):
    """A non-2xx answer from longrun, with the contract's error kind when the body has one."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message} (HTTP {status})")
        self.status = status
        self.kind = kind
        self.message = message


class Unreachable(Exception):
    """longrun did not answer at all (connection refused, timeout)."""


@dataclass(frozen=True, slots=True)
class Callback:
    """What to POST to a capability URL: the body and its content type."""

    body: bytes
    content_type: str
    idempotency_key: str | None = None

    @classmethod
    def from_text(cls, data: str, idempotency_key: str | None = None) -> Callback:
        """JSON when `data` parses as JSON, plain text otherwise."""
        try:
            json.loads(data)
        except ValueError:
            return cls(data.encode(), "text/plain; charset=utf-8", idempotency_key)
        return cls(data.encode(), "application/json", idempotency_key)


def _segment(value: str) -> str:
    return quote(value, safe="")


def _error(response: httpx.Response) -> ApiError:
    kind, message = "http_error", response.text.strip()[:500] or response.reason_phrase
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        kind = str(body["error"].get("kind", kind))
        message = str(body["error"].get("message", message))
    return ApiError(response.status_code, kind, message)


class LongrunClient:
    """One method per route the command line uses; every answer is the decoded JSON body."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = (base_url or DEFAULT_URL).rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, transport=transport, timeout=timeout
        )
        # Callbacks carry their capability in the URL and must not carry the operator token.
        self._anonymous = httpx.Client(transport=transport, timeout=timeout)

    def close(self) -> None:
        self._http.close()
        self._anonymous.close()

    def __enter__(self) -> LongrunClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, http: httpx.Client, method: str, url: str, **kwargs: Any) -> Json:
        request = http.build_request(method, url, **kwargs)
        try:
            response = http.send(request)
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach longrun at {request.url}: {exc}") from exc
        if response.is_error:
            raise _error(response)
        if not response.content:
            return {}
        body = response.json()
        return body if isinstance(body, dict) else {"value": body}

    def _request(self, method: str, path: str, **kwargs: Any) -> Json:
        return self._call(self._http, method, path, **kwargs)

    def _pages(self, path: str, params: Json | None = None) -> Iterator[Json]:
        """Every page of a list route, following `next_cursor` until it is null."""
        params = dict(params or {})
        while True:
            page = self._request("GET", path, params=params)
            yield page
            following = page.get("next_cursor")
            if not following:
                return
            params["cursor"] = following

    def list_agents(self) -> list[Json]:
        """Every agent, page by page."""
        return [a for page in self._pages("/v1/agents") for a in page.get("agents", [])]

    def put_agent(self, agent_id: str, loop: str | None = None, spec: Json | None = None) -> Json:
        body: Json = {"loop": loop} if loop else {}
        if spec is not None:
            body["spec"] = spec
        return self._request("PUT", f"/v1/agents/{_segment(agent_id)}", json=body or None)

    def get_agent(self, agent_id: str) -> Json:
        return self._request("GET", f"/v1/agents/{_segment(agent_id)}")

    def find_agent(self, agent_id: str) -> Json | None:
        """The agent, or None when it does not exist yet."""
        try:
            return self.get_agent(agent_id)
        except ApiError as exc:
            if exc.kind == "agent_not_found":
                return None
            raise

    def put_preset(self, name: str, spec: Json) -> Json:
        return self._request("PUT", f"/v1/presets/{_segment(name)}", json={"spec": spec})

    def find_preset(self, name: str) -> Json | None:
        """The preset, or None when there is none of that name."""
        try:
            return self._request("GET", f"/v1/presets/{_segment(name)}")
        except ApiError as exc:
            if exc.kind == "preset_not_found":
                return None
            raise

    def usage(self, agent_id: str) -> Json:
        return self._request("GET", f"/v1/agents/{_segment(agent_id)}/usage")

    def runs(self, agent_id: str, limit: int = 50) -> Json:
        """What ran: one run per WorkItem, newest first."""
        path = f"/v1/agents/{_segment(agent_id)}/telemetry"
        return self._request("GET", path, params={"limit": str(limit)})

    def run(self, agent_id: str, work_item_id: str) -> Json:
        """One WorkItem's run and its failed steps."""
        path = f"/v1/agents/{_segment(agent_id)}/work-items/{_segment(work_item_id)}/telemetry"
        return self._request("GET", path)

    def send_message(self, agent_id: str, text: str, work_item_id: str | None = None) -> Json:
        body: Json = {"text": text}
        if work_item_id:
            body["work_item_id"] = work_item_id
        return self._request("POST", f"/v1/agents/{_segment(agent_id)}/messages", json=body)

    def list_work_items(
        self, agent_id: str, filter_: str = "all", limit: int | None = None, *, todos: bool = True
    ) -> Json:
        """The first `limit` WorkItems in ranking order (None: all of them), read page by
        page, as one answer `{filter, returned, total_matching, work_items}`."""
        size = PAGE_MAX if limit is None else min(limit, PAGE_MAX)
        params = {"filter": filter_, "limit": str(size), "include_todo_list": _flag(todos)}
        path = f"/v1/agents/{_segment(agent_id)}/work-items"
        answer: Json = {}
        items: list[Json] = []
        for page in self._pages(path, params):
            answer = page
            items += page.get("work_items") or []
            if limit is not None and len(items) >= limit:
                break
        items = items if limit is None else items[:limit]
        answer = {k: v for k, v in answer.items() if k != "next_cursor"}
        return {**answer, "returned": len(items), "work_items": items}

    def get_work_item(
        self, agent_id: str, work_item_id: str, *, todos: bool = True, notes: bool = False
    ) -> Json:
        path = f"/v1/agents/{_segment(agent_id)}/work-items/{_segment(work_item_id)}"
        params = {"include_todo_list": _flag(todos), "include_process_notes": _flag(notes)}
        return self._request("GET", path, params=params)

    def transcript(
        self, agent_id: str, work_item_id: str, after: int = 0, limit: int = 1000
    ) -> Json:
        """One page of the agent's recorded rounds bound to one WorkItem."""
        params = {"work_item_id": work_item_id, "after": str(after), "limit": str(limit)}
        return self._request("GET", f"/v1/agents/{_segment(agent_id)}/transcript", params=params)

    def cancel_work_item(self, agent_id: str, work_item_id: str, reason: str) -> Json:
        path = f"/v1/agents/{_segment(agent_id)}/work-items/{_segment(work_item_id)}/cancel"
        return self._request("POST", path, json={"reason": reason})

    def pick_work_item(self, agent_id: str, work_item_id: str, reason: str) -> Json:
        """PickWorkItem with the operator's authority (the tools route, operator token)."""
        path = f"/v1/agents/{_segment(agent_id)}/tools/PickWorkItem"
        args = {"work_item_id": work_item_id, "reason": reason}
        return dict(self._request("POST", path, json={"args": args})["result"])

    def set_acceptance(self, agent_id: str, work_item_id: str, acceptance: list[Json]) -> Json:
        """UpdateWorkItem's whole check list with the operator's authority (the tools route,
        operator token): the checks it adds are `set_by: operator`."""
        path = f"/v1/agents/{_segment(agent_id)}/tools/UpdateWorkItem"
        args = {"work_item_id": work_item_id, "acceptance": acceptance}
        return dict(self._request("POST", path, json={"args": args})["result"])

    def put_down_work_item(self, agent_id: str, work_item_id: str, reason: str) -> Json:
        path = f"/v1/agents/{_segment(agent_id)}/work-items/{_segment(work_item_id)}/put-down"
        return self._request("POST", path, json={"reason": reason})

    def pause(self, agent_id: str, reason: str, *, interrupt: bool = False) -> Json:
        path = f"/v1/agents/{_segment(agent_id)}/pause"
        return self._request("POST", path, json={"reason": reason, "interrupt": interrupt})

    def resume(self, agent_id: str) -> Json:
        return self._request("POST", f"/v1/agents/{_segment(agent_id)}/resume")

    def retire(self, agent_id: str, reason: str) -> Json:
        return self._request(
            "POST", f"/v1/agents/{_segment(agent_id)}/retire", json={"reason": reason}
        )

    def verdict(self, agent_id: str, work_item_id: str, *, passed: bool, note: str) -> Json:
        path = f"/v1/agents/{_segment(agent_id)}/work-items/{_segment(work_item_id)}/verdict"
        return self._request("POST", path, json={"passed": passed, "note": note})

    def delegations(self, agent_id: str, direction: str | None = None) -> list[Json]:
        """Every delegation of the agent (one direction, or both), oldest first."""
        params: Json = {"direction": direction} if direction else {}
        path = f"/v1/agents/{_segment(agent_id)}/delegations"
        return [d for page in self._pages(path, params) for d in page.get("delegations") or []]

    def briefs(
        self, agent_id: str, work_item_id: str | None = None, *, pages: int | None = 1
    ) -> Json:
        """The agent's briefs newest first, with the delivery summaries of their WorkItems:
        the first `pages` pages (None: all), as one answer."""
        params: Json = {"work_item_id": work_item_id} if work_item_id else {}
        path = f"/v1/agents/{_segment(agent_id)}/briefs"
        briefs: list[Json] = []
        summaries: dict[str, Json] = {}
        for n, page in enumerate(self._pages(path, params), start=1):
            briefs += page.get("briefs") or []
            summaries.update((s["id"], s) for s in page.get("delivery_summaries") or [])
            if pages is not None and n >= pages:
                break
        return {"briefs": briefs, "delivery_summaries": list(summaries.values())}

    def history(self, agent_id: str, after: int = 0, limit: int = 1000) -> Json:
        params = {"after": str(after), "limit": str(limit)}
        return self._request("GET", f"/v1/agents/{_segment(agent_id)}/history", params=params)

    def history_verify(self, agent_id: str) -> Json:
        return self._request("GET", f"/v1/agents/{_segment(agent_id)}/history/verify")

    def history_all(self, agent_id: str) -> list[Json]:
        """Every event of the agent's history, oldest first (read page by page, following
        `next_cursor`)."""
        path = f"/v1/agents/{_segment(agent_id)}/history"
        pages = self._pages(path, {"limit": str(PAGE_MAX)})
        return [e for page in pages for e in page.get("events") or []]

    def history_head(self, agent_id: str) -> Json:
        return self._request("GET", f"/v1/agents/{_segment(agent_id)}/history/head")

    def signing_keys(self) -> list[Json]:
        return list(self._request("GET", "/v1/signing-keys")["keys"])

    def post_callback(self, url: str, callback: Callback) -> Json:
        headers = {"Content-Type": callback.content_type}
        if callback.idempotency_key:
            headers["Idempotency-Key"] = callback.idempotency_key
        return self._call(self._anonymous, "POST", url, content=callback.body, headers=headers)


PAGE_MAX = 1000
"""The most rows a list route gives on one page."""


def _flag(value: bool) -> str:
    return "true" if value else "false"
