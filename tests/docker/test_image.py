"""The image as a user meets it: small, no build tools, a non-root user; `longrun demo` passes in
a container against a Redis container; a service without the operator token refuses to start
and says why; a service given a Redis that does not answer stays up, logs why and is not ready."""

from __future__ import annotations

import json
import secrets

import pytest

from tests.docker.tools import RedisContainer, docker, free_port, run, wait_until

READY_PROBE = "import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/readyz', timeout=2)"


def logs(name: str) -> str:
    done = run(["docker", "logs", name], check=False)
    return done.stdout + done.stderr


def test_image_runs_as_a_non_root_user_without_build_tools(image: str) -> None:
    config = json.loads(docker("image", "inspect", image))[0]["Config"]
    assert config["User"] == "longrun"
    assert config["Entrypoint"] == ["longrun-entrypoint"]
    assert docker("run", "--rm", image, "id", "-u") == "10001"
    tools = "for t in gcc cc make pip pip3; do command -v $t || true; done"
    assert docker("run", "--rm", image, "sh", "-c", tools) == ""
    assert docker("run", "--rm", image, "python", "-c", "import sys; print(sys.prefix)") == (
        "/opt/longrun"
    )
    size = int(docker("image", "inspect", "-f", "{{.Size}}", image))
    print(f"image {image}: {size / 1e6:.0f} MB")


def test_longrun_demo_passes_in_a_container(image: str, redis_container: RedisContainer) -> None:
    out = docker("run", "--rm", "--network", "host", "-e", "COLUMNS=100", image,
                 "longrun", "demo", "--redis-url", redis_container.url, timeout=600)  # fmt: skip
    print(out)
    assert "demo passed" in out


@pytest.mark.parametrize("service", ["services.ledger", "services.ingress"])
@pytest.mark.parametrize("token", [None, "  "])
def test_a_service_refuses_to_start_without_the_operator_token(
    image: str, service: str, token: str | None
) -> None:
    env = [] if token is None else ["-e", f"LONGRUN_OPERATOR_TOKEN={token}"]
    done = run(["docker", "run", "--rm", *env, image, service], check=False)
    assert done.returncode == 78, done
    assert done.stdout == ""
    assert f"LONGRUN_OPERATOR_TOKEN is not set: {service} refuses to start" in done.stderr


def test_a_wrong_redis_url_is_a_readiness_failure_with_a_log_line(image: str) -> None:
    port, nothing_there = free_port(), free_port()
    name = f"lr-test-ledger-{secrets.token_hex(3)}"
    docker("run", "-d", "--network", "host", "--name", name,
           "-e", f"LONGRUN_OPERATOR_TOKEN={secrets.token_hex(8)}",
           "-e", f"REDIS_URL=redis://127.0.0.1:{nothing_there}/0",
           "-e", f"LONGRUN_LEDGER_PORT={port}", image, "services.ledger")  # fmt: skip
    try:
        wait_until("the ledger logs that Redis does not answer",
                   lambda: "waiting_for_redis" in logs(name), within=60.0)  # fmt: skip
        probe = run(["docker", "exec", name, "python", "-c", READY_PROBE.format(port=port)],
                    check=False)  # fmt: skip
        assert probe.returncode != 0, probe
        state = json.loads(docker("inspect", name))[0]["State"]
        assert state["Running"] is True, state
        assert state["Restarting"] is False, state
        assert f"127.0.0.1:{nothing_there}" in logs(name)
    finally:
        docker("rm", "-f", name, check=False)
