"""The chaos run (docs/reliability.md): two processes of every service under the load generator,
a process killed with SIGKILL every few seconds and Redis killed and restarted, then every
invariant checked from the ledger and the histories. The short run is for CI; the long one is by
hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.loadgen import LoadOptions
from tests.chaos.delegation import DelegationOptions
from tests.chaos.gated import GatedOptions
from tests.chaos.mcp_rounds import McpOptions
from tests.chaos.run import ChaosConfig, ChaosReport, chaos_run

ARCHIVE_SMALL = {
    "LONGRUN_HOT_EVENTS": "40",
    "LONGRUN_HOT_FINISHED": "3",
    "LONGRUN_ARCHIVE_INTERVAL_S": "0.5",
}
"""Archiving forced small: a segment past 40 hot events, WorkItems past 3 finished ones; the
checks then read across the archive and check every event and WorkItem is held once."""


def assert_held(report: ChaosReport, keep: Path) -> None:
    summary = json.dumps(report.summary(), indent=2, default=str)
    (keep / "chaos-report.json").write_text(summary)
    assert report.findings.violations == [], summary
    assert report.load.failed == [], summary
    assert report.load.accepted.unexpected == [], summary
    assert report.chaos.unrecovered == [], summary
    assert report.left == {}, summary
    # The run did what it claims: load went through, processes and Redis were killed.
    assert report.load.completed > 0, summary
    assert report.chaos.redis_restarts, summary
    assert len([k for k in report.chaos.kills if k[1] != "redis"]) >= 3, summary
    assert report.findings.figures["accepted callbacks"] > 0, summary
    assert report.findings.figures["timer triggers"] > 0, summary
    if report.delegations is not None:
        # Every kind of delegation round ran, and results travelled back up.
        assert report.delegations.failed == [], summary
        assert set(report.delegations.rounds) == {"results", "cancel", "parent_ends"}, summary
        assert report.findings.figures["delegation results delivered"] > 0, summary
    if report.mcp is not None:
        # Agents called the MCP tool, and every call is accounted for (see mcp_rounds.py).
        assert report.mcp.failed == [], summary
        assert report.findings.figures["mcp calls ok"] > 0, summary
    if report.gated is not None:
        # Both kinds of gated round ran, and every gated item was checked done.
        assert report.gated.failed == [], summary
        assert set(report.gated.rounds) == {"passing", "failing_once"}, summary
        checked = report.findings.figures["gated rounds checked"]
        assert checked == len(report.gated.items) > 0, summary


@pytest.mark.timeout(240)
async def test_short_chaos_run_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    config = ChaosConfig(
        load=LoadOptions(agents=30, rate=3.0, duration=40.0, step_timeout=60.0),
        kill_every=4.0,
        redis_restart_at=(15.0,),
        quiesce_within=60.0,
        delegations=DelegationOptions(trees=3, duration=40.0, step_timeout=60.0),
        mcp=McpOptions(agents=4, duration=40.0, step_timeout=60.0),
        gated=GatedOptions(agents=4, duration=40.0, step_timeout=60.0),
        extra_env=ARCHIVE_SMALL,
    )
    report = await chaos_run(config, tmp_path)
    assert_held(report, tmp_path)
    # The archive took part: segments and WorkItems left Redis while processes were killed.
    summary = json.dumps(report.summary(), indent=2, default=str)
    assert report.findings.figures["archived segments"] > 0, summary
    assert report.findings.figures["archived work items"] > 0, summary


@pytest.mark.manual
@pytest.mark.timeout(3600)
async def test_long_chaos_run(tmp_path: Path) -> None:
    """At least 10 minutes and 1,000 agents; writes its report next to the test's tmp dir."""
    config = ChaosConfig(
        load=LoadOptions(agents=1000, rate=15.0, duration=600.0, step_timeout=180.0),
        kill_every=5.0,
        redis_restart_at=(200.0, 400.0),
        delegations=DelegationOptions(trees=30, duration=600.0, step_timeout=180.0),
        mcp=McpOptions(agents=20, duration=600.0, step_timeout=180.0),
        gated=GatedOptions(agents=30, duration=600.0, step_timeout=180.0),
    )
    report = await chaos_run(config, tmp_path)
    assert_held(report, tmp_path)
