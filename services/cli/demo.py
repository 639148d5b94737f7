"""`longrun demo`: brings up the stack, runs a scripted agent through plan, todos, a wait answered
by a callback and a completion report over the HTTP API, shows the board, verifies the history."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from services.cli.client import ApiError, LongrunClient, Unreachable
from services.cli.demo_report import Outcome, show_outcome
from services.cli.demo_scenario import Scenario, ScenarioFailed
from services.cli.processes import StopFlag
from services.cli.up import ChildDied, Stack, StartError, UpOptions


@dataclass(frozen=True, slots=True)
class DemoOptions:
    redis_url: str | None = None
    http_port: int | None = None
    """None or 0: a free port."""
    step_timeout: float = 120.0


def demo_environment(workdir: Path) -> dict[str, str]:
    """The demo's own agent home and verbose service logs, unless the operator set them."""
    env = {"LONGRUN_PROVIDER": "scripted"}
    if not os.environ.get("LONGRUN_AGENT_HOME"):
        env["LONGRUN_AGENT_HOME"] = str(workdir / "home")
    if not os.environ.get("LONGRUN_LOG_LEVEL"):
        env["LONGRUN_LOG_LEVEL"] = "INFO"
    return env


def run_demo(options: DemoOptions, console: Console) -> int:
    """0 only when the scenario really completed; otherwise 1 with what was missing."""
    stop = StopFlag()
    with stop.installed(), tempfile.TemporaryDirectory(prefix="longrun-demo-") as tmp:
        workdir = Path(tmp)
        up = UpOptions(
            redis_url=options.redis_url,
            http_port=options.http_port or 0,
            executors=1,
            provider="scripted",
            log_dir=workdir / "logs",
            extra_env=demo_environment(workdir),
            use_env_redis=False,
        )
        stack = Stack(up)
        try:
            return _run(stack, options, console, stop)
        finally:
            with console.status("stopping the stack"):
                stack.stop()


def _run(stack: Stack, options: DemoOptions, console: Console, stop: StopFlag) -> int:
    try:
        outcome = _scenario(stack, options, console, stop)
    except (StartError, ChildDied, ScenarioFailed, ApiError, Unreachable) as exc:
        console.print(f"[bold red]demo failed:[/] {escape(str(exc))}", highlight=False)
        _show_logs(stack, console)
        return 1
    show_outcome(outcome, console)
    if outcome.missing:
        console.print("[bold red]demo failed:[/] missing " + escape("; ".join(outcome.missing)))
        _show_logs(stack, console)
        return 1
    console.print("[bold green]demo passed[/]: the scenario completed end to end")
    return 0


def _scenario(stack: Stack, options: DemoOptions, console: Console, stop: StopFlag) -> Outcome:
    console.print("starting the stack: a private Redis unless given, and four services")
    # Started before any spinner: children are forked while no other thread runs (processes.py).
    stack.start()
    console.print(f"ingress at {stack.http_url}", highlight=False)
    with console.status("waiting for the services to report ready") as status:

        def progress(waiting: list[str]) -> None:
            status.update("waiting for services to report ready: " + ", ".join(waiting))

        if not stack.wait_ready(stop, progress):
            raise ScenarioFailed("interrupted before the stack was ready")
    console.print(f"[green]ready[/]: {len(stack.services)} service processes", highlight=False)
    with LongrunClient(stack.http_url, stack.token) as client:
        scenario = Scenario(
            client, console, stop, stack.check_alive, step_timeout=options.step_timeout
        )
        return scenario.run()


def _show_logs(stack: Stack, console: Console) -> None:
    for child in [*stack.services, *([stack.redis] if stack.redis else [])]:
        tail = child.log_tail(15)
        if tail:
            console.rule(f"last log lines of {child.service} (port {child.port})")
            console.print(tail, markup=False, highlight=False, emoji=False, soft_wrap=True)
