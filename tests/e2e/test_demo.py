"""`longrun demo` as a user runs it: the whole scenario on the embedded default, exit code 0."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import clean_env, longrun_command


@pytest.mark.timeout(400)
def test_demo_completes_the_scenario_and_exits_zero(tmp_path: Path) -> None:
    done = subprocess.run(  # noqa: S603 - our own entry point
        [*longrun_command(), "demo"],
        cwd=tmp_path,
        env=clean_env(tmp_path, COLUMNS="160"),
        capture_output=True,
        text=True,
        timeout=380,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "demo passed" in output
    assert "reviewer callback delivered: disposition triggered" in output
    assert "#+TODO: TODO NEXT DOING WAITING BLOCKED | DONE" in output
    assert "- [X] Wait for the approval callback" in output
    assert "ok=True" in output


@pytest.mark.timeout(60)
def test_demo_against_a_redis_that_does_not_answer_fails_clearly(tmp_path: Path) -> None:
    done = subprocess.run(  # noqa: S603 - our own entry point
        [*longrun_command(), "demo", "--redis-url", "redis://127.0.0.1:1/0"],
        cwd=tmp_path,
        env=clean_env(tmp_path, COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 1
    assert "demo failed: Redis at redis://127.0.0.1:1/0 does not answer" in done.stdout
