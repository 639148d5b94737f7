"""Executor CPU per turn with per-agent models, usage accounting and the retry path, against the
same scripted turns on the executor from before that change, interleaved in one run.

Each phase starts one ledger and one executor process on a fresh prefix and drives the scripted
turns of the executor benchmark (`test_bench_executor.drive`: requests of three todos, the next
tick as soon as a turn finished). The "before" executor runs the source tree of
`BENCH_MODELS_BEFORE_REF` (default: the commit before model usage was introduced), exported with
`git archive` and started from that directory, so it imports its own `services` and `shared`;
the ledger is always the current one. The "after" executor runs this tree with each agent's
daily token budget set (so every turn reads and checks it) and sends usage with every
`FinishTurn`. Phases alternate before/after `BENCH_MODELS_PAIRS` times (default 2) so drift in
the machine's load falls on both sides. Nothing about timing is asserted; what is asserted is
that no turn failed and nothing was dead-lettered.

Run: `python -m pytest tests/bench/test_bench_executor_models.py -m bench -s`.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.bench import test_bench_executor as bx
from tests.integration.conftest import ROOT, ServiceProcess, free_port

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]

PAIRS = int(os.environ.get("BENCH_MODELS_PAIRS", "2"))
AGENTS = int(os.environ.get("BENCH_MODELS_AGENTS", "100"))


def before_ref() -> str:
    ref = os.environ.get("BENCH_MODELS_BEFORE_REF")
    if ref:
        return ref
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "shared/domain/usage.py"],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return f"{added[-1]}^"


def export_tree(ref: str, into: Path) -> Path:
    """The `services` and `shared` packages as they were at `ref`."""
    archive = subprocess.run(  # noqa: S603 - git with a ref the operator chose
        ["git", "archive", "--format=tar", ref, "services", "shared"],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


class FromTree(ServiceProcess):
    """A service process started from another source tree (its directory comes first on the
    module path: `python -m` puts the working directory there)."""

    tree: Path | None = None

    def start(self) -> None:
        assert self.tree is not None
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", self.module],
                env=self.env,
                cwd=self.tree,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1


async def phase(cfg: bx.Config, tree: Path | None, redis_url: str, tmp: Path) -> bx.Result:
    original = bx.spawn

    def spawn(module: str, port_env: str, env: dict[str, str], log: Path) -> ServiceProcess:
        if tree is None or module != "services.turn_executor":
            return original(module, port_env, env, log)
        port = free_port()
        proc = FromTree(module, {**env, port_env: str(port)}, port, log)
        proc.tree = tree
        proc.start()
        return proc

    await asyncio.to_thread(tmp.mkdir, parents=True, exist_ok=True)
    bx.spawn = spawn
    try:
        return await bx.run_phase(cfg, 1, AGENTS, redis_url, tmp)
    finally:
        bx.spawn = original


async def test_executor_cpu_per_turn_before_and_after_models(
    redis_url: str, tmp_path: Path
) -> None:
    cfg = bx.Config()
    ref = before_ref()
    before = export_tree(ref, tmp_path / "before")
    results: list[tuple[str, bx.Result]] = []
    for n in range(PAIRS):
        for label, tree in (("before", before), ("after", None)):
            result = await phase(cfg, tree, redis_url, tmp_path / f"{label}-{n}")
            results.append((label, result))
            await asyncio.sleep(1)
    print(f"\nbefore = {ref}; {AGENTS} agents, one executor, interleaved")
    print("| executor | turns/s | executor CPU ms/turn | overhead p50 ms | ledger CPU ms/turn |")
    print("|---|---|---|---|---|")
    for label, r in results:
        per_turn = 1000 / max(r.turns, 1)
        print(
            f"| {label} | {r.rate:.1f} | {r.executor_cpu * per_turn:.2f} | "
            f"{bx.pct(r.overhead_ms, 0.5):.1f} | {r.ledger_cpu * per_turn:.2f} |"
        )
    for label in ("before", "after"):
        mine = [r for lab, r in results if lab == label]
        cpu = sum(r.executor_cpu for r in mine) * 1000 / max(sum(r.turns for r in mine), 1)
        print(f"{label}: executor CPU {cpu:.2f} ms/turn over {sum(r.turns for r in mine)} turns")
    assert all(r.turns > 0 for _, r in results)
