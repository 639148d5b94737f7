"""A small MCP server for the tests: `python -m tests.mcp_fixtures.server stdio` or
`... http PORT`. It echoes, returns long text, and records every call's `longrun/call_id`
(and its process id, the headers and env it was given) in the file named by MCP_FIXTURE_LOG,
one JSON line per call, so a test can see what reached the server."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("fixture")


def _log(ctx: Context[Any, Any], tool: str, args: dict[str, Any]) -> None:
    meta = ctx.request_context.meta or {}
    headers = ctx.headers or {}
    line = {
        "tool": tool,
        "args": args,
        "call_id": meta.get("longrun/call_id"),
        "pid": os.getpid(),
        "authorization": headers.get("authorization"),
        "fixture_token": os.environ.get("FIXTURE_TOKEN"),
    }
    path = os.environ.get("MCP_FIXTURE_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")


@server.tool()
def echo(text: str, ctx: Context[Any, Any]) -> str:
    """Answer with the text it was given."""
    _log(ctx, "echo", {"text": text})
    return f"echo: {text}"


@server.tool()
def long_text(chars: int, ctx: Context[Any, Any]) -> str:
    """Answer with `chars` characters."""
    _log(ctx, "long_text", {"chars": chars})
    return "x" * chars


@server.tool()
async def slow(seconds: float, ctx: Context[Any, Any]) -> str:
    """Answer after `seconds`: a call a test can kill its turn in the middle of."""
    _log(ctx, "slow", {"seconds": seconds})
    await anyio.sleep(seconds)
    return "finally"


@server.tool()
async def lookup(text: str, ctx: Context[Any, Any]) -> str:
    """Answer after a moment (0.3 s): the chaos run's agents call it, and a kill may land in it."""
    _log(ctx, "lookup", {"text": text})
    await anyio.sleep(0.3)
    return f"found: {text}"


@server.tool()
def fail(ctx: Context[Any, Any]) -> str:
    """Always fails."""
    _log(ctx, "fail", {})
    raise ValueError("the fixture tool failed on purpose")


def main() -> None:
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
