"""The command sandbox: runs one argv over an agent's home with bubblewrap (the home at
/workspace read-write, the system read-only, no network, a fresh user, pid, IPC and mount
namespace with an unprivileged uid, a clean environment, CPU-time, memory, process and file-size
limits set by prlimit inside, and a wall-clock limit enforced by killing the sandbox), keeping
only the tails of its output. With no working backend it is `Unavailable` and says why: a command
never runs on the host unconfined."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

log = structlog.get_logger("longrun.executor.sandbox")

WORKSPACE = "/workspace"
SANDBOX_UID = 1000
"""The uid (and gid) commands run as inside their user namespace: no capabilities, and its
process limit counts only that sandbox's processes (the namespace is new per command)."""
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
SANDBOX_TMP = "/tmp"  # noqa: S108 (the sandbox's own tmpfs, private to one command)
BWRAP_ENV = {"PATH": BASE_PATH}
"""bwrap's own environment. Not the executor's: bwrap's init stays in the sandbox's pid
namespace, where a command could read it from /proc/1/environ (operator token, Redis URL)."""
PROBE_TIMEOUT_S = 20.0
PR_SET_PDEATHSIG = 1
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Top-level system paths: symlinks into /usr on merged-/usr systems, else bound read-only."""
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/nsswitch.conf",
)
"""The only parts of /etc a command sees: what the dynamic loader and libc read. Not
/etc/passwd's neighbours (shadow, ssh keys) nor any service's configuration."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one command may use; the wall clock is the call's own `timeout_s`."""

    memory_mb: int = 1024
    """Address space per process (RLIMIT_AS): a larger allocation fails inside the command."""
    pids: int = 128
    """Processes in the sandbox at once (RLIMIT_NPROC in its own user namespace)."""
    file_mb: int = 1024
    """Largest file a command may write (RLIMIT_FSIZE)."""
    tail_chars: int = 16_000
    """Characters kept of each of stdout and stderr (their ends)."""


@dataclass(frozen=True)
class CommandResult:
    """A command's answer as the agent gets it."""

    exit_code: int
    """The command's exit status; negative: killed by that signal (a timeout kills with 9)."""
    stdout_tail: str
    stderr_tail: str
    duration_ms: int
    timed_out: bool
    truncated: bool
    """Some output was dropped: only the last `tail_chars` of a stream are kept."""

    def answer(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "duration_ms": self.duration_ms,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
        }


class Sandbox(Protocol):
    backend: str
    reason: str | None
    """None when commands can run; else why not (shown on the agent view and /readyz)."""

    async def run(
        self, home: Path, argv: Sequence[str], cwd: str, env: Mapping[str, str], timeout_s: float
    ) -> CommandResult: ...


@dataclass
class Unavailable:
    """No working backend: nothing runs, and `reason` says why."""

    reason: str | None
    backend: str = "none"

    async def run(
        self, home: Path, argv: Sequence[str], cwd: str, env: Mapping[str, str], timeout_s: float
    ) -> CommandResult:
        raise SandboxUnavailable(self.reason or "no sandbox")


class SandboxUnavailable(Exception):
    """Raised instead of running a command when no sandbox works."""


@dataclass
class Tail:
    """The last `limit` bytes of a stream, and whether anything was dropped."""

    limit: int
    data: bytearray = field(default_factory=bytearray)
    dropped: bool = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]
            self.dropped = True

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def workdir(cwd: str) -> str:
    """The sandbox path of `cwd`, a normalized path relative to the home."""
    return WORKSPACE if cwd in ("", ".") else f"{WORKSPACE}/{cwd}"


def system_mounts(extra: Sequence[Path] = ()) -> list[str]:
    """bwrap arguments for the read-only system: /usr, the top-level links, the loader's /etc
    files, and `extra` paths (a Python installation outside /usr) at their own place."""
    args = ["--ro-bind", "/usr", "/usr"]
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    for extra_path in extra:
        args += ["--ro-bind-try", str(extra_path), str(extra_path)]
    return args


def default_extra_paths() -> tuple[Path, ...]:
    """The executor's own Python outside /usr (a virtualenv, /opt/...): commands can run
    `python -m pytest` with the packages installed beside longrun."""
    found = {Path(sys.prefix), Path(sys.base_prefix)}
    return tuple(sorted(p for p in found if not p.is_relative_to("/usr")))


@dataclass
class Bubblewrap:
    """Commands under `bwrap`; `probe()` decides whether it works on this machine."""

    bwrap: str = "bwrap"
    limits: SandboxLimits = SandboxLimits()
    extra_paths: tuple[Path, ...] = ()
    backend: str = "bubblewrap"
    reason: str | None = None

    def argv(
        self, home: Path, argv: Sequence[str], cwd: str, env: Mapping[str, str], cpu_s: int
    ) -> list[str]:
        limits = self.limits
        path = ":".join([*(f"{p}/bin" for p in self.extra_paths), BASE_PATH])
        settings = {
            "HOME": WORKSPACE,
            "TMPDIR": SANDBOX_TMP,
            "LANG": "C.UTF-8",
            **env,
            "PATH": path,
        }
        environment = [x for name, value in settings.items() for x in ("--setenv", name, value)]
        return [
            self.bwrap,
            *("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"),
            *("--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"),
            *system_mounts(self.extra_paths),
            *("--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP),
            *("--bind", str(home), WORKSPACE, "--remount-ro", "/", "--chdir", workdir(cwd)),
            *environment,
            "--",
            "prlimit",
            f"--cpu={cpu_s}",
            f"--as={limits.memory_mb * 1024 * 1024}",
            f"--nproc={limits.pids}",
            f"--fsize={limits.file_mb * 1024 * 1024}",
            "--core=0",
            "--",
            *argv,
        ]

    def probe(self, scratch: Path) -> Bubblewrap:
        """Run `true` in the sandbox once; a failure (no bwrap, no user namespaces) is kept
        as the reason commands are not offered."""
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(  # noqa: S603 (a fixed argv: bwrap running `true`)
                self.argv(scratch, ["true"], ".", {}, 5),
                capture_output=True,
                env=BWRAP_ENV,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.reason = f"bubblewrap does not start: {exc}"
        else:
            error = done.stderr.decode(errors="replace").strip()[-300:]
            self.reason = None if done.returncode == 0 else f"bubblewrap fails: {error}"
        return self

    async def run(
        self, home: Path, argv: Sequence[str], cwd: str, env: Mapping[str, str], timeout_s: float
    ) -> CommandResult:
        if self.reason is not None:
            raise SandboxUnavailable(self.reason)
        started = time.monotonic()
        group = PidsGroup.make(self.limits.pids + BWRAP_PROCESSES)
        process = await asyncio.create_subprocess_exec(
            *self.argv(home, argv, cwd, env, int(timeout_s) + 1),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=BWRAP_ENV,
            preexec_fn=group.preexec if group is not None else _die_with_executor,
        )
        out, err = Tail(self.limits.tail_chars), Tail(self.limits.tail_chars)
        timed_out = False
        try:
            async with asyncio.timeout(timeout_s):
                await _collect(process, out, err)
        except TimeoutError:
            timed_out = True
        finally:
            if process.returncode is None:  # timed out or cancelled: nothing may outlive it
                _kill_group(process.pid)
            code = await process.wait()
            if group is not None:
                group.remove()
        return CommandResult(
            exit_code=-signal.SIGKILL if timed_out else code,
            stdout_tail=out.text(),
            stderr_tail=err.text(),
            duration_ms=round((time.monotonic() - started) * 1000),
            timed_out=timed_out,
            truncated=out.dropped or err.dropped,
        )


async def _collect(process: asyncio.subprocess.Process, out: Tail, err: Tail) -> None:
    async def drain(stream: asyncio.StreamReader | None, tail: Tail) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            tail.add(chunk)

    await asyncio.gather(drain(process.stdout, out), drain(process.stderr, err))
    await process.wait()


PIDS_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
"""Where a pids controller may be mounted: cgroup v1's own hierarchy, or the v2 unified one."""
BWRAP_PROCESSES = 4
"""bwrap's own processes in the group beside the command's (its parent and the sandbox init)."""


@dataclass(frozen=True, slots=True)
class PidsGroup:
    """A pids cgroup holding one command's sandbox. RLIMIT_NPROC alone does not hold a command
    whose sandbox user maps to root outside (an executor running as root: the kernel exempts
    the init user from the limit), so a fork bomb would fill the host's process table; the
    group's `pids.max` holds it whoever runs the executor. None where no pids controller is
    writable (then prlimit's limit is all there is)."""

    path: Path

    @classmethod
    def make(cls, most: int) -> PidsGroup | None:
        for root in PIDS_ROOTS:
            if not (root / "pids.max").exists() and not (root / "cgroup.procs").exists():
                continue
            path = root / f"longrun-sandbox-{os.getpid()}-{time.monotonic_ns()}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(most))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            return cls(path)
        return None

    def preexec(self) -> None:
        """In the forked child before exec: join the group (so every process bwrap starts is
        counted), then die with the executor."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))
        _die_with_executor()

    def remove(self) -> None:
        """Remove the group once its processes are gone (the kill above ends them all)."""
        for _ in range(50):
            try:
                self.path.rmdir()
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
            else:
                return
        log.warning("sandbox_cgroup_left", path=str(self.path))


def _die_with_executor() -> None:
    """In the forked child before exec: SIGKILL bwrap when the executor dies (kill -9
    included), so a command never outlives the process that would record its end."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_group(pid: int) -> None:
    """SIGKILL bwrap's process group. bwrap's init in the sandbox dies with it
    (--die-with-parent), and the kernel then kills every process left in its pid namespace,
    daemonized or not: nothing a command started outlives it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def build_sandbox(
    kind: str, scratch: Path, limits: SandboxLimits, extra_paths: tuple[Path, ...]
) -> Sandbox:
    """The backend LONGRUN_SANDBOX names, probed; `none` turns commands off."""
    if kind == "none":
        return Unavailable("turned off (LONGRUN_SANDBOX=none)")
    sandbox = Bubblewrap(limits=limits, extra_paths=extra_paths).probe(scratch)
    if sandbox.reason is not None:
        log.warning("sandbox_unavailable", backend=sandbox.backend, reason=sandbox.reason)
        return Unavailable(sandbox.reason, backend=sandbox.backend)
    return sandbox
