"""What a turn's end writes: the resting posture with a spent budget announced in the same
write, and the inbox it was shown (consumed once on success, kept on failure, set aside
visibly after three failed attempts)."""

from __future__ import annotations

from typing import Any

import pytest

from services.ledger.rules import Context, Decision, LedgerState, decide
from shared.domain.records import Posture, WakeBudget
from shared.domain.stored import AgentRecord
from shared.domain.wake import TickKind
from shared.wire import commands as c
from tests.builders import AGENT_ID, at, make_agent, make_wait, make_work_item, work_item_id

NOW = at(hours=1)
WI = work_item_id(1)
FENCE = 4


def ids(prefix: str) -> str:
    return prefix + "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def ctx() -> Context:
    return Context(now=NOW, new_id=ids)


def state(
    *, used: int = 0, limit: int = 25, waits: tuple[Any, ...] = (), **record: Any
) -> LedgerState:
    agent = AgentRecord(
        state=make_agent(
            current_work_item_id=WI,
            posture="running",
            wake_budget=WakeBudget(used=used, limit=limit),
        ),
        version=1,
        agent_token_hash="a" * 64,
        callback_token_id="cb_1",
        created_at=at(),
        **record,
    )
    item = make_work_item(id=WI)
    return LedgerState(
        agent_id=AGENT_ID,
        agent=agent,
        fence=FENCE,
        items={WI: item},
        waits={w.id: w for w in waits},
    )


def begin(
    turn: str, kind: TickKind = TickKind.CONTINUE_CURRENT, shown: tuple[str, ...] = ()
) -> Any:
    return c.BeginTurn.model_validate(
        {
            "command_id": f"{turn}:begin",
            "agent_id": AGENT_ID,
            "turn_id": turn,
            "fencing_token": FENCE,
            "tick_id": f"tick-{turn}",
            "tick_kind": kind,
            "inbox_shown": shown,
        }
    )


def finish(turn: str, outcome: str, *, consumed: int = 0, error: str | None = None) -> Any:
    return c.FinishTurn.model_validate(
        {
            "command_id": f"{turn}:finish",
            "agent_id": AGENT_ID,
            "turn_id": turn,
            "fencing_token": FENCE,
            "outcome": outcome,
            "work_item_id": WI,
            "error": error,
            "inbox_consumed": consumed,
        }
    )


def run(before: LedgerState, *commands: Any) -> tuple[LedgerState, list[Decision]]:
    decisions = []
    for cmd in commands:
        decision = decide(before, cmd, ctx())
        decisions.append(decision)
        before = decision.state.committed()
    return before, decisions


def types(decision: Decision) -> list[str]:
    return [e.message_type for e in decision.events]


# ---------------------------------------------------------------- wake budget at the turn's end


@pytest.mark.parametrize(
    ("used", "waits", "announced"),
    [
        pytest.param(24, (), True, id="last-unit-spent"),
        pytest.param(23, (), False, id="budget-left"),
        pytest.param(
            24,
            (make_wait(work_item_id=work_item_id(2), trigger_count=1),),
            False,
            id="an-unreviewed-trigger-will-wake-it",
        ),
    ],
)
def test_the_turn_that_spends_the_budget_parks_and_announces_in_one_write(
    used: int, waits: tuple[Any, ...], announced: bool
) -> None:
    after, (_, finished) = run(state(used=used, waits=waits), begin("t1"), finish("t1", "yielded"))
    agent = after.require_agent()
    assert agent.state.posture is Posture.IDLE
    assert ("wake_budget_exhausted" in types(finished)) is announced
    assert agent.exhaustion_reported is announced
    if announced:
        parked = [e for e in finished.events if e.message_type == "agent_parked"]
        assert [e.model_dump()["reason"] for e in parked] == ["wake_budget_exhausted"]


def test_a_spent_budget_is_announced_once() -> None:
    _, decisions = run(
        state(used=24),
        begin("t1"),
        finish("t1", "yielded"),
        begin("t2", TickKind.INPUT),
        finish("t2", "yielded"),
    )
    announced = [d for d in decisions if "wake_budget_exhausted" in types(d)]
    assert len(announced) == 1


# ---------------------------------------------------------------- the inbox a turn was shown


def inbox_pops(decisions: list[Decision]) -> list[int]:
    return [d.side.inbox_pop for d in decisions]


def test_a_successful_turn_consumes_what_it_was_shown_once() -> None:
    _, decisions = run(state(), begin("t1", TickKind.INPUT, ("m1", "m2")), finish("t1", "yielded"))
    assert inbox_pops(decisions) == [0, 2]


def test_a_success_also_consumes_messages_the_turn_took_in_while_running() -> None:
    _, decisions = run(
        state(), begin("t1", TickKind.INPUT, ("m1",)), finish("t1", "yielded", consumed=3)
    )
    assert inbox_pops(decisions) == [0, 3]


@pytest.mark.parametrize("outcome", ["failed", "interrupted"])
def test_a_failed_turn_leaves_its_inbox_for_the_next_turn(outcome: str) -> None:
    _, decisions = run(
        state(),
        begin("t1", TickKind.INPUT, ("m1",)),
        finish("t1", outcome, consumed=1, error="provider error: 503"),
        begin("t2", TickKind.INPUT, ("m1",)),
        finish("t2", "yielded", consumed=1),
    )
    assert inbox_pops(decisions) == [0, 0, 0, 1]
    assert "inbox_undeliverable" not in [t for d in decisions for t in types(d)]


def test_three_failed_attempts_set_the_messages_aside_visibly() -> None:
    attempts = []
    for n in (1, 2, 3):
        attempts += [
            begin(f"t{n}", TickKind.INPUT, ("m1", "m2")),
            finish(f"t{n}", "failed", error=f"boom {n}"),
        ]
    after, decisions = run(state(), *attempts)
    assert inbox_pops(decisions) == [0, 0, 0, 0, 0, 2]
    third = decisions[-1]
    (undeliverable,) = [e for e in third.events if e.message_type == "inbox_undeliverable"]
    assert undeliverable.model_dump()["message_ids"] == ("m1", "m2")
    notes = [b for b in third.side.briefs if "m1" in b.text]
    (note,) = notes
    assert note.kind.value == "failure"
    assert "m2" in note.text
    assert "boom 3" in note.text
    assert after.require_agent().inbox_failed == {}


def test_only_messages_shown_to_three_failed_attempts_are_set_aside() -> None:
    _, decisions = run(
        state(),
        begin("t1", TickKind.INPUT, ("m1",)),
        finish("t1", "failed", error="boom"),
        begin("t2", TickKind.INPUT, ("m1",)),
        finish("t2", "failed", error="boom"),
        begin("t3", TickKind.INPUT, ("m1", "m2")),
        finish("t3", "failed", error="boom"),
        begin("t4", TickKind.INPUT, ("m2",)),
        finish("t4", "yielded", consumed=1),
    )
    assert inbox_pops(decisions) == [0, 0, 0, 0, 0, 1, 0, 1]
    (aside,) = [e for d in decisions for e in d.events if e.message_type == "inbox_undeliverable"]
    assert aside.model_dump()["message_ids"] == ("m1",)


def test_interrupted_attempts_count_when_the_next_turn_begins() -> None:
    # Two executors die mid-turn (no FinishTurn); the third attempt fails.
    _, decisions = run(
        state(),
        begin("t1", TickKind.INPUT, ("m1",)),
        begin("t2", TickKind.INPUT, ("m1",)),
        begin("t3", TickKind.INPUT, ("m1",)),
        finish("t3", "failed", error="boom"),
    )
    assert inbox_pops(decisions) == [0, 0, 0, 1]
    assert "inbox_undeliverable" in types(decisions[-1])


def test_a_turn_begun_after_messages_were_set_aside_is_not_charged_for_them() -> None:
    # The third attempt is an interruption noticed by the fourth BeginTurn, whose executor
    # read the inbox before the ledger set m1 aside.
    _, decisions = run(
        state(),
        begin("t1", TickKind.INPUT, ("m1",)),
        begin("t2", TickKind.INPUT, ("m1",)),
        begin("t3", TickKind.INPUT, ("m1",)),
        begin("t4", TickKind.INPUT, ("m1", "m2")),
        finish("t4", "yielded", consumed=1),
    )
    assert inbox_pops(decisions) == [0, 0, 0, 1, 1]
    assert "inbox_undeliverable" in types(decisions[3])
