"""The MCP client's pure parts: secrets come only from the environment it was given, results
are cut with a note that says so, and a server whose secret is missing is named as unavailable
without being contacted."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from services.turn_executor.mcp_children import restart_delay
from services.turn_executor.mcp_client import McpClients, MissingSecret, bounded, resolved
from shared.domain.specs import McpServer
from shared.metrics import build_metrics


def test_resolved_reads_named_variables_and_names_the_missing_one() -> None:
    assert resolved({"Authorization": "TOKEN"}, {"TOKEN": "Bearer x"}) == {
        "Authorization": "Bearer x"
    }
    with pytest.raises(MissingSecret) as missing:
        resolved({"Authorization": "TOKEN"}, {})
    assert missing.value.name == "TOKEN"


def test_bounded_counts_before_the_cut_and_says_so() -> None:
    assert bounded("short", 10) == ("short", 5, False)
    text, chars, truncated = bounded("y" * 30, 10)
    assert (chars, truncated) == (30, True)
    assert text == "y" * 10 + "\n[truncated: the result has 30 characters; only the first 10 shown]"


async def test_a_missing_secret_makes_the_server_unavailable_for_the_turn() -> None:
    clients = McpClients(build_metrics(CollectorRegistry()), ttl_s=300, environ={})
    server = McpServer.model_validate(
        {
            "name": "web",
            "transport": "http",
            "url": "http://127.0.0.1:9/mcp",
            "headers_from_env": {"Authorization": "WEB_TOKEN"},
        }
    )
    toolset = await clients.toolset("agent-1", 1, (server,))
    assert toolset.tools == {}
    assert toolset.unavailable == {"web": "missing_secret WEB_TOKEN"}
    assert clients.listings == 0


def test_restarts_back_off_doubling_up_to_a_ceiling() -> None:
    delays = [restart_delay(n) for n in range(1, 10)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert delays[-1] == 30.0
    assert delays == sorted(delays)
