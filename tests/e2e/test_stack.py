"""The whole stack as separate processes under `longrun up`: a WorkItem from an operator message
through todos, an external wait answered by a callback, completion and a verified history; then
a clean stop on SIGTERM."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import pytest

from services.cli.demo_scenario import DEMO_REQUEST
from tests.e2e.conftest import UpProcess, longrun_command

T = TypeVar("T")
AGENT = "e2e-agent"


def poll(probe: Callable[[], T | None], what: str, within: float = 90.0) -> T:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def external_wait(view: dict[str, Any]) -> dict[str, Any] | None:
    return next((w for w in view.get("active_waits") or [] if w["wake"] == "external"), None)


def cli(up: UpProcess, token: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LONGRUN_URL": url, "LONGRUN_OPERATOR_TOKEN": token, "COLUMNS": "200"}
    return subprocess.run(  # noqa: S603 - our own entry point
        [*longrun_command(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_scenario(http: httpx.Client) -> dict[str, Any]:
    created = http.put(f"/v1/agents/{AGENT}")
    assert created.status_code == 201, created.text
    assert created.json()["agent_token"]
    callback_url = created.json()["callback_url"]
    sent = http.post(f"/v1/agents/{AGENT}/messages", json={"text": DEMO_REQUEST})
    assert sent.status_code == 202, sent.text

    def waiting() -> dict[str, Any] | None:
        params = {"include_todo_list": "true"}
        items = http.get(f"/v1/agents/{AGENT}/work-items", params=params).json()["work_items"]
        return next((item for item in items if external_wait(item)), None)

    item = poll(waiting, "the WorkItem to wait for its callback")
    assert item["scheduling_state"] == "waiting_external"
    assert item["blocked_by"]
    assert len(item["todo_list"]) >= 3
    answered = httpx.post(callback_url, json={"verdict": "approved"}, timeout=10)
    assert answered.status_code == 202, answered.text
    assert answered.json()["disposition"] == "triggered"

    def completed() -> dict[str, Any] | None:
        view = http.get(f"/v1/agents/{AGENT}/work-items/{item['id']}").json()["work_item"]
        return view if view["state"] == "completed" else None

    return poll(completed, "the WorkItem to complete")


@pytest.mark.timeout(300)
def test_up_runs_a_work_item_to_completion_and_stops_cleanly(longrun_up: UpProcess) -> None:
    ready = longrun_up.wait_for("longrun ready ")
    url, token = ready.split()[-1], longrun_up.value("longrun operator-token ")
    console = longrun_up.value("longrun console ")
    assert console == f"{url}/ui"
    assert httpx.get(console).status_code == 303  # to the console's sign-in page
    services = sorted({service for service, _ in longrun_up.metrics()})
    assert services == ["ingress", "ledger", "scheduler", "turn_executor"]
    for _, metrics_url in longrun_up.metrics():
        assert "longrun_" in httpx.get(metrics_url, timeout=5).text
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
        done = run_scenario(http)
        assert done["result_summary"]
        briefs = http.get(f"/v1/agents/{AGENT}/briefs", params={"work_item_id": done["id"]})
        kinds = [b["kind"] for b in briefs.json()["briefs"]]
        assert "result" in kinds
        verify = http.get(f"/v1/agents/{AGENT}/history/verify").json()
        assert verify["ok"] is True
        assert verify["first_bad_index"] is None

    board = cli(longrun_up, token, url, "board", AGENT, "--format", "org")
    assert board.returncode == 0, board.stderr
    assert f"** DONE {done['objective']}" in board.stdout
    verified = cli(longrun_up, token, url, "history", "verify", AGENT)
    assert verified.returncode == 0, verified.stderr

    assert longrun_up.stop() == 0
    for _, metrics_url in longrun_up.metrics():
        with pytest.raises(httpx.TransportError):
            httpx.get(metrics_url, timeout=2)


@pytest.mark.timeout(120)
def test_sigint_before_work_also_exits_zero(longrun_up: UpProcess) -> None:
    longrun_up.wait_for("longrun ready ")
    assert longrun_up.stop(sig=2) == 0
