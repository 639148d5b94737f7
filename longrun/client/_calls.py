"""Every route the clients call, as a `Call` value built once for both the sync and the async
class (the classes only send it and read the answer)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from longrun.client._http import Call, new_key


class Unset:
    """An argument left out (as opposed to `None`, which some tools read as "clear")."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


def args(**given: Any) -> dict[str, Any]:
    """Tool arguments without those left out."""
    return {k: v for k, v in given.items() if v is not UNSET}


def seg(value: str) -> str:
    return quote(value, safe="")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def agent_of_token(token: str) -> str:
    """An agent token is `<agent_id>~<secret>`."""
    agent_id, sep, _ = token.partition("~")
    if not sep or not agent_id:
        raise ValueError("an agent token looks like <agent_id>~<secret>; pass agent_id as well")
    return agent_id


def tool(
    token: str,
    agent_id: str,
    tool_name: str,
    tool_args: dict[str, Any],
    *,
    assistant_text: str | None,
    command_id: str | None,
) -> Call:
    """A tool call with a `command_id` (fresh unless given), so a retry is applied once."""
    body: dict[str, Any] = {"args": tool_args, "command_id": command_id or new_key()}
    if assistant_text is not None:
        body["assistant_text"] = assistant_text
    return Call(
        "POST",
        f"/v1/agents/{seg(agent_id)}/tools/{seg(tool_name)}",
        json=body,
        headers=bearer(token),
        ok=(200, 400, 403, 404, 409),
    )


def get(token: str, path: str, **params: Any) -> Call:
    query = {k: v for k, v in params.items() if v is not None}
    return Call("GET", path, params=query or None, headers=bearer(token))


def write(
    token: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    idempotency_key: str | None = None,
    keyed: bool = True,
) -> Call:
    """A write; with `keyed` it carries an `Idempotency-Key` (fresh unless given) and is
    retried on transient failures, else it is sent once."""
    headers = bearer(token)
    if keyed:
        headers["Idempotency-Key"] = idempotency_key or new_key()
    return Call(method, path, json=body, headers=headers, retry_safe=keyed)


def wakes_poll(
    token: str, agent_id: str, cursor: str | None, wait_s: float, timeout: float
) -> Call:
    params: dict[str, Any] = {"wait_s": wait_s}
    if cursor is not None:
        params["cursor"] = cursor
    path = f"/v1/agents/{seg(agent_id)}/wakes"
    return Call("GET", path, params=params, headers=bearer(token), timeout=timeout + wait_s)


def callback(url: str, body: Any, key: str | None, content_type: str | None) -> Call:
    """A callback delivery: no bearer token (the URL is the capability), an `Idempotency-Key`
    (fresh unless given) so a retried delivery counts once."""
    headers = {"Idempotency-Key": key or new_key()}
    if isinstance(body, bytes | str):
        headers["Content-Type"] = content_type or "application/octet-stream"
        content: Any = body.encode() if isinstance(body, str) else body
        return Call("POST", url, json=None, headers=headers, raw=content)
    if content_type is not None:
        headers["Content-Type"] = content_type
    return Call("POST", url, json=body, headers=headers)
