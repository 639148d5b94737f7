"""A private, throw-away `redis-server` for `longrun up` and `longrun demo` when none is given."""

from __future__ import annotations

import re
import shutil
import socket
import time
from collections.abc import Collection
from pathlib import Path

from services.cli.processes import Child, free_port

INSTALL_HINT = (
    "redis-server was not found on PATH. Install it (Debian/Ubuntu: "
    "`sudo apt-get install redis-server`; macOS: `brew install redis`), "
    "or point longrun at a running Redis with --redis-url or REDIS_URL."
)


class RedisNotInstalled(Exception):
    """No `redis-server` binary to start a private Redis with."""


def private_redis(workdir: Path, avoid: Collection[int] = ()) -> Child:
    """A Redis on a free loopback port, data in `workdir`, no persistence: it lives for one run.
    `avoid`: ports chosen for other children but not bound yet (the ingress's HTTP port)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisNotInstalled(INSTALL_HINT)
    port = free_port()
    while port in avoid:
        port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "no",
        # The ledger must never lose keys to eviction, even in a throw-away run.
        "--maxmemory-policy",
        "noeviction",
        "--daemonize",
        "no",
        "--logfile",
        "",
    ]
    return Child("redis", argv, {}, port, log_path=workdir / "redis.log")


def redis_url(child: Child) -> str:
    return f"redis://127.0.0.1:{child.port}/0"


def redis_answers(port: int) -> bool:
    """True once the server answers PING on `port` (plain RESP, no client library needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


_PROCESS_ID = re.compile(rb"\bprocess_id:(\d+)")


def server_pid(port: int) -> int | None:
    """The process id the Redis answering on `port` reports (INFO server), None if none answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"INFO server\r\n")
            reply = b""
            while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return None
    found = _PROCESS_ID.search(reply)
    return int(found.group(1)) if found else None


def wait_for_redis(child: Child, within: float = 10.0) -> bool:
    """True once `child` itself answers. A free port is only free when it was probed: another
    process can bind it before redis-server does, which then exits, and a server answering on
    that port then is someone else's (whose data and lifetime are not this run's)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if child.exit_code() is not None or child.proc is None:
            return False
        if server_pid(child.port) == child.proc.pid:
            return True
        time.sleep(0.05)
    return False
