"""External calls' records: both are fenced by the turn's token (a superseded turn can neither
announce nor settle a call) and become history events carrying what the contract names."""

from __future__ import annotations

import hashlib

import pytest

from services.ledger.rules import decide
from shared.domain.errors import DomainError, ErrorKind
from shared.wire import commands as c
from shared.wire import events as e
from tests.unit.test_turn_end_rules import FENCE, WI, ctx, state

DIGEST = hashlib.sha256(b'{"q":"x"}').hexdigest()


def start(token: int) -> c.RecordToolCallStart:
    return c.RecordToolCallStart(
        command_id="t1:0:0:started",
        agent_id=state().agent_id,
        turn_id="t1",
        fencing_token=token,
        call_id="call_t1:0:0",
        server="web",
        tool="search",
        args_sha256=DIGEST,
        arguments='{"q":"x"}',
    )


def finish(token: int) -> c.RecordToolCallFinish:
    return c.RecordToolCallFinish(
        command_id="t1:0:0:finished",
        agent_id=state().agent_id,
        turn_id="t1",
        fencing_token=token,
        call_id="call_t1:0:0",
        outcome="ok",
        result_chars=12,
        truncated=False,
    )


def test_the_records_become_history_events_bound_to_the_current_item() -> None:
    (started,) = decide(state(), start(FENCE), ctx()).events
    assert isinstance(started, e.ToolCallStarted)
    assert (started.call_id, started.server, started.tool) == ("call_t1:0:0", "web", "search")
    assert (started.args_sha256, started.turn_id, started.work_item_id) == (DIGEST, "t1", WI)
    (finished,) = decide(state(), finish(FENCE), ctx()).events
    assert isinstance(finished, e.ToolCallFinished)
    assert (finished.outcome, finished.result_chars, finished.truncated) == ("ok", 12, False)


@pytest.mark.parametrize("command", [start, finish])
def test_a_superseded_turn_cannot_record_a_call(command: object) -> None:
    with pytest.raises(DomainError) as refused:
        decide(state(), command(FENCE - 1), ctx())  # type: ignore[operator]
    assert refused.value.kind is ErrorKind.STALE_TURN
