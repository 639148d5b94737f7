"""Escape attempts against the bubblewrap sandbox RunCommand and `command` checks run in: each
is contained and answered (an exit code, a message, a timeout), never a crash of the caller.
Needs `bwrap` (.ci/run installs Debian's bubblewrap); a machine where it does not work fails
here rather than skipping."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from urllib.parse import urlparse

import pytest

from services.turn_executor.sandbox import (
    BWRAP_PROCESSES,
    Bubblewrap,
    CommandResult,
    SandboxLimits,
    Unavailable,
    build_sandbox,
    default_extra_paths,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def sandbox(tmp_path: Path) -> Bubblewrap:
    built = build_sandbox(
        "bubblewrap", tmp_path / "probe", SandboxLimits(tail_chars=4000), default_extra_paths()
    )
    assert isinstance(built, Bubblewrap), f"bubblewrap does not work here: {built.reason}"
    return built


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "homes" / "agent"
    path.mkdir(parents=True)
    return path


async def sh(sandbox: Bubblewrap, home: Path, script: str, timeout_s: float = 30) -> CommandResult:
    return await sandbox.run(home, ["/bin/sh", "-c", script], ".", {}, timeout_s)


async def test_home_is_writable_at_workspace(sandbox: Bubblewrap, home: Path) -> None:
    result = await sh(sandbox, home, "echo hello > note.txt && pwd && id -u")
    assert result.exit_code == 0, result.stderr_tail
    assert result.stdout_tail.split() == ["/workspace", "1000"]
    assert (home / "note.txt").read_text() == "hello\n"


async def test_writing_outside_workspace_is_refused(
    sandbox: Bubblewrap, home: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    targets = [str(outside), "/usr/owned", "/etc/owned", "/owned", "/proc/owned"]
    script = "".join(f"touch {path} || echo refused {path};" for path in targets)
    result = await sh(sandbox, home, script)
    assert result.stdout_tail.splitlines() == [f"refused {path}" for path in targets]
    assert not any(map(os.path.exists, targets))


async def test_the_operator_token_is_not_in_the_environment(
    sandbox: Bubblewrap, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = secrets.token_hex(16)
    monkeypatch.setenv("LONGRUN_OPERATOR_TOKEN", token)
    result = await sh(sandbox, home, "env; cat /proc/1/environ; cat /proc/$PPID/environ")
    assert token not in result.stdout_tail + result.stderr_tail
    names = {line.split("=", 1)[0] for line in result.stdout_tail.splitlines() if "=" in line}
    assert not any(name.startswith("LONGRUN_") for name in names)
    assert "REDIS_URL" not in names


async def test_no_socket_reaches_the_host_redis(sandbox: Bubblewrap, home: Path) -> None:
    url = urlparse(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    port = url.port or 6379
    script = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('refused', exc)\n"
    )
    result = await sandbox.run(home, ["python3", "-c", script], ".", {}, 30)
    assert result.exit_code == 0, result.stderr_tail
    assert "CONNECTED" not in result.stdout_tail
    assert result.stdout_tail.startswith("refused")


async def test_a_fork_bomb_is_held_to_the_process_limit(sandbox: Bubblewrap, home: Path) -> None:
    marker = f"bomb{secrets.token_hex(6)}"
    bomb = f"{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 2; echo survived"
    run = asyncio.create_task(sandbox.run(home, ["/bin/bash", "-c", bomb], ".", {}, 6))
    most = grouped = 0
    while not run.done():
        most = max(most, len(_running(marker)))
        grouped = max(grouped, len(_in_sandbox_groups()))
        await asyncio.sleep(0.05)
    result = await run
    assert result.timed_out or "survived" in result.stdout_tail
    assert 0 < most <= sandbox.limits.pids + BWRAP_PROCESSES  # bwrap's own carry its argv
    # Every process the bomb made, named or not, is counted in its pids group and held there
    # (RLIMIT_NPROC alone does not hold a sandbox whose user is root outside).
    assert 0 < grouped <= sandbox.limits.pids + BWRAP_PROCESSES
    assert await _gone(marker), "a fork bomb process outlived its sandbox"
    assert (await sh(sandbox, home, "echo fine")).stdout_tail == "fine\n"


async def test_a_2gb_allocation_fails_inside(sandbox: Bubblewrap, home: Path) -> None:
    script = "data = bytearray(2 * 1024 ** 3); print('allocated')"
    result = await sandbox.run(home, ["python3", "-c", script], ".", {}, 30)
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr_tail
    assert "allocated" not in result.stdout_tail


async def test_an_endless_loop_is_killed_at_its_timeout(sandbox: Bubblewrap, home: Path) -> None:
    result = await sh(sandbox, home, "echo start; while :; do :; done", timeout_s=2)
    assert result.timed_out
    assert result.exit_code == -9
    assert result.stdout_tail == "start\n"
    assert result.duration_ms >= 2000


async def test_a_symlink_out_of_workspace_leads_nowhere(
    sandbox: Bubblewrap, home: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the executor's secret")
    (home / "link").symlink_to(secret)
    script = f"cat link; cat {secret}; ln -s /etc/shadow shadow; cat shadow; echo x > link"
    result = await sh(sandbox, home, script)
    assert "the executor's secret" not in result.stdout_tail
    assert secret.read_text() == "the executor's secret"
    assert "root:" not in result.stdout_tail


async def test_a_command_outliving_its_timeout_is_killed_with_its_children(
    sandbox: Bubblewrap, home: Path
) -> None:
    marker = f"{secrets.randbelow(10**6) + 10**6}.5"
    script = f"(setsid sleep {marker} &) ; nohup sleep {marker} & sleep {marker}"
    result = await sh(sandbox, home, script, timeout_s=2)
    assert result.timed_out
    assert await _gone(marker), f"a `sleep {marker}` outlived the sandbox"


def _in_sandbox_groups() -> list[str]:
    """The host's processes inside a sandbox's pids group."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            groups = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
        if "longrun-sandbox-" in groups:
            found.append(pid)
    return found


def _running(marker: str) -> list[str]:
    """The host's processes with `marker` on their command line."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(pid)
    return found


async def _gone(marker: str) -> bool:
    """No process with `marker` on its command line is left (within 10 s: the kernel tears
    the namespace down after its init dies)."""
    for _ in range(100):
        if not _running(marker):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_output_keeps_its_tail(sandbox: Bubblewrap, home: Path) -> None:
    result = await sh(sandbox, home, "seq 1 100000; echo oops >&2")
    assert result.exit_code == 0
    assert result.truncated
    assert result.stdout_tail.endswith("100000\n")
    assert len(result.stdout_tail) <= 4000
    assert result.stderr_tail == "oops\n"


async def test_other_work_goes_on_while_commands_run(sandbox: Bubblewrap, home: Path) -> None:
    """The event loop is free while a command spins: a timer set meanwhile fires on time."""
    spin = asyncio.create_task(sh(sandbox, home, "while :; do :; done", timeout_s=3))
    ticks = 0
    while not spin.done():
        await asyncio.sleep(0.05)
        ticks += 1
    assert (await spin).timed_out
    assert ticks > 10


async def test_a_broken_backend_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    missing = Bubblewrap(bwrap=str(tmp_path / "no-bwrap")).probe(tmp_path / "probe")
    assert "does not start" in str(missing.reason)
    off = build_sandbox("none", tmp_path / "probe", SandboxLimits(), ())
    assert isinstance(off, Unavailable)
    assert "LONGRUN_SANDBOX=none" in str(off.reason)
