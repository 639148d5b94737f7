"""The demo's scenario against a fake HTTP API, and the checks that decide its exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from rich.console import Console

from services.cli.client import LongrunClient
from services.cli.demo_report import Outcome, show_outcome, timeline
from services.cli.demo_scenario import DEMO_REQUEST, Scenario, ScenarioFailed
from services.cli.processes import StopFlag
from shared.domain.readouts import work_item_view
from tests.builders import at, make_agent, make_todo, make_wait, make_work_item, work_item_id

WI = work_item_id(1)
CALLBACK = "http://longrun.test/v1/callbacks/scope-token"
REPORT = "Completed the release note."


def wire(**fields: Any) -> dict[str, Any]:
    todos = [make_todo(f"Step {n}", "completed") for n in range(3)]
    item = make_work_item(todo_list=todos, **fields)
    waits = (make_wait(),) if fields.get("blocked_by") else ()
    return work_item_view(item, waits, None, include_todo_list=True).to_json()


RUNNING = wire()
WAITING = wire(blocked_by="Waiting for the approval callback")
DONE = wire(state="completed", result_summary=REPORT, updated_at=at(minutes=3))


@dataclass
class FakeStack:
    """Plays the stack's side: the item runs, waits, and completes once the callback came."""

    disposition: str = "triggered"
    brief_text: str = REPORT
    verify_ok: bool = True
    lists: int = 0
    called_back: bool = False
    posted: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.startswith("/v1/callbacks/"):
            self.called_back = True
            return httpx.Response(202, json={"delivery_id": "d", "disposition": self.disposition})
        if request.method in ("PUT", "POST"):
            self.posted.append(json.loads(request.content or b"{}"))
            created = {"agent_id": "demo", "agent_token": "t", "callback_url": CALLBACK}
            return httpx.Response(201, json=created | {"message_id": "msg_1"})
        return httpx.Response(200, json=self.answer(path))

    def answer(self, path: str) -> dict[str, Any]:
        if path.endswith("/work-items"):
            self.lists += 1
            item = DONE if self.called_back else (RUNNING if self.lists == 1 else WAITING)
            return {"work_items": [item]}
        if f"/work-items/{WI}" in path:
            return {"work_item": DONE if self.called_back else WAITING}
        if path.endswith("/briefs"):
            return {"briefs": [{"kind": "result", "text": self.brief_text}]}
        if path.endswith("/history/verify"):
            return {"ok": self.verify_ok, "count": 9, "head": "ab", "first_bad_index": None}
        if path.endswith("/history"):
            return {"events": [{"type": "work_item_created", "work_item_id": WI}]}
        return make_agent(agent_id="demo").model_dump(mode="json")


def scenario(fake: FakeStack, timeout: float = 5.0) -> Scenario:
    client = LongrunClient("http://longrun.test", "op", transport=httpx.MockTransport(fake))
    console = Console(record=True, width=120)
    return Scenario(
        client, console, StopFlag(), lambda: None, step_timeout=timeout, poll_interval=0.001
    )


def test_the_scenario_runs_to_a_complete_outcome() -> None:
    fake = FakeStack()
    outcome = scenario(fake).run()
    assert outcome.missing == []
    assert outcome.work_item["id"] == WI
    assert fake.posted[1] == {"text": DEMO_REQUEST}
    assert fake.called_back
    assert outcome.events == ["work_item_created"]


def test_a_callback_that_triggers_nothing_fails_the_scenario() -> None:
    with pytest.raises(ScenarioFailed, match="did not trigger"):
        scenario(FakeStack(disposition="duplicate")).run()


def test_a_step_that_never_happens_times_out() -> None:
    fake = FakeStack()
    fake.answer = lambda path: {"work_items": [RUNNING]}  # type: ignore[method-assign]
    with pytest.raises(ScenarioFailed, match="timed out after 0s waiting for the agent to plan"):
        scenario(fake, timeout=0.05).run()


def test_a_stop_request_interrupts_the_wait() -> None:
    run = scenario(FakeStack())
    run.stop.signal = 15
    with pytest.raises(ScenarioFailed, match="interrupted"):
        run.run()


def outcome(item: dict[str, Any], briefs: list[dict[str, Any]], ok: bool = True) -> Outcome:
    agent = make_agent().model_dump(mode="json")
    verify = {"ok": ok, "count": 3, "head": "ab", "first_bad_index": None if ok else 1}
    return Outcome("agent-1", agent, item, [item], {"briefs": briefs}, verify)


def test_missing_evidence_names_each_gap() -> None:
    assert outcome(DONE, [{"kind": "result", "text": REPORT}]).missing == []
    missing = outcome(wire(), [], ok=False).missing
    assert any("is open, not completed" in m for m in missing)
    assert any("no result_summary" in m for m in missing)
    assert any("no result brief" in m for m in missing)
    assert any("history verify is not ok" in m for m in missing)


def test_a_brief_of_another_kind_is_not_the_result() -> None:
    missing = outcome(DONE, [{"kind": "ack", "text": REPORT}]).missing
    assert missing == ["no result brief carrying the completion report"]


def test_timeline_keeps_the_story_and_collapses_runs() -> None:
    types = [
        "turn_started",
        "work_item_created",
        "work_item_updated",
        "transcript_recorded",
        "work_item_updated",
        "work_item_updated",
        "work_item_completed",
    ]
    assert timeline(types) == "work_item_created → work_item_updated (3) → work_item_completed"


def test_the_outcome_shows_board_mirror_and_summary() -> None:
    console = Console(record=True, width=160)
    show_outcome(outcome(DONE, [{"kind": "result", "text": REPORT}]), console)
    text = console.export_text()
    assert "** DONE Ship the release notes [3/3]" in text
    assert ":ID: " + WI in text
    assert "history" in text
    assert "ok=True" in text
