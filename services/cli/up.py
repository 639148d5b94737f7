"""The `longrun up` supervisor: runs ingress, ledger, scheduler and N turn executors as separate
processes (and a private Redis when none is given), reports readiness, and stops them cleanly."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import httpx
import redis

from services.cli.processes import (
    Child,
    StopFlag,
    free_port,
    is_ready,
    port_is_free,
    sleep_unless_stopped,
    stop_all,
)
from services.cli.redis_server import (
    RedisNotInstalled,
    private_redis,
    redis_url,
    wait_for_redis,
)
from shared.domain.signing import SigningKey, SigningKeyError
from shared.domain.webhooks import secret_id


@dataclass(frozen=True, slots=True)
class ServiceKind:
    """How to run one service: its module and the environment variable naming its port."""

    service: str
    module: str
    port_env: str
    default_port: int


# Ports and env names of each service's settings class (checked against them by the tests).
INGRESS = ServiceKind("ingress", "services.ingress", "LONGRUN_HTTP_PORT", 8080)
LEDGER = ServiceKind("ledger", "services.ledger", "LONGRUN_LEDGER_PORT", 9101)
SCHEDULER = ServiceKind("scheduler", "services.scheduler", "LONGRUN_SCHEDULER_PORT", 9102)
EXECUTOR = ServiceKind("turn_executor", "services.turn_executor", "LONGRUN_EXECUTOR_PORT", 9103)
SERVICE_KINDS = (LEDGER, SCHEDULER, EXECUTOR, INGRESS)
REDIS_START_ATTEMPTS = 3
"""Ports a private Redis is tried on before `up` gives up (each lost only to a bind race)."""


class StartError(Exception):
    """The stack could not start; the message says what to do."""


class ChildDied(Exception):
    """A supervised process exited while it should be running."""

    def __init__(self, child: Child, code: int) -> None:
        super().__init__(
            f"{child.service} (pid {child.proc.pid if child.proc else '?'}) exited with code {code}"
        )
        self.child = child
        self.code = code


@dataclass(frozen=True, slots=True)
class UpOptions:
    redis_url: str | None = None
    http_port: int | None = None
    """None: LONGRUN_HTTP_PORT or 8080; 0: a free port."""
    executors: int = 1
    provider: str | None = None
    log_dir: Path | None = None
    """None: children write to our stderr; otherwise one log file per process."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    use_env_redis: bool = True
    """False: REDIS_URL is ignored and a private Redis starts unless `redis_url` is given."""
    ready_within: float = 60.0


class Stack:
    """The processes of one `longrun up` run; `stop()` is safe to call at any point."""

    def __init__(self, options: UpOptions, environ: Mapping[str, str] | None = None) -> None:
        self.options = options
        self.environ = dict(os.environ if environ is None else environ)
        self.token_generated = not self.environ.get("LONGRUN_OPERATOR_TOKEN")
        self.token = self.environ.get("LONGRUN_OPERATOR_TOKEN") or secrets.token_urlsafe(24)
        given_secret = self.environ.get("LONGRUN_WEBHOOK_SECRET", "").strip()
        self.webhook_secret_generated = not given_secret
        """No webhook secret configured: one for this run, so webhook checks can be signed
        (its id printed; set LONGRUN_WEBHOOK_SECRET for a receiver that verifies)."""
        self.webhook_secret = given_secret or secrets.token_hex(32)
        given_key = self.environ.get("LONGRUN_SIGNING_KEY", "").strip()
        self.signing_key_generated = not given_key
        """No key configured: one ephemeral key for every ledger of this run, its id printed."""
        try:
            self.signing_key = (
                SigningKey.from_base64(given_key) if given_key else SigningKey.generate()
            )
        except SigningKeyError as exc:
            raise StartError(
                f"LONGRUN_SIGNING_KEY: {exc} (make one with `longrun keygen`)"
            ) from None
        self.redis: Child | None = None
        self.services: list[Child] = []
        self._workdir: Path | None = None
        self.http_port = self._http_port()

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def _http_port(self) -> int:
        wanted = self.options.http_port
        if wanted is None:
            wanted = self._configured_port(INGRESS)
        return wanted or free_port()

    def _configured_port(self, kind: ServiceKind) -> int:
        raw = self.environ.get(kind.port_env) or str(kind.default_port)
        if not raw.isdigit() or int(raw) > 65535:
            raise StartError(f"{kind.port_env}={raw!r} is not a port number (0..65535)")
        return int(raw)

    def start(self) -> None:
        if not port_is_free(self.http_port):
            raise StartError(
                f"port {self.http_port} is already in use: pass --http-port with a free port "
                "(0 picks one), or stop what is listening there"
            )
        from_env = self.environ.get("REDIS_URL") if self.options.use_env_redis else None
        given = self.options.redis_url or from_env
        if given:
            check_redis(given)
        url = given or self._start_redis()
        self.services = self.plan(url)
        for child in self.services:
            child.start()

    def _start_redis(self) -> str:
        """A private Redis on a free port other than the ingress's (chosen, not bound yet). A
        port another process binds first makes redis-server exit: it is tried on a fresh one."""
        self._workdir = Path(tempfile.mkdtemp(prefix="longrun-"))
        for _ in range(REDIS_START_ATTEMPTS):
            try:
                self.redis = private_redis(self._workdir / "redis", avoid={self.http_port})
            except RedisNotInstalled as exc:
                raise StartError(str(exc)) from exc
            self.redis.start()
            if wait_for_redis(self.redis):
                return redis_url(self.redis)
            if self.redis.exit_code() is None:
                break  # running but silent: a fresh port would not help
        tail = self.redis.log_tail() if self.redis else ""
        raise StartError(f"the private redis-server did not start:\n{tail}")

    def plan(self, redis_at: str) -> list[Child]:
        """One child per service process, each with its own port, all on Redis `redis_at`."""
        env = {
            **self.environ,
            **self.options.extra_env,
            "REDIS_URL": redis_at,
            "LONGRUN_OPERATOR_TOKEN": self.token,
            "LONGRUN_SIGNING_KEY": self.signing_key.private_base64(),
            "LONGRUN_WEBHOOK_SECRET": self.webhook_secret,
            # Every service builds callback URLs from the ingress port, not only ingress.
            INGRESS.port_env: str(self.http_port),
            "PYTHONUNBUFFERED": "1",
        }
        env.setdefault("LONGRUN_LOG_LEVEL", "WARNING")
        if self.options.provider:
            env["LONGRUN_PROVIDER"] = self.options.provider
        taken = {self.http_port}
        kinds = [LEDGER, SCHEDULER, *[EXECUTOR] * self.options.executors, INGRESS]
        children = []
        for index, kind in enumerate(kinds):
            port = self.http_port if kind is INGRESS else self._port_for(kind, taken)
            taken.add(port)
            log = self._log_path(f"{kind.service}-{index}")
            argv = [sys.executable, "-m", kind.module]
            children.append(Child(kind.service, argv, {**env, kind.port_env: str(port)}, port, log))
        return children

    def _port_for(self, kind: ServiceKind, taken: set[int]) -> int:
        """The configured or default port when it is free, else any free port."""
        preferred = self._configured_port(kind)
        if preferred and preferred not in taken and port_is_free(preferred):
            return preferred
        port = free_port()
        while port in taken:
            port = free_port()
        return port

    def _log_path(self, name: str) -> Path | None:
        if self.options.log_dir is None:
            return None
        self.options.log_dir.mkdir(parents=True, exist_ok=True)
        return self.options.log_dir / f"{name}.log"

    def check_alive(self) -> None:
        """Raise ChildDied for the first supervised process that has exited."""
        for child in [*self._redis_list(), *self.services]:
            code = child.exit_code()
            if code is not None:
                raise ChildDied(child, code)

    def _redis_list(self) -> list[Child]:
        return [self.redis] if self.redis is not None else []

    def wait_ready(
        self, stop: StopFlag, progress: Callable[[list[str]], None] | None = None
    ) -> bool:
        """Poll every service's /readyz until all answer 200; False if a stop was requested."""
        deadline = time.monotonic() + self.options.ready_within
        waiting = list(self.services)
        with httpx.Client(timeout=1.0) as http:
            while waiting and not stop.requested:
                self.check_alive()
                waiting = [child for child in waiting if not is_ready(http, child)]
                if progress is not None:
                    progress(sorted({child.service for child in waiting}))
                if waiting and time.monotonic() > deadline:
                    names = ", ".join(sorted({c.service for c in waiting}))
                    raise StartError(f"not ready after {self.options.ready_within:.0f}s: {names}")
                if waiting:
                    sleep_unless_stopped(stop, 0.2)
        return not stop.requested

    def stop(self) -> None:
        # Ingress first so no new work arrives, Redis last so every service can finish its acks.
        stop_all(list(reversed(self.services)))
        stop_all(self._redis_list(), grace=5.0)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def check_redis(url: str) -> None:
    """Fail fast, with the URL, when a given Redis does not answer."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, ValueError) as exc:
        raise StartError(
            f"Redis at {url} does not answer ({exc}); start one, fix --redis-url/REDIS_URL, "
            "or leave both unset to run a private redis-server"
        ) from exc


def run_up(options: UpOptions, out: TextIO, err: TextIO) -> int:
    """`longrun up`: 0 after a clean stop on SIGINT/SIGTERM, 1 if the stack failed."""
    stop = StopFlag()
    try:
        stack = Stack(options)
    except StartError as exc:
        print(f"longrun: {exc}", file=err, flush=True)
        return 1
    with stop.installed():
        try:
            stack.start()
            announce(stack, out)
            if not stack.wait_ready(stop):
                return 0
            print(f"longrun console {stack.http_url}/ui", file=out, flush=True)
            print(f"longrun ready {stack.http_url}", file=out, flush=True)
            while not stop.requested:
                stack.check_alive()
                sleep_unless_stopped(stop, 0.2)
            return 0
        except ChildDied as died:
            print(f"longrun: {died}; stopping the stack", file=err, flush=True)
            return 1
        except StartError as exc:
            print(f"longrun: {exc}", file=err, flush=True)
            return 1
        finally:
            stack.stop()


def announce(stack: Stack, out: TextIO) -> None:
    """The machine-readable lines: the generated token and every process's metrics URL."""
    if stack.token_generated:
        print(f"longrun operator-token {stack.token}", file=out, flush=True)
    if stack.signing_key_generated:
        print(f"longrun signing-key-id {stack.signing_key.key_id}", file=out, flush=True)
    if stack.webhook_secret_generated:
        print(f"longrun webhook-secret-id {secret_id(stack.webhook_secret)}", file=out, flush=True)
    for child in stack.services:
        print(f"longrun metrics {child.service} {child.metrics_url}", file=out, flush=True)
