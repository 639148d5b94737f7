"""External calls' records as the executor writes and reads them: the arguments' canonical
hash, and at a turn's start the calls an earlier turn started but never finished (found in the
tail of the agent's history), which the model is told about and the history marks `unknown`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

from shared.store.client import AnyRedis
from shared.wire.names import Names

HISTORY_TAIL = 500
"""How far back a turn looks for unfinished calls: far more events than one turn writes."""
ARGUMENTS_SHOWN = 2000


def canonical_arguments(args: dict[str, Any]) -> tuple[str, str]:
    """The arguments as canonical JSON (sorted keys, no spaces, UTF-8) and its SHA-256."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()


def unfinished(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `tool_call_started` events with no `tool_call_finished` for the same call, in order."""
    finished = {e["data"]["call_id"] for e in events if e.get("type") == "tool_call_finished"}
    return [
        e["data"]
        for e in events
        if e.get("type") == "tool_call_started" and e["data"]["call_id"] not in finished
    ]


async def unfinished_calls(redis: AnyRedis, names: Names, agent_id: str) -> list[dict[str, Any]]:
    docs = await redis.lrange(names.history(agent_id), -HISTORY_TAIL, -1)
    return unfinished([orjson.loads(doc) for doc in docs])


COMMAND_SERVER = "longrun.sandbox"
"""RunCommand's calls are recorded under this server (a name no MCP server can take) and
shown by the tool's own name."""


def unknown_notice(call: dict[str, Any]) -> str:
    name = call["tool"] if call["server"] == COMMAND_SERVER else f"{call['server']}__{call['tool']}"
    return (
        f"call {call['call_id']}: {name}({call.get('arguments', '')}) "
        "was started by an interrupted turn; its outcome is unknown: check before repeating it"
    )
