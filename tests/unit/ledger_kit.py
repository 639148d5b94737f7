"""Ledger rules as pure functions: a state built from records, commands built from tool
arguments, and `decide` called at an explicit instant. No Redis and no wall clock."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

import pytest

from services.ledger.rules import Context, Decision, LedgerState, decide
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import WaitingIntent, WorkItem
from shared.domain.stored import AgentRecord
from shared.domain.tools import TOOL_INPUTS, CreateWorkItemInput, ToolName
from shared.domain.views import Readiness, readiness
from shared.domain.wake import TickKind
from shared.wire import commands as c
from shared.wire.events import Event
from tests.builders import (
    AGENT_ID,
    at,
    make_agent,
    make_agent_record,
    make_plan_artifact,
    ulid_body,
    work_item_id,
)

NOW = at(hours=1)
"""The instant a decision is made at unless a test names another."""
ITEM, OTHER, THIRD = work_item_id(1), work_item_id(2), work_item_id(3)

_counter = itertools.count(1)
E = TypeVar("E", bound=Event)


def new_id(prefix: str) -> str:
    """A fresh id in the ULID alphabet, above the ones the builders hand out."""
    return prefix + ulid_body(10_000 + next(_counter))


def token_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def ledger_state(
    *items: WorkItem,
    waits: Iterable[WaitingIntent] = (),
    current: str | None = None,
    agent: AgentRecord | None = None,
    **fields: Any,
) -> LedgerState:
    """An agent's slice holding `items` and `waits`, focused on `current`."""
    record = agent or make_agent_record(state=make_agent(current_work_item_id=current))
    return LedgerState(
        agent_id=AGENT_ID,
        agent=record,
        items={item.id: item for item in items},
        waits={wait.id: wait for wait in waits},
        **fields,
    )


# ---------------------------------------------------------------- deciding


def run(state: LedgerState, command: c.Command, now: datetime = NOW) -> Decision:
    return decide(state, command, Context(now=now, new_id=new_id, wake_limit=25))


def chain(
    state: LedgerState, *commands: c.Command, now: datetime = NOW
) -> tuple[LedgerState, list[Event]]:
    """Decide the commands one after the other, each against the state the last one left."""
    events: list[Event] = []
    for command in commands:
        decision = run(state, command, now)
        state = decision.state.committed()
        events += decision.events
    return state, events


def refusal(state: LedgerState, command: c.Command, now: datetime = NOW) -> ErrorKind:
    with pytest.raises(DomainError) as caught:
        run(state, command, now)
    return caught.value.kind


def kinds(events: Iterable[Event]) -> list[str]:
    return [event.message_type for event in events]


def only(events: Iterable[Event], kind: type[E]) -> list[E]:
    return [event for event in events if isinstance(event, kind)]


def readiness_of(state: LedgerState, work_item_id: str) -> Readiness:
    return readiness(state.items[work_item_id], state.active_waits())


def warning_kinds(decision: Decision) -> list[str]:
    return [warning.kind.value for warning in decision.warnings]


# ---------------------------------------------------------------- commands


def _common(fencing_token: int | None = None) -> dict[str, Any]:
    return {
        "command_id": f"cmd-{next(_counter)}",
        "agent_id": AGENT_ID,
        "fencing_token": fencing_token,
    }


def tool(
    name: str,
    *,
    fencing_token: int | None = None,
    report_text: str | None = None,
    capability_token_hash: str | None = None,
    turn_id: str | None = None,
    **args: Any,
) -> c.ToolCommand:
    """A WorkItem tool call other than CreateWorkItem, from the tool's own arguments."""
    kind = ToolName(name)
    parsed = TOOL_INPUTS[kind].model_validate(args)
    common = {**_common(fencing_token), "turn_id": turn_id}
    if kind is ToolName.COMPLETE_WORK_ITEM:
        return c.CompleteWorkItem(args=parsed, report_text=report_text, **common)
    if kind is ToolName.WAIT_FOR:
        return c.WaitFor(args=parsed, capability_token_hash=capability_token_hash, **common)
    return c.TOOL_COMMANDS[kind](args=parsed, **common)


def create(n: int, objective: str = "objective", **args: Any) -> c.CreateWorkItem:
    wid = work_item_id(n)
    return c.CreateWorkItem(
        args=CreateWorkItemInput.model_validate({"objective": objective, **args}),
        work_item_id=wid,
        plan_artifact=make_plan_artifact(item_id=wid),
        **_common(),
    )


def operator_message(work_item_id: str | None = None) -> c.AppendOperatorMessage:
    return c.AppendOperatorMessage(
        command_id=f"cmd-{next(_counter)}",
        agent_id=AGENT_ID,
        message_id=new_id("msg_"),
        text="here is the answer",
        work_item_id=work_item_id,
    )


def callback(
    via: str = "x", delivery_id: str = "d1", *, body: str = "hi", encoding: str = "utf-8"
) -> c.RecordCallback:
    """A delivery authenticated by the capability token `via`."""
    return c.RecordCallback.model_validate(
        {
            "command_id": f"cmd-{next(_counter)}",
            "agent_id": AGENT_ID,
            "token_hash": token_hash(via),
            "delivery_id": delivery_id,
            "content_type": "text/plain",
            "body": body,
            "body_encoding": encoding,
            "source": c.CallbackSource.HTTP,
        }
    )


def begin_turn(
    turn_id: str,
    fence: int = 1,
    *,
    kind: TickKind = TickKind.INPUT,
    reviewed: dict[str, int] | None = None,
) -> c.BeginTurn:
    return c.BeginTurn(
        command_id=f"cmd-{next(_counter)}",
        agent_id=AGENT_ID,
        turn_id=turn_id,
        fencing_token=fence,
        tick_id=f"tick-{turn_id}",
        tick_kind=kind,
        reviewed_triggers=reviewed or {},
    )


def finish_turn(
    turn_id: str,
    outcome: c.TurnOutcome,
    fence: int = 1,
    *,
    work_item_id: str | None = None,
    error: str | None = None,
) -> c.FinishTurn:
    return c.FinishTurn(
        command_id=f"cmd-{next(_counter)}",
        agent_id=AGENT_ID,
        turn_id=turn_id,
        fencing_token=fence,
        outcome=outcome,
        work_item_id=work_item_id,
        error=error,
    )
