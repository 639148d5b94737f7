"""`longrun up`'s supervisor without the services: ports, child environments, announcements,
a missing redis-server, dead children and stubborn ones; plus its argument handling."""

from __future__ import annotations

import importlib
import io
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import AliasChoices
from pydantic_settings import BaseSettings
from typer.testing import CliRunner

from services.cli.main import app
from services.cli.processes import Child, port_is_free, stop_all
from services.cli.up import (
    EXECUTOR,
    INGRESS,
    SERVICE_KINDS,
    ChildDied,
    ServiceKind,
    Stack,
    StartError,
    UpOptions,
    announce,
    run_up,
)
from shared.domain.signing import SigningKey
from shared.domain.webhooks import secret_id
from shared.settings import CommonSettings

REDIS = "redis://redis.test:6379/0"


def env_names(settings: type[BaseSettings]) -> dict[str, str]:
    """Field name -> the environment variable pydantic-settings reads it from."""
    names = {}
    for name, info in settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names[name] = next(str(c) for c in alias.choices if str(c).isupper())
        else:
            names[name] = "LONGRUN_" + name.upper()
    return names


def settings_class(module: str) -> type[CommonSettings]:
    """The service's settings class (the CommonSettings subclass its app.py declares)."""
    app_module = importlib.import_module(module + ".app")
    found = [
        value
        for value in vars(app_module).values()
        if isinstance(value, type) and issubclass(value, CommonSettings)
    ]
    return max(found, key=lambda cls: len(cls.__mro__))


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


@pytest.mark.parametrize("kind", SERVICE_KINDS, ids=lambda k: k.service)
def test_ports_and_env_names_match_the_services_settings(kind: ServiceKind) -> None:
    settings = settings_class(kind.module)
    by_env = {env: name for name, env in env_names(settings).items()}
    assert kind.port_env in by_env, f"{settings.__name__} has no field read from {kind.port_env}"
    assert settings.model_fields[by_env[kind.port_env]].default == kind.default_port


def test_plan_runs_every_service_with_its_own_port() -> None:
    stack = Stack(UpOptions(http_port=18080, executors=3, provider="openai"), environ={})
    children = stack.plan(REDIS)
    assert [c.service for c in children] == [
        "ledger",
        "scheduler",
        "turn_executor",
        "turn_executor",
        "turn_executor",
        "ingress",
    ]
    assert len({c.port for c in children}) == len(children)
    assert children[-1].port == 18080
    for child in children:
        assert child.argv[1:] == [
            "-m",
            next(k.module for k in SERVICE_KINDS if k.service == child.service),
        ]
        assert child.env["REDIS_URL"] == REDIS
        assert child.env["LONGRUN_OPERATOR_TOKEN"] == stack.token
        assert child.env["LONGRUN_PROVIDER"] == "openai"
        assert child.env[INGRESS.port_env] == "18080"
    executors = [c for c in children if c.service == "turn_executor"]
    assert [c.env[EXECUTOR.port_env] for c in executors] == [str(c.port) for c in executors]


def test_configured_token_and_ports_are_kept() -> None:
    environ = {"LONGRUN_OPERATOR_TOKEN": "given", "LONGRUN_HTTP_PORT": "0"}
    stack = Stack(UpOptions(), environ=environ)
    assert (stack.token, stack.token_generated) == ("given", False)
    assert stack.http_port != 0
    generated = Stack(UpOptions(http_port=0), environ={})
    assert generated.token_generated
    assert len(generated.token) >= 32


def test_every_service_gets_one_signing_key_generated_or_given() -> None:
    generated = Stack(UpOptions(http_port=0), environ={})
    assert generated.signing_key_generated
    keys = {c.env["LONGRUN_SIGNING_KEY"] for c in generated.plan(REDIS)}
    assert keys == {generated.signing_key.private_base64()}
    given = SigningKey.generate()
    stack = Stack(UpOptions(http_port=0), environ={"LONGRUN_SIGNING_KEY": given.private_base64()})
    assert not stack.signing_key_generated
    assert stack.signing_key.key_id == given.key_id
    out = io.StringIO()
    announce(stack, out)
    assert "signing-key-id" not in out.getvalue()


def test_every_service_gets_one_webhook_secret_generated_or_given() -> None:
    generated = Stack(UpOptions(http_port=0), environ={})
    assert generated.webhook_secret_generated
    assert len(generated.webhook_secret) >= 32
    secrets = {c.env["LONGRUN_WEBHOOK_SECRET"] for c in generated.plan(REDIS)}
    assert secrets == {generated.webhook_secret}
    out = io.StringIO()
    announce(generated, out)
    printed = out.getvalue()
    assert f"longrun webhook-secret-id {secret_id(generated.webhook_secret)}" in printed
    assert generated.webhook_secret not in printed  # the id, never the secret
    stack = Stack(UpOptions(http_port=0), environ={"LONGRUN_WEBHOOK_SECRET": "given-secret"})
    assert not stack.webhook_secret_generated
    assert {c.env["LONGRUN_WEBHOOK_SECRET"] for c in stack.plan(REDIS)} == {"given-secret"}
    out = io.StringIO()
    announce(stack, out)
    assert "webhook-secret-id" not in out.getvalue()


def test_a_malformed_signing_key_is_a_clear_start_error() -> None:
    with pytest.raises(StartError, match="LONGRUN_SIGNING_KEY: the signing key is not base64"):
        Stack(UpOptions(http_port=0), environ={"LONGRUN_SIGNING_KEY": "not a key!"})


def test_a_taken_default_port_moves_to_a_free_one(busy_port: int) -> None:
    environ = {"LONGRUN_LEDGER_PORT": str(busy_port)}
    children = Stack(UpOptions(http_port=0), environ=environ).plan(REDIS)
    ledger = children[0]
    assert ledger.service == "ledger"
    assert ledger.port != busy_port
    assert ledger.env["LONGRUN_LEDGER_PORT"] == str(ledger.port)


def test_a_taken_http_port_is_a_clear_error(busy_port: int) -> None:
    stack = Stack(UpOptions(http_port=busy_port, redis_url=REDIS), environ={})
    with pytest.raises(StartError, match=f"port {busy_port} is already in use: pass --http-port"):
        stack.start()
    assert stack.services == []


def test_announce_prints_token_key_id_then_one_metrics_line_per_process() -> None:
    stack = Stack(UpOptions(http_port=18080, executors=2), environ={})
    stack.services = stack.plan(REDIS)
    out = io.StringIO()
    announce(stack, out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"longrun operator-token {stack.token}"
    assert lines[1] == f"longrun signing-key-id {stack.signing_key.key_id}"
    assert lines[2] == f"longrun webhook-secret-id {secret_id(stack.webhook_secret)}"
    assert len(lines) == 3 + 5
    for line, child in zip(lines[3:], stack.services, strict=True):
        assert line == f"longrun metrics {child.service} http://127.0.0.1:{child.port}/metrics"


def test_missing_redis_server_names_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("services.cli.redis_server.shutil.which", lambda name: None)
    out, err = io.StringIO(), io.StringIO()
    options = UpOptions(http_port=0, use_env_redis=False)
    assert run_up(options, out, err) == 1
    assert "apt-get install redis-server" in err.getvalue()
    assert "--redis-url" in err.getvalue()


def python_child(code: str) -> Child:
    return Child("fake", [sys.executable, "-c", code], {}, 0)


def test_a_dead_child_is_reported_with_its_exit_code() -> None:
    stack = Stack(UpOptions(), environ={})
    child = python_child("raise SystemExit(3)")
    child.start()
    assert child.proc is not None
    child.proc.wait(timeout=10)
    stack.services = [child]
    with pytest.raises(ChildDied, match=r"fake .* exited with code 3"):
        stack.check_alive()


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    stubborn = python_child(
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('armed', flush=True); time.sleep(60)"
    )
    stubborn.log_path = tmp_path / "stubborn.log"
    stubborn.start()
    polite = python_child("import time; time.sleep(60)")
    polite.start()
    deadline = time.monotonic() + 10
    while "armed" not in stubborn.log_tail() and time.monotonic() < deadline:
        time.sleep(0.02)
    stop_all([stubborn, polite], grace=0.5)
    assert polite.exit_code() == -signal.SIGTERM
    assert stubborn.exit_code() == -signal.SIGKILL


def test_port_probe() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        assert not port_is_free(held.getsockname()[1])


@pytest.mark.parametrize(
    "args",
    [
        ["up", "--executors", "0"],
        ["up", "--provider", "gpt"],
        ["up", "--http-port", "70000"],
        ["demo", "--http-port", "-1"],
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "Invalid value" in result.output


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for verb in ("up", "demo", "agent", "send", "work", "callback", "board", "history"):
        assert verb in result.stdout


def test_a_given_redis_that_does_not_answer_is_a_clear_error() -> None:
    stack = Stack(UpOptions(redis_url="redis://127.0.0.1:1/0", http_port=0), environ={})
    with pytest.raises(StartError, match=r"Redis at redis://127\.0\.0\.1:1/0 does not answer"):
        stack.start()
    assert stack.services == []
