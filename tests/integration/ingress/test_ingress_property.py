"""Property: whatever a client sends to any route of /openapi.json, ingress answers without a 5xx,
every answer matches the published schema, and the process keeps serving. schemathesis
generates the requests from the schema (valid and invalid ones, with the operator token, an
agent's token, a garbage token or none) against a real ingress process and a real ledger
process, and runs its default checks except `negative_data_rejection` (unknown query
parameters are ignored by design, which that check counts as accepting invalid input), and
except `positive_data_acceptance` on the agent PUT: an agent spec is checked beyond what JSON
Schema can say (literal credentials, fields that depend on an MCP server's transport, unique
server names, environment-variable names as keys), so a schema-valid spec may rightly be 400;
and the same on the tools route, whose one published body carries every tool's `args` as an
open object: each tool checks its own arguments (PickWorkItem's `work_item_id`, ...), so
`{"args": {}}` is schema-valid and rightly 400 there.

About two thousand requests in one to two minutes; LONGRUN_PROPERTY_EXAMPLES sets the examples
per operation (default 175).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import negative_data_rejection, positive_data_acceptance

from tests.integration.conftest import ServiceProcess
from tests.integration.ingress.conftest import (
    OPERATOR_TOKEN,
    new_agent_id,
    stack_env,
    start_ingress,
)

# A hang guard, not a speed check: the run is examples x routes x machine speed (over 300 s with
# 23 routes at a load average of 16 on two cores).
pytestmark = pytest.mark.timeout(900)
EXAMPLES = int(os.environ.get("LONGRUN_PROPERTY_EXAMPLES", "175"))


@pytest.fixture(scope="module")
def ingress_url(
    redis_url: str,
    stack_prefix: str,
    agent_home: Path,
    ledger_process: ServiceProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    env = stack_env(redis_url, stack_prefix, agent_home)
    proc = start_ingress(
        env,
        tmp_path_factory.mktemp("logs") / "ingress.log",
        LONGRUN_AGENT_RATE="0",
        LONGRUN_CALLBACK_RATE="0",
        LONGRUN_MAX_BODY_BYTES="8192",
    )
    asyncio.run(proc.wait_ready())
    yield f"http://127.0.0.1:{proc.port}"
    proc.stop()


def _seed(base: str) -> dict[str, str]:
    """An agent with a WorkItem and an external wait, so generated requests also reach them."""
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    with httpx.Client(base_url=base, headers=operator, timeout=30) as http:
        agent_id = new_agent_id()
        created = http.put(f"/v1/agents/{agent_id}").json()
        tools = f"/v1/agents/{agent_id}/tools"
        item = http.post(f"{tools}/CreateWorkItem", json={"args": {"objective": "seed"}}).json()
        wait = http.post(
            f"{tools}/WaitFor", json={"args": {"reason": "seed", "wake": "external"}}
        ).json()
    return {
        "agent_id": agent_id,
        "agent_token": created["agent_token"],
        "work_item_id": item["result"]["work_item"]["id"],
        "token": wait["result"]["wait"]["callback_url"].rsplit("/", 1)[1],
    }


def _strategy(operation: Any, seed: dict[str, str]) -> Any:
    """Generated cases, half of them aimed at the seeded agent, item and capability."""
    names = {p.name for p in operation.path_parameters}
    pinned = {k: v for k, v in seed.items() if k in names}
    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    if pinned:
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=pinned))
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=pinned))
    return st.one_of(strategies)


WAKES_PATH = "/v1/agents/{agent_id}/wakes"


def _bounded(case: Any) -> None:
    """The wake feed streams until the client leaves, and its long poll waits up to `wait_s`
    for a tick that never comes here: a request that would open the stream or wait is made a
    poll that answers at once (its bad input, tokens and resume points are still generated;
    tests/integration/ingress/test_wake_feed.py covers the stream itself). A list route's
    `cursor` is a schema-valid string that is 400 unless this server handed it out: generated
    ones are left out (the paging tests cover forged and foreign cursors)."""
    if case.operation.path != WAKES_PATH:
        if case.query and "cursor" in case.query:
            case.query = {k: v for k, v in case.query.items() if k != "cursor"}
        return
    query = dict(case.query or {})
    try:
        waits = query.get("wait_s") is None or float(query["wait_s"]) > 0
    except (TypeError, ValueError):
        waits = False  # not a number: a 400 at once
    if waits:
        query["wait_s"] = 0
    case.query = query


_CHECKED_BEYOND_SCHEMA = {
    # An agent spec (in a PUT of an agent or a preset) is checked beyond its schema: label
    # values, MCP servers, the model's provider.
    ("PUT", "/v1/agents/{agent_id}"),
    ("PUT", "/v1/presets/{name}"),
    ("POST", "/v1/agents/{agent_id}/tools/{tool_name}"),
    # A resume point is a schema-valid string that is 400 unless it is one of the stream's ids.
    ("GET", WAKES_PATH),
    # `until` before `since` (each a valid instant) is 400 naming `until`.
    ("GET", "/v1/agents/{agent_id}/usage"),
}


def _excluded(operation: Any) -> list[Any]:
    if (operation.method.upper(), operation.path) in _CHECKED_BEYOND_SCHEMA:
        return [negative_data_rejection, positive_data_acceptance]
    return [negative_data_rejection]


def test_no_generated_request_gets_a_5xx(ingress_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{ingress_url}/openapi.json")
    seed = _seed(ingress_url)
    tokens = [OPERATOR_TOKEN, OPERATOR_TOKEN, seed["agent_token"], "garbage~token-garbage", None]
    statuses: Counter[int] = Counter()
    session = requests.Session()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=_strategy(operation, seed), token=st.sampled_from(tokens))
        def run(case: Any, token: str | None) -> None:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            _bounded(case)
            response = case.call_and_validate(
                base_url=ingress_url,
                session=session,
                headers=headers,
                excluded_checks=_excluded(case.operation),
                timeout=30,
            )
            statuses[response.status_code] += 1

        run()
    total = sum(statuses.values())
    print(f"\n{total} generated requests, statuses {sorted(statuses.items())}")
    assert total >= 1500
    assert not [s for s in statuses if s >= 500]
    assert requests.get(f"{ingress_url}/readyz", timeout=10).status_code == 200
