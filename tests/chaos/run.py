"""One chaos run: the stack under the load generator while the controller kills processes and
Redis; then quiescence and the invariants. Used by the CI test, the long manual run, and the
cluster run (which passes its own Redis URL and `cluster=True`, and no `AofRedis`).

By hand: `python -m tests.chaos.run --agents 1000 --duration 600 --report report.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from shared.store.client import AnyRedis, connect
from shared.wire.names import Names
from tests.bench.loadgen import LoadGenerator, LoadOptions, LoadReport, Target
from tests.chaos.delegation import DelegationLog, DelegationOptions, DelegationRounds
from tests.chaos.delegation_checks import check_delegations
from tests.chaos.gated import ENV as GATED_ENV
from tests.chaos.gated import GatedLog, GatedOptions, GatedRounds, check_gated
from tests.chaos.harness import AofRedis, ChaosLog, ChaosStack, Controller
from tests.chaos.invariants import Findings, check, quiesce
from tests.chaos.mcp_rounds import FixtureServer, McpLog, McpOptions, McpRounds, check_mcp_calls
from tests.chaos.stored import archive_settled, use_archive


@dataclass(frozen=True)
class ChaosConfig:
    load: LoadOptions = field(default_factory=LoadOptions)
    kill_every: float = 3.0
    redis_restart_at: Sequence[float] = (10.0,)
    """Seconds into the run at which the owned Redis is killed and restarted."""
    replicas: int = 2
    quiesce_within: float = 90.0
    extra_env: Mapping[str, str] = field(default_factory=dict)
    delegations: DelegationOptions | None = None
    """Delegation trees driven beside the load (tests/chaos/delegation.py), if any."""
    mcp: McpOptions | None = None
    """Agents calling an MCP tool beside the load (tests/chaos/mcp_rounds.py), if any."""
    gated: GatedOptions | None = None
    """Agents working webhook-gated WorkItems beside the load (tests/chaos/gated.py), if any."""


@dataclass
class ChaosReport:
    load: LoadReport
    chaos: ChaosLog
    findings: Findings
    left: dict[str, int]
    started_at: str
    wall_s: float
    loadavg: tuple[float, float, float]
    cpu_s: float
    delegations: DelegationLog | None = None
    mcp: McpLog | None = None
    gated: GatedLog | None = None

    @property
    def ok(self) -> bool:
        return not (
            self.findings.violations
            or self.load.failed
            or self.load.accepted.unexpected
            or self.chaos.unrecovered
            or (self.delegations is not None and self.delegations.failed)
            or (self.mcp is not None and self.mcp.failed)
            or (self.gated is not None and self.gated.failed)
        )

    def summary(self) -> dict[str, Any]:
        recoveries = self.chaos.all_recoveries()
        return {
            "started_at": self.started_at,
            "wall_s": round(self.wall_s, 1),
            "machine": f"{platform.machine()} {os.cpu_count()} cpus {platform.platform()}",
            "loadavg_at_end": self.loadavg,
            "children_cpu_s": round(self.cpu_s, 1),
            "load": self.load.summary(),
            "kills": len(self.chaos.kills),
            "killed": sorted({name for _, name in self.chaos.kills}),
            "redis_restarts_s": [round(s, 2) for s in self.chaos.redis_restarts],
            "recovery_s": {
                "n": len(recoveries),
                "p50": _q(recoveries, 0.5),
                "p99": _q(recoveries, 0.99),
                "max": max(recoveries) if recoveries else None,
                "by_service": {
                    k: {"n": len(v), "p99": _q(sorted(v), 0.99)}
                    for k, v in sorted(self.chaos.recoveries.items())
                },
            },
            "unrecovered": self.chaos.unrecovered,
            "exited_without_a_kill": self.chaos.self_exits,
            "figures": dict(sorted(self.findings.figures.items())),
            "dead_letters": dict(self.findings.dead_letters),
            "backlog_left": self.left,
            "violations": self.findings.violations[:50],
            "violation_count": len(self.findings.violations),
            "stuck": self.findings.stuck[:5],
            "rounds_failed": self.load.failed[:20],
            "unexpected_answers": self.load.accepted.unexpected[:20],
            "delegation_rounds": self.delegations.summary() if self.delegations else None,
            "mcp_rounds": self.mcp.summary() if self.mcp else None,
            "gated_rounds": self.gated.summary() if self.gated else None,
        }


def _q(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, round(q * (len(values) - 1)))], 2)


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


async def chaos_run(
    config: ChaosConfig,
    workdir: Path,
    *,
    redis_url: str | None = None,
    cluster: bool = False,
    console: Console | None = None,
) -> ChaosReport:
    """Without `redis_url`, owns a private AOF Redis and restarts it at `redis_restart_at`."""
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    began = time.monotonic()
    cpu = _children_cpu()
    aof = AofRedis(workdir / "redis") if redis_url is None else None
    if aof is not None:
        aof.start()
    url = redis_url or (aof.url if aof else "")
    stack = ChaosStack(
        url,
        workdir,
        cluster=cluster,
        replicas=config.replicas,
        extra_env={**GATED_ENV, **config.extra_env},
        python=sys.executable,
    )
    redis = connect(url, cluster=cluster)
    # The services' default archive (LONGRUN_AGENT_HOME's sibling), read by the checks.
    use_archive(stack.names, workdir / "archive")
    mcp_server = FixtureServer(workdir) if config.mcp else None
    gates: GatedRounds | None = None
    try:
        if mcp_server is not None:
            mcp_server.start()
        stack.start()
        target = Target(
            stack.ingress_urls, stack.token, url, stack.prefix, stack.partitions, cluster
        )
        gates = GatedRounds(target, config.gated) if config.gated else None
        if gates is not None:
            await gates.start()
        generator = LoadGenerator(target, config.load)
        controller = Controller(
            stack,
            redis,
            aof,
            kill_every=config.kill_every,
            redis_restart_at=config.redis_restart_at,
        )
        chaos = asyncio.create_task(controller.run(config.load.duration))
        trees = DelegationRounds(target, config.delegations) if config.delegations else None
        delegating = asyncio.create_task(trees.run()) if trees else None
        callers = McpRounds(target, config.mcp, mcp_server) if config.mcp and mcp_server else None
        calling = asyncio.create_task(callers.run()) if callers else None
        gating = asyncio.create_task(gates.run()) if gates else None
        load = await generator.run(console)
        delegations = await delegating if delegating else None
        mcp = await calling if calling else None
        gated = await gating if gating else None
        log = await chaos
        await controller.settle()
        left = await quiesce(redis, stack.names, config.quiesce_within)
        agents = [f"load-{config.load.run_id}-{n:05d}" for n in range(config.load.agents)]
        agents += delegations.builtin if delegations else []
        agents += mcp.agents if mcp else []
        everyone = [*agents, *(delegations.external if delegations else [])]
        everyone += gated.agents if gated else []
        left |= await archive_quiesced(redis, stack.names, everyone, stack.extra_env, config)
        if mcp is not None:
            generator.accepted.messages.update(mcp.accepted.messages)
            generator.accepted.ambiguous_messages.update(mcp.accepted.ambiguous_messages)
        external = delegations.external if delegations else []
        external += gated.agents if gated else []
        findings = await check(redis, stack.names, generator.accepted, agents, external)
        await _check_rounds(
            redis, stack.names, findings, delegations=delegations, mcp=mcp, gated=gated
        )
    finally:
        if gates is not None:
            await gates.stop()
        stack.stop()
        if mcp_server is not None:
            mcp_server.stop()
        await redis.aclose()
        if aof is not None:
            aof.stop()
    return ChaosReport(
        load,
        log,
        findings,
        left,
        started_at,
        time.monotonic() - began,
        os.getloadavg(),
        _children_cpu() - cpu,
        delegations,
        mcp,
        gated,
    )


async def archive_quiesced(
    redis: AnyRedis,
    names: Names,
    agents: list[str],
    env: Mapping[str, str],
    config: ChaosConfig,
) -> dict[str, int]:
    """Until the archiver has nothing left to move (it moves only what passed a hot limit, so it
    stops once every agent is within them): the checks then read a still picture. What is
    left after `quiesce_within` is reported like a backlog."""
    deadline = time.monotonic() + config.quiesce_within
    while not await archive_settled(redis, names, agents, dict(env)):
        if time.monotonic() > deadline:
            return {"archive": 1}
        await asyncio.sleep(0.5)
    return {}


async def _check_rounds(
    redis: AnyRedis,
    names: Names,
    findings: Findings,
    *,
    delegations: DelegationLog | None,
    mcp: McpLog | None,
    gated: GatedLog | None,
) -> None:
    """The invariants of the rounds that ran beside the load."""
    if delegations is not None:
        await check_delegations(redis, names, delegations, findings)
    if mcp is not None:
        await check_mcp_calls(redis, names, mcp, findings)
    if gated is not None:
        await check_gated(redis, names, gated, findings)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--kill-every", type=float, default=5.0)
    parser.add_argument("--redis-restart-at", type=float, action="append")
    parser.add_argument("--step-timeout", type=float, default=120.0)
    parser.add_argument("--trees", type=int, default=0, help="delegation trees (0: none)")
    parser.add_argument("--mcp-agents", type=int, default=0, help="agents calling an MCP tool")
    parser.add_argument("--gated", type=int, default=0, help="gated-item agents (0: none)")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--keep", type=Path, help="keep logs and the AOF in this directory")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    config = ChaosConfig(
        load=LoadOptions(
            agents=args.agents,
            rate=args.rate,
            duration=args.duration,
            step_timeout=args.step_timeout,
        ),
        kill_every=args.kill_every,
        redis_restart_at=args.redis_restart_at or (args.duration / 3, 2 * args.duration / 3),
        extra_env={"LONGRUN_LOG_LEVEL": args.log_level},
        delegations=DelegationOptions(
            trees=args.trees, duration=args.duration, step_timeout=args.step_timeout
        )
        if args.trees
        else None,
        mcp=McpOptions(
            agents=args.mcp_agents, duration=args.duration, step_timeout=args.step_timeout
        )
        if args.mcp_agents
        else None,
        gated=GatedOptions(
            agents=args.gated, duration=args.duration, step_timeout=args.step_timeout
        )
        if args.gated
        else None,
    )
    console = Console(stderr=True)
    if args.keep:
        report = asyncio.run(chaos_run(config, args.keep, console=console))
    else:
        with tempfile.TemporaryDirectory(prefix="longrun-chaos-") as tmp:
            report = asyncio.run(chaos_run(config, Path(tmp), console=console))
    summary = report.summary()
    text = json.dumps(summary, indent=2, default=str)
    console.print(report.load.table())
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
