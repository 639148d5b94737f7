"""End-to-end fixtures: `longrun up` as a real subprocess (every service its own process, a
private Redis), read through the lines it prints; every test here is marked `e2e`."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def longrun_command() -> list[str]:
    """The installed `longrun` script next to this interpreter, as `pip install` puts it."""
    script = Path(sys.executable).parent / "longrun"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from services.cli.main import main; main()"]


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without Redis or longrun settings, so `up` starts its own
    Redis and picks its defaults; a private agent home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_") and k != "REDIS_URL"}
    env.update(LONGRUN_AGENT_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1", **extra)
    return env


@dataclass
class UpProcess:
    """A running `longrun up`, its stdout lines collected by a reader thread."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def start_reader(self) -> None:
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.reader is not None:
            self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def wait_for(self, prefix: str, within: float = 90.0) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line {prefix!r} from longrun up; saw {self.seen}")

    def value(self, prefix: str) -> str:
        return next(line for line in self.seen if line.startswith(prefix)).split()[-1]

    def metrics(self) -> list[tuple[str, str]]:
        return [
            (line.split()[2], line.split()[3])
            for line in self.seen
            if line.startswith("longrun metrics ")
        ]

    def stop(self, sig: int = signal.SIGTERM, within: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=within)


@pytest.fixture
def longrun_up(tmp_path: Path) -> Iterator[UpProcess]:
    """`longrun up --http-port 0` with the scripted provider; stopped (or killed) afterwards."""
    log = (tmp_path / "up.stderr").open("w")
    proc = subprocess.Popen(  # noqa: S603 - our own entry point
        [*longrun_command(), "up", "--http-port", "0", "--provider", "scripted"],
        env=clean_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    up = UpProcess(proc)
    up.start_reader()
    yield up
    up.close()
    log.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
