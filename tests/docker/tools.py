"""Docker and docker-compose as the tests drive them: the image build (with this machine's pip
index, if it has its own), containers on the host network, the compose stack with the
host-network override, and waiting for a probe."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from services.cli.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "longrun:dev"
BASE_IMAGE = os.environ.get("LONGRUN_BASE_IMAGE", "python:3.11-slim")
REDIS_IMAGE = os.environ.get("LONGRUN_REDIS_IMAGE", "redis:7.2")
COMPOSE_FILES = ("docker-compose.yml", "deploy/compose.hostnet.yml")
STACK = ("redis", "ledger", "scheduler", "turn-executor", "ingress")


class DockerError(Exception):
    """A docker command failed; its output says why."""


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 900.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(  # noqa: S603 - argv built by the tests
        list(argv),
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
    if check and done.returncode != 0:
        raise DockerError(f"{' '.join(argv)} -> {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def docker(*args: str, check: bool = True, timeout: float = 900.0) -> str:
    return run(["docker", *args], check=check, timeout=timeout).stdout.strip()


def pip_index_url() -> str | None:
    """The index pip uses here, when it is not PyPI's default: the build's pip must use it too.
    File indexes (a local wheel directory) are not reachable from inside a build."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        listed = run(["python", "-m", "pip", "config", "list"], check=False).stdout
        for line in listed.splitlines():
            key, _, value = line.partition("=")
            if key.endswith(".index-url"):
                url = value.strip().strip("'\"")
    return url if url and url.startswith(("http://", "https://")) else None


def build_image() -> None:
    args = ["build", "--network", "host", "-f", "deploy/Dockerfile", "-t", IMAGE]
    args += ["--build-arg", f"BASE_IMAGE={BASE_IMAGE}"]
    if index := pip_index_url():
        args += ["--build-arg", f"PIP_INDEX_URL={index}"]
    docker(*args, ".")


def wait_until(what: str, ok: Callable[[], bool], within: float = 120.0) -> None:
    """Poll `ok()` until it holds; fail saying `what` otherwise."""
    deadline = time.monotonic() + within
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:.0f} s: {what}")
        time.sleep(0.5)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class RedisContainer:
    """A throwaway Redis on the host's loopback, in a container of REDIS_IMAGE."""

    port: int = field(default_factory=free_port)
    name: str = field(default_factory=lambda: f"lr-test-redis-{secrets.token_hex(3)}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        docker("run", "-d", "--rm", "--network", "host", "--name", self.name, REDIS_IMAGE, *server)
        wait_until(f"{self.name} answers PING", self.pings, within=60.0)

    def pings(self) -> bool:
        got = docker("exec", self.name, "redis-cli", "-p", str(self.port), "ping", check=False)
        return got == "PONG"

    def stop(self) -> None:
        docker("rm", "-f", self.name, check=False)


@dataclass
class ComposeStack:
    """docker-compose.yml with the host-network override, on free loopback ports."""

    token: str = field(default_factory=lambda: secrets.token_hex(16))
    project: str = field(default_factory=lambda: f"lrtest{secrets.token_hex(3)}")
    ports: dict[str, int] = field(
        default_factory=lambda: {
            name: free_port() for name in ("REDIS", "LEDGER", "SCHEDULER", "EXECUTOR", "INGRESS")
        }
    )

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
        env.update({f"LR_{name}_PORT": str(port) for name, port in self.ports.items()})
        env["LONGRUN_OPERATOR_TOKEN"] = self.token
        env["LONGRUN_WEBHOOK_SECRET"] = "compose-test-webhook-secret"
        env["LONGRUN_REDIS_IMAGE"] = REDIS_IMAGE
        env["LONGRUN_PUBLIC_URL"] = self.ingress_url
        return env

    @property
    def ingress_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['INGRESS']}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['REDIS']}/0"

    def compose(self, *args: str, check: bool = True) -> str:
        files = [arg for f in COMPOSE_FILES for arg in ("-f", f)]
        argv = ["docker-compose", "--ansi", "never", "-p", self.project, *files, *args]
        return run(argv, env=self.env, check=check).stdout.strip()

    def up(self) -> None:
        self.compose("up", "-d", "--no-build", *STACK)
        self.wait_ready()

    def wait_ready(self) -> None:
        for name in ("LEDGER", "SCHEDULER", "EXECUTOR", "INGRESS"):
            url = f"http://127.0.0.1:{self.ports[name]}/readyz"
            wait_until(f"{name.lower()} ready at {url}", lambda url=url: answers(url))

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service)

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "40", check=False)

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", check=False)
