"""Child processes of `longrun up`: free ports, spawning, signal flags, readiness, stopping."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import httpx

_PR_SET_PDEATHSIG = 1


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    # A `longrun up` killed with SIGKILL cannot stop its children; Linux can, on its behalf.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    """One supervised process: a service (with its HTTP port) or the private Redis."""

    service: str
    argv: Sequence[str]
    env: Mapping[str, str]
    port: int
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    def start(self) -> None:
        """Spawn the process. Call it while no other thread runs: the pre-exec hook is not
        thread-safe (the demo starts its stack before showing a spinner)."""
        log = self.log_path.open("ab") if self.log_path else None
        # Without a log file the child's output goes to our stderr, never to our stdout lines.
        out: int | IO[bytes] = log if log is not None else 2
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - argv is our interpreter or redis-server
                list(self.argv),
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches `longrun up`, which stops us in order
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509 - see the docstring
            )
        finally:
            if log is not None:
                log.close()

    def exit_code(self) -> int | None:
        """None while running (or never started)."""
        return None if self.proc is None else self.proc.poll()

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def stop_all(children: Sequence[Child], grace: float = 10.0) -> None:
    """SIGTERM every child, wait up to `grace` seconds in total, then SIGKILL the rest."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        if child.proc is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        child.kill()


def is_ready(client: httpx.Client, child: Child) -> bool:
    try:
        return client.get(f"{child.base_url}/readyz").status_code == 200
    except httpx.HTTPError:
        return False


class StopFlag:
    """Set by SIGINT or SIGTERM while installed; polled by the supervisor's loops."""

    def __init__(self) -> None:
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signum

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopFlag]:
        previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def sleep_unless_stopped(stop: StopFlag, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stop.requested and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
