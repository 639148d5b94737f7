"""The executor benchmark's baseline: the ledger traffic of the scripted turns, sent straight from
the benchmark process with no executor, so the executor's overhead per turn can be read against
the floor the ledger and Redis set.

Each agent runs the same four-turn cycle as the scripted policy does for a request of three todos
(docs/benchmarks.md, "Executor"): per turn the lease is taken with the four reads of a turn's
start (one round trip, as the executor takes them), `BeginTurn` is sent beside the first model
round, then, one model round at a time (a sleep of the model's latency, left out of the turn's
time), the WorkItem tool calls of that round go through the same `ToolGateway.call_all` the
executor uses, in one round trip; the turn's end is one write, as the executor's: the
transcript, a `RefreshPlanArtifact` for a changed plan file and `FinishTurn`; then the lease and
tick marker are released.
What is left out is everything the executor adds: the tick stream, prompt projection, the
provider call, argument parsing, envelopes, focus tracking and the lease beat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from services.turn_executor.lease import Leases
from services.turn_executor.opening import Opening, queue_reads
from shared.agent_home import plan_descriptor
from shared.domain.records import PlanArtifact
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.tool_gateway import Call as GatewayCall
from shared.tool_gateway import ToolGateway
from shared.wire import commands as c
from shared.wire.replies import CommandReply

Call = tuple[str, dict[str, Any]]
Round = Callable[[str], list[Call]]
"""The WorkItem tool calls of one model round, given the current WorkItem id."""

TODOS = ("Summarize the incident", "File the follow-ups", "Close the ticket")


def _todos(done: int, doing: int | None) -> list[dict[str, str]]:
    states = [
        "completed" if n < done else "in_progress" if n == doing else "pending" for n in range(3)
    ]
    return [{"text": t, "state": s} for t, s in zip(TODOS, states, strict=True)]


def _create(_: str) -> list[Call]:
    todo_list = _todos(0, None)
    args = {"objective": "Summarize the incident", "plan_status": "ready", "todo_list": todo_list}
    return [("CreateWorkItem", {**args, "plan": "# Plan\n\n## Progress\n"})]


def _pick(item: str) -> list[Call]:
    return [
        ("PickWorkItem", {"work_item_id": item}),
        ("UpdateWorkItem", {"work_item_id": item, "todo_list": _todos(0, 0)}),
    ]


def _step(done: int) -> Round:
    return lambda item: [
        ("UpdateWorkItem", {"work_item_id": item, "todo_list": _todos(done, done)})
    ]


def _finish(item: str) -> list[Call]:
    return [
        ("UpdateWorkItem", {"work_item_id": item, "todo_list": _todos(3, None)}),
        ("CompleteWorkItem", {"work_item_id": item}),
    ]


def _text(_: str) -> list[Call]:
    return []


CYCLE: tuple[tuple[tuple[Round, ...], bool], ...] = (
    ((_create, _pick, _text), False),
    ((_step(1), _text), True),
    ((_step(2), _text), True),
    ((_finish,), False),
)
"""Per turn of the cycle: its rounds, and whether it edits the plan file (then refreshes it)."""


def edit_plan(home: Path, agent: str, item: str, line: str) -> PlanArtifact:
    """Append a line to the plan file and describe it, in the event loop as the executor does."""
    path = Path(plan_descriptor(home, agent, item, utc_now()).path)
    path.write_text(path.read_text() + line)
    return plan_descriptor(home, agent, item, utc_now())


@dataclass
class Floor:
    client: LedgerClient
    gateway: ToolGateway
    leases: Leases
    home: Path
    latency_s: float
    turn_ms: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def agent(self, agent: str) -> None:
        """Run the cycle over and over; a new request after each completed WorkItem."""
        item = ""
        while not self.stop.is_set():
            for rounds, edits in CYCLE:
                item = await self.turn(agent, item, rounds, edits=edits)
            ask = f"ask-{agent}-{new_id('m_')}"
            text = "Summarize the incident. Then file the follow-ups. Then close the ticket."
            await self.client.send(
                c.AppendOperatorMessage(command_id=ask, agent_id=agent, message_id=ask, text=text)
            )

    async def turn(self, agent: str, item: str, rounds: tuple[Round, ...], *, edits: bool) -> str:
        turn_id = new_id("turn_")
        owner = f"floor:{turn_id}"
        # The lease and the opening reads in one round trip, as the executor takes them.
        token, answers = await self.leases.acquire_then(agent, owner, self._reads(agent))
        assert token is not None
        # Timed like the executor's `turn_finished` line: lease taken to FinishTurn answered.
        started, slept = time.perf_counter(), 0.0
        opening = Opening.decode(answers)
        inbox = opening.inbox
        begin = c.BeginTurn(
            command_id=f"{turn_id}:begin",
            agent_id=agent,
            turn_id=turn_id,
            fencing_token=token,
            tick_id=new_id("tick_"),
            tick_kind="input" if inbox else "continue_current",
        )
        # BeginTurn travels beside the first model round, as the executor sends it.
        begun: asyncio.Task[list[CommandReply]] | None = self.client.queue_all([begin])
        entries = [c.TranscriptEntry(role="user", content="x" * 800)]
        for n, make in enumerate(rounds, start=1):
            nap = time.perf_counter()
            await asyncio.sleep(self.latency_s)
            slept += time.perf_counter() - nap
            if begun is not None:
                ((reply,), begun) = (await begun, None)
                assert reply.error is None
            calls = make(item)
            item = await self._round(agent, item, calls, f"{turn_id}:{n}", token)
            for _, args in calls:
                entries.append(c.TranscriptEntry(role="tool", content=orjson.dumps(args).decode()))
            entries.append(c.TranscriptEntry(role="assistant", content="Done: a step.", round=n))
        refreshes = [self._refresh(agent, item, turn_id, token)] if edits else []
        transcript = c.RecordTranscript(
            command_id=f"{turn_id}:transcript",
            agent_id=agent,
            turn_id=turn_id,
            fencing_token=token,
            work_item_id=item or None,
            entries=tuple(entries),
        )
        completed = rounds[-1] is _finish
        finish = c.FinishTurn(
            command_id=f"{turn_id}:finish",
            agent_id=agent,
            turn_id=turn_id,
            fencing_token=token,
            outcome=c.TurnOutcome.COMPLETED if completed else c.TurnOutcome.YIELDED,
            work_item_id=item or None,
            inbox_consumed=len(inbox),
        )
        # The turn's end in one write, as the executor sends it: transcript, refresh, finish.
        replies = await self.client.send_all([*refreshes, finish], published=[transcript])
        assert all(reply.error is None for reply in replies)
        self.turn_ms.append((time.perf_counter() - started - slept) * 1000)
        self.rounds.append(len(rounds))
        await self.leases.release(agent, owner, tick_id=begin.tick_id)
        return item

    async def _round(
        self, agent: str, item: str, calls: list[Call], round_id: str, token: int
    ) -> str:
        """One round's calls in one round trip, as the executor sends them."""
        report = "Completed the incident summary."
        envelopes = await self.gateway.call_all(
            agent,
            [
                GatewayCall(name, args, f"{round_id}:{index}", report)
                for index, (name, args) in enumerate(calls)
            ],
            turn_id=round_id.split(":", maxsplit=1)[0],
            fencing_token=token,
        )
        for (name, _), envelope in zip(calls, envelopes, strict=True):
            assert envelope.status == "success", envelope
            created = (envelope.result or {}).get("work_item") if name == "CreateWorkItem" else None
            item = str(created["id"]) if isinstance(created, dict) else item
        return item

    def _reads(self, agent: str) -> Callable[[Any], object]:
        return queue_reads(self.leases.names, agent)

    def _refresh(self, agent: str, item: str, turn_id: str, token: int) -> c.RefreshPlanArtifact:
        """What an EditFile of the plan plus the turn-end refresh cost: the file and one command."""
        artifact = edit_plan(self.home, agent, item, f"- done: a step of {turn_id}\n")
        return c.RefreshPlanArtifact(
            command_id=f"{turn_id}:plan:{item}",
            agent_id=agent,
            work_item_id=item,
            artifact=artifact,
            fencing_token=token,
        )
