"""The short chaos run on the 3-primary cluster: two processes of every service with
LONGRUN_REDIS_CLUSTER=true under the load generator, one killed with SIGKILL every few seconds
and restarted, a primary killed with SIGKILL and restarted once (its AOF and nodes.conf bring it
back with its data and slots), then every invariant checked from the ledger and the histories.

It is the chaos harness of tests/chaos with the cluster in place of its private Redis: the same
stack, load, controller, quiescence and checks, the partition layout unchanged.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.store.client import connect
from tests.bench.loadgen import LoadGenerator, LoadOptions, Target
from tests.chaos.harness import ChaosLog, ChaosStack, Controller
from tests.chaos.invariants import Findings, check, quiesce
from tests.cluster.conftest import Cluster

# Left out by `-m 'not chaos'` like the single-server chaos run.
pytestmark = [pytest.mark.chaos, pytest.mark.e2e]


@dataclass
class PrimaryRestarter:
    """What the controller restarts in place of its private Redis: one primary of the cluster,
    the one owning the most partitions, so the restart hits the most agents."""

    cluster: Cluster
    port: int

    def kill9_and_restart(self) -> float:
        return self.cluster.kill9_and_restart(self.port)


@dataclass
class ClusterChaos:
    load_failed: list[str]
    unexpected: list[str]
    completed: int
    log: ChaosLog
    findings: Findings
    left: dict[str, int]
    summary: str


async def run_on_cluster(
    cluster: Cluster, workdir: Path, options: LoadOptions, *, kill_every: float, restart_at: float
) -> ClusterChaos:
    stack = ChaosStack(cluster.url, workdir, cluster=True, replicas=2, python=sys.executable)
    owners = [cluster.node_port_of(stack.names.commands(p)) for p in range(stack.partitions)]
    busiest = max(set(owners), key=owners.count)
    redis = connect(cluster.url, cluster=True)
    try:
        stack.start()
        target = Target(
            stack.ingress_urls, stack.token, cluster.url, stack.prefix, stack.partitions, True
        )
        generator = LoadGenerator(target, options)
        controller = Controller(
            stack,
            redis,
            PrimaryRestarter(cluster, busiest),  # type: ignore[arg-type]
            kill_every=kill_every,
            redis_restart_at=(restart_at,),
        )
        chaos = asyncio.create_task(controller.run(options.duration))
        load = await generator.run(None)
        log = await chaos
        await controller.settle()
        left = await quiesce(redis, stack.names, 90.0)
        agents = [f"load-{options.run_id}-{n:05d}" for n in range(options.agents)]
        findings = await check(redis, stack.names, generator.accepted, agents)
    finally:
        stack.stop()
        await redis.aclose()
    summary = {
        "load": load.summary(),
        "kills": log.kills,
        "redis_restarts_s": log.redis_restarts,
        "unrecovered": log.unrecovered,
        "figures": findings.figures,
        "violations": findings.violations[:50],
        "known_bug_hits": getattr(findings, "known", []),
        "stuck": findings.stuck[:5],
        "backlog_left": left,
    }
    return ClusterChaos(
        load.failed,
        load.accepted.unexpected,
        load.completed,
        log,
        findings,
        left,
        json.dumps(summary, indent=2, default=str),
    )


@pytest.mark.timeout(300)  # a hang guard; a run takes about a minute on an idle machine
async def test_short_chaos_run_on_a_cluster_loses_and_duplicates_nothing(
    redis_cluster: Cluster, tmp_path: Path
) -> None:
    options = LoadOptions(agents=24, rate=3.0, duration=30.0, step_timeout=60.0)
    run = await run_on_cluster(redis_cluster, tmp_path, options, kill_every=4.0, restart_at=12.0)
    (tmp_path / "chaos-report.json").write_text(run.summary)
    assert run.findings.violations == [], run.summary
    assert run.load_failed == [], run.summary
    assert run.unexpected == [], run.summary
    assert run.log.unrecovered == [], run.summary
    assert run.left == {}, run.summary
    # The run did what it claims: load went through, a primary and processes were killed.
    assert run.completed > 0, run.summary
    assert len(run.log.redis_restarts) == 1, run.summary
    assert len([k for k in run.log.kills if k[1] != "redis"]) >= 3, run.summary
    assert run.findings.figures["accepted callbacks"] > 0, run.summary
    assert run.findings.figures["timer triggers"] > 0, run.summary
    # Hits of a known bug, if the checks list any, are reported, as in the single-server run.
    known = getattr(run.findings, "known", [])
    if known:
        print("known bug hit:", *known, sep="\n  ")
