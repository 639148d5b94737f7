"""The demo's scenario over the HTTP API: create an agent, ask for planned work that waits for a
reviewer, answer the wait with a callback, and collect what the run left behind."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TypeVar

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from services.cli.board import one_line, todo_progress
from services.cli.client import Callback, Json, LongrunClient
from services.cli.demo_report import Outcome
from services.cli.processes import StopFlag

T = TypeVar("T")

# Phrased for the scripted provider's built-in policy: the first sentence is the objective, each
# later clause a todo, and "wait for ... callback" adds a step that waits for an external callback.
DEMO_REQUEST = (
    "Write the release note for the longrun preview, for reviewer approval. "
    "Outline the user-visible changes, then draft the note, then polish the wording. "
    "Wait for the reviewer's callback before you finish."
)
REVIEW = '{"reviewer": "release-review", "verdict": "approved", "comment": "Ship it."}'


class ScenarioFailed(Exception):
    """A step of the scenario did not happen in time, or was refused."""


def external_wait(view: Json) -> Json | None:
    """The WorkItem's active external wait, if it has one."""
    return next((w for w in view.get("active_waits") or [] if w.get("wake") == "external"), None)


class Scenario:
    def __init__(
        self,
        client: LongrunClient,
        console: Console,
        stop: StopFlag,
        check_alive: Callable[[], None],
        *,
        step_timeout: float,
        poll_interval: float = 0.25,
    ) -> None:
        self.client = client
        self.console = console
        self.stop = stop
        self.check_alive = check_alive
        self.step_timeout = step_timeout
        self.poll_interval = poll_interval
        self.agent_id = f"demo-{secrets.token_hex(3)}"

    def say(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def run(self) -> Outcome:
        created = self.client.put_agent(self.agent_id)
        self.say(f"[bold]1.[/] created agent [cyan]{self.agent_id}[/] (PUT /v1/agents)")
        sent = self.client.send_message(self.agent_id, DEMO_REQUEST)
        self.say(f"[bold]2.[/] operator message {sent.get('message_id')}: “{escape(DEMO_REQUEST)}”")
        waiting = self.until("the agent to plan, work its todos and wait", self._waiting_item)
        wait = external_wait(waiting) or {}
        blocker = escape(one_line(waiting.get("blocked_by")))
        self.say(
            f"[bold]3.[/] {waiting['id']} is waiting: {blocker} (external wait {wait.get('id')})"
        )
        self._callback(str(created.get("callback_url") or ""))
        done = self.until("the agent to review the callback and finish", self._completed(waiting))
        self.say(f"[bold]5.[/] {done['id']} completed")
        return self._outcome(done)

    def _callback(self, url: str) -> None:
        if not url:
            raise ScenarioFailed("PUT /v1/agents answered without a callback_url")
        body = Callback.from_text(REVIEW, idempotency_key=f"{self.agent_id}-review-1")
        answer = self.client.post_callback(url, body)
        disposition = answer.get("disposition")
        self.say(f"[bold]4.[/] reviewer callback delivered: disposition {escape(str(disposition))}")
        if disposition != "triggered":
            raise ScenarioFailed(f"the callback did not trigger the wait: {answer}")

    def until(self, what: str, probe: Callable[[Status], T | None]) -> T:
        """Poll `probe` until it returns a value, the step times out, or a stop is requested."""
        deadline = time.monotonic() + self.step_timeout
        with self.console.status(f"waiting for {what}") as status:
            while time.monotonic() < deadline:
                if self.stop.requested:
                    raise ScenarioFailed("interrupted")
                self.check_alive()
                found = probe(status)
                if found is not None:
                    return found
                time.sleep(self.poll_interval)
        raise ScenarioFailed(f"timed out after {self.step_timeout:.0f}s waiting for {what}")

    def _items(self) -> list[Json]:
        return list(self.client.list_work_items(self.agent_id).get("work_items", []))

    def _waiting_item(self, status: Status) -> Json | None:
        items = self._items()
        for view in items:
            if external_wait(view) is not None:
                return view
        if items:
            status.update("agent working: " + escape(_progress_line(items[0])))
        return None

    def _completed(self, waiting: Json) -> Callable[[Status], Json | None]:
        def probe(status: Status) -> Json | None:
            view = self.client.get_work_item(self.agent_id, waiting["id"]).get("work_item", {})
            if view.get("state") == "completed":
                return dict(view)
            status.update("agent working: " + escape(_progress_line(view)))
            return None

        return probe

    def _outcome(self, done: Json) -> Outcome:
        briefs = self.client.briefs(self.agent_id, done["id"])
        verify = self.client.history_verify(self.agent_id)
        agent = self.client.get_agent(self.agent_id)
        items = self._items()
        events = self.client.history(self.agent_id).get("events") or []
        mine = [str(e.get("type")) for e in events if e.get("work_item_id") == done["id"]]
        return Outcome(self.agent_id, agent, done, items, briefs, verify, mine)


def _progress_line(view: Json) -> str:
    done, total = todo_progress(view)
    todo = view.get("current_todo") or {}
    now = one_line(todo.get("text"), 60) if isinstance(todo, dict) else ""
    return f"{view.get('id')} [{view.get('scheduling_state')}] todos {done}/{total} {now}"
