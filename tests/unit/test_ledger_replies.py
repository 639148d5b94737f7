"""The ledger writes replies with orjson directly (services.ledger.planning.reply_bytes); the
JSON must be what pydantic's own dump of the reply gives, for every kind of result, warning and
error the rules produce."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

import orjson
import pytest

from services.ledger.planning import reply_bytes
from services.ledger.rules import Context, LedgerState, decide
from shared.domain.errors import DomainError
from shared.domain.records import TodoState, WakeKind
from shared.domain.tools import (
    CompleteWorkItemInput,
    CreateWorkItemInput,
    PickWorkItemInput,
    TodoInput,
    UpdateWorkItemInput,
    WaitForInput,
)
from shared.wire import commands as c
from shared.wire.codec import decode, encode_built
from shared.wire.replies import CommandOutcome, CommandReply
from tests.builders import make_plan_artifact, work_item_id

AGENT = "agent-replies"
NOW = datetime(2026, 11, 24, 8, 0, 0, 123456, tzinfo=UTC)


def commands() -> list[c.Command]:
    first, second = work_item_id(1), work_item_id(2)
    todos = (
        TodoInput(text="Read the invoices", state=TodoState.COMPLETED),
        TodoInput(text="Write the report"),
    )
    return [
        c.EnsureAgent(
            command_id="ensure",
            agent_id=AGENT,
            agent_token_hash="a" * 64,
            callback_token_hash="b" * 64,
        ),
        c.EnsureAgent(
            command_id="ensure-again",
            agent_id=AGENT,
            agent_token_hash="a" * 64,
            callback_token_hash="b" * 64,
        ),
        *(
            c.CreateWorkItem(
                command_id=f"create-{wid}",
                agent_id=AGENT,
                work_item_id=wid,
                plan_artifact=make_plan_artifact(agent_id=AGENT, item_id=wid),
                args=CreateWorkItemInput(objective=f"Objective of {wid}", todo_list=todos),
            )
            for wid in (first, second)
        ),
        c.PickWorkItem(
            command_id="pick-1", agent_id=AGENT, args=PickWorkItemInput(work_item_id=first)
        ),
        c.PickWorkItem(  # a focus switch without a reason: a warning
            command_id="pick-2", agent_id=AGENT, args=PickWorkItemInput(work_item_id=second)
        ),
        c.UpdateWorkItem(
            command_id="block",
            agent_id=AGENT,
            args=UpdateWorkItemInput(work_item_id=second, blocked_by="Waiting for the supplier"),
        ),
        c.WaitFor(
            command_id="wait",
            agent_id=AGENT,
            args=WaitForInput(
                reason="The supplier answers", wake=WakeKind.OPERATOR_INPUT, work_item_id=first
            ),
        ),
        c.AppendOperatorMessage(
            command_id="message", agent_id=AGENT, message_id="m-1", text="They answered."
        ),
        c.CompleteWorkItem(  # unfinished todos: a warning with counts and a sample
            command_id="complete",
            agent_id=AGENT,
            report_text="Done: the report is written.",
            args=CompleteWorkItemInput(work_item_id=first),
        ),
        c.CompleteWorkItem(  # already completed: a rejection with its error body
            command_id="complete-again",
            agent_id=AGENT,
            args=CompleteWorkItemInput(work_item_id=first),
        ),
        c.UpdateWorkItem(  # unknown item: another rejection
            command_id="unknown",
            agent_id=AGENT,
            args=UpdateWorkItemInput(work_item_id=work_item_id(9), objective="x"),
        ),
    ]


def replies() -> list[CommandReply]:
    ids = count()
    ctx = Context(now=NOW, new_id=lambda prefix: f"{prefix}{next(ids):026d}")
    state = LedgerState(agent_id=AGENT, agent=None)
    out = []
    for cmd in commands():
        try:
            decision = decide(state, cmd, ctx)
        except DomainError as err:
            out.append(
                CommandReply(
                    command_id=cmd.command_id, outcome=CommandOutcome.REJECTED, error=err.body()
                )
            )
            continue
        state = decision.state.committed()
        out.append(
            CommandReply(
                command_id=cmd.command_id,
                outcome=CommandOutcome.APPLIED,
                result=decision.result,
                warnings=decision.warnings,
            )
        )
    return out


def test_the_sequence_covers_results_warnings_and_errors() -> None:
    made = replies()
    assert any(r.warnings for r in made)
    assert any(w.sample for r in made for w in r.warnings)
    assert sum(r.error is not None for r in made) == 2
    assert any(r.result and "work_item" in r.result for r in made)


@pytest.mark.parametrize("reply", replies(), ids=lambda r: r.command_id)
def test_a_reply_is_the_json_pydantic_would_write(reply: CommandReply) -> None:
    wire = reply_bytes(reply, NOW)
    body = reply.model_dump(mode="json")
    assert wire == encode_built(CommandReply, id=reply.command_id, at=NOW, body=body)
    assert orjson.loads(wire)["body"] == body
    assert decode(wire).body == reply
