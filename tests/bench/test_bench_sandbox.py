"""What the command sandbox costs per command: `true` run through the bubblewrap sandbox
(`Bubblewrap.run`, as RunCommand and `command` checks run it) against the same `true` run
directly with asyncio's subprocess and the same output capture, in the same run, interleaved
rounds of sequential commands. Wall time per command (p50, p90, mean) is printed; nothing is
asserted about timing.

    .venv/bin/python -m pytest tests/bench/test_bench_sandbox.py -m bench -s
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from services.turn_executor.sandbox import (
    Bubblewrap,
    SandboxLimits,
    build_sandbox,
    default_extra_paths,
)

pytestmark = [pytest.mark.bench, pytest.mark.timeout(600)]

ROUNDS = 5
PER_ROUND = 40


async def direct_true(home: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        "true",
        cwd=home,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await process.communicate()
    assert process.returncode == 0


async def timed(run: Callable[[], Awaitable[object]], count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        await run()
        out.append(time.perf_counter() - started)
    return out


def summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[int(len(ms) * 0.9)]
    return (
        f"{name:>10}: {len(ms)} commands, p50 {statistics.median(ms):.2f} ms, "
        f"p90 {p90:.2f} ms, mean {statistics.fmean(ms):.2f} ms"
    )


async def test_sandboxed_true_against_direct_true(tmp_path: Path) -> None:
    sandbox = build_sandbox(
        "bubblewrap", tmp_path / "probe", SandboxLimits(), default_extra_paths()
    )
    assert isinstance(sandbox, Bubblewrap), sandbox.reason
    home = tmp_path / "home"
    home.mkdir()

    async def sandboxed() -> None:
        result = await sandbox.run(home, ["true"], ".", {}, 30)
        assert result.exit_code == 0, result.stderr_tail

    direct: list[float] = []
    boxed: list[float] = []
    for _ in range(ROUNDS):
        direct += await timed(lambda: direct_true(home), PER_ROUND)
        boxed += await timed(sandboxed, PER_ROUND)
    print()
    print(summary("direct", direct))
    print(summary("sandboxed", boxed))
    added = statistics.median(boxed) - statistics.median(direct)
    print(f"the sandbox adds {added * 1000:.2f} ms per command (p50)")
