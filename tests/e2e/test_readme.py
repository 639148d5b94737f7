"""The README's two set-up commands, exactly as written, in a fresh clone of the repository.

The first (install longrun and run the demo) runs end to end and must exit 0. The second is
`bash .ci/run`, which is what CI runs, and this test is part of that run: executing it again from
inside would recurse. So by default the test checks that the second command is `.ci/run` and
that `.ci/run` runs the README's test command (`python -m pytest`); a passing CI run is the
execution of that command on a fresh checkout. With LONGRUN_README_FULL=1 it also runs
`bash .ci/run` in the fresh clone, with the e2e tier deselected in the nested run
(`PYTEST_ADDOPTS=-m "not e2e"`), which is the guard against recursing into itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT

README = ROOT / "README.md"


def setup_commands() -> list[str]:
    """The fenced blocks of the README's `## Set up` section."""
    text = README.read_text()
    section = text.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL)]


def fresh_clone(dest: Path) -> Path:
    """`git clone` of the repository, plus the working tree's uncommitted files (tracked or
    new, never ignored ones), so the clone is what a commit of the current tree would give;
    once everything is committed the overlay changes nothing."""
    git = shutil.which("git")
    assert git is not None
    subprocess.run([git, "clone", "--quiet", str(ROOT), str(dest)], check=True)  # noqa: S603
    listed = subprocess.run(  # noqa: S603
        [git, "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, dest / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif target.exists():  # deleted in the working tree
            target.unlink()
    return dest


def fresh_env() -> dict[str, str]:
    """The caller's environment minus this virtual environment and longrun's settings, as on a
    machine where nothing of longrun is installed yet."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LONGRUN_", "PYTEST_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def run_in(clone: Path, command: str, env: dict[str, str], timeout: float) -> str:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(  # noqa: S603 - the README's own command
        [bash, "-c", command],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in order: the tail shows the failing step
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{output[-6000:]}"
    return output


def test_the_readme_has_exactly_two_set_up_commands() -> None:
    commands = setup_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in command for command in commands), commands
    assert "longrun demo" in commands[0]
    assert commands[1] == "bash .ci/run"
    assert "pytest" in README.read_text().split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    assert "docs/operations.md" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []


def test_the_test_command_is_the_ci_script_running_pytest() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest" in script
    assert "ruff check" in script
    assert "mypy" in script


@pytest.mark.timeout(1200)
def test_the_main_job_command_exits_zero_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "longrun")
    output = run_in(clone, setup_commands()[0], fresh_env(), timeout=1100)
    assert "demo passed" in output
    assert "history" in output


@pytest.mark.manual  # CI itself is `bash .ci/run`: running it nested inside CI would recurse
@pytest.mark.timeout(3600)
def test_the_test_command_passes_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "longrun")
    env = {**fresh_env(), "PYTEST_ADDOPTS": '-m "not e2e"'}
    if "REDIS_URL" in os.environ:
        env["REDIS_URL"] = os.environ["REDIS_URL"]
    run_in(clone, setup_commands()[1], env, timeout=3500)
