"""`longrun up` on the 3-primary cluster: the four services as real processes
(LONGRUN_REDIS_CLUSTER=true), one agent on each primary worked from an operator message through
its callback (sent twice with one Idempotency-Key: counted once) to completion and a verified
history."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import pytest
import redis as sync_redis

from services.cli.demo_scenario import DEMO_REQUEST
from shared.wire.names import Names
from tests.cluster.conftest import Cluster
from tests.e2e.conftest import UpProcess, clean_env, longrun_command

pytestmark = pytest.mark.e2e

T = TypeVar("T")
PARTITIONS = 16


def poll(probe: Callable[[], T | None], what: str, within: float = 90.0) -> T:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def one_agent_per_primary(cluster: Cluster, names: Names) -> dict[int, str]:
    """Agent ids whose partitions live on each of the cluster's primaries (port -> agent)."""
    chosen: dict[int, str] = {}
    n = 0
    while len(chosen) < len(cluster.ports):
        agent = f"cluster-agent-{n}"
        chosen.setdefault(cluster.node_port_of(names.agent(agent)), agent)
        n += 1
    return chosen


def external_trigger_counts(node: sync_redis.Redis, names: Names, agent: str) -> list[int]:
    waits = [*node.hvals(names.waits(agent)), *node.hvals(names.waits_done(agent))]
    parsed = [orjson.loads(raw) for raw in waits]
    return [w["trigger_count"] for w in parsed if w["wake"] == "external"]


@pytest.fixture
def up_on_cluster(
    redis_cluster: Cluster, cluster_prefix: str, tmp_path: Path
) -> Iterator[UpProcess]:
    env = clean_env(
        tmp_path,
        REDIS_URL=redis_cluster.url,
        LONGRUN_REDIS_CLUSTER="true",
        LONGRUN_PREFIX=cluster_prefix,
        LONGRUN_PARTITIONS=str(PARTITIONS),
    )
    log = (tmp_path / "up.stderr").open("w")
    proc = subprocess.Popen(  # noqa: S603 - our own entry point
        [*longrun_command(), "up", "--http-port", "0", "--provider", "scripted"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    up = UpProcess(proc)
    up.start_reader()
    yield up
    up.close()
    log.close()


def work_through(http: httpx.Client, agent: str) -> dict[str, Any]:
    """Operator message -> scripted WorkItem waiting for a callback -> callback (twice, one
    key) -> completion. Returns the completed WorkItem."""
    created = http.put(f"/v1/agents/{agent}")
    assert created.status_code == 201, created.text
    callback_url = created.json()["callback_url"]
    sent = http.post(f"/v1/agents/{agent}/messages", json={"text": DEMO_REQUEST})
    assert sent.status_code == 202, sent.text

    def waiting() -> dict[str, Any] | None:
        items = http.get(f"/v1/agents/{agent}/work-items").json()["work_items"]
        return next(
            (
                item
                for item in items
                if any(w["wake"] == "external" for w in item.get("active_waits") or [])
            ),
            None,
        )

    item = poll(waiting, f"{agent}'s WorkItem to wait for its callback")
    assert item["scheduling_state"] == "waiting_external"
    headers = {"Idempotency-Key": f"verdict-{agent}"}
    first = httpx.post(callback_url, json={"verdict": "approved"}, headers=headers, timeout=30)
    again = httpx.post(callback_url, json={"verdict": "approved"}, headers=headers, timeout=30)
    assert first.status_code == 202, first.text
    assert first.json()["disposition"] == "triggered"
    assert again.status_code == 202, again.text
    assert again.json()["disposition"] == "duplicate"

    def completed() -> dict[str, Any] | None:
        view = http.get(f"/v1/agents/{agent}/work-items/{item['id']}").json()["work_item"]
        return view if view["state"] == "completed" else None

    return poll(completed, f"{agent}'s WorkItem to complete")


@pytest.mark.timeout(300)
def test_up_on_a_cluster_works_agents_on_every_primary_to_completion(
    redis_cluster: Cluster, cluster_prefix: str, up_on_cluster: UpProcess
) -> None:
    ready = up_on_cluster.wait_for("longrun ready ", within=120)
    url, token = ready.split()[-1], up_on_cluster.value("longrun operator-token ")
    names = Names(prefix=cluster_prefix, partitions=PARTITIONS)
    agents = one_agent_per_primary(redis_cluster, names)
    assert set(agents) == set(redis_cluster.ports)
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as http:
        for port, agent in sorted(agents.items()):
            done = work_through(http, agent)
            assert done["result_summary"], agent
            verify = http.get(f"/v1/agents/{agent}/history/verify").json()
            assert verify["ok"] is True, (port, agent, verify)
        # The operator's listing reads every partition's index, on every primary.
        listed = http.get("/v1/agents").json()["agents"]
        assert {a["agent_id"] for a in listed} == set(agents.values())
    # Each agent's state, history and stream entries are on the primary its partition names,
    # and its callback, sent twice with one key, was counted once.
    for port, agent in agents.items():
        node = redis_cluster.node(port)
        assert node.exists(names.agent(agent), names.history(agent)) == 2
        assert node.xlen(names.events(names.partition(agent))) > 0
        assert external_trigger_counts(node, names, agent) == [1]
        node.close()
    assert up_on_cluster.stop() == 0
