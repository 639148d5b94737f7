"""A spec naming an environment variable the executor lacks: the first missing one is found,
the hold's backoff doubles while the same variable stays missing, the ledger parks the agent
idle with `agent_parked {reason: missing_secret}` (fenced, no turn begun), the scheduler holds it
until `retry_at`, and a turn that begins or a spec change clears the hold."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from services.ledger.rules import decide as ledger_decide
from services.scheduler.policy import Hold, decide, park_reason
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.missing_secrets import MissingSecret, first_missing, next_missing
from shared.domain.model_failures import OutageBackoff
from shared.domain.records import Posture, WakeBudget
from shared.domain.specs import AgentSpec
from shared.domain.usage import why_not_running
from shared.wire import commands as c
from shared.wire import events as e
from tests.unit.test_scheduler_policy import NOW, agent, item, snapshot
from tests.unit.test_turn_end_rules import FENCE, begin, ctx, state

SERVER = {
    "name": "search",
    "transport": "http",
    "url": "https://search.example/mcp",
    "headers_from_env": {"Authorization": "SEARCH_TOKEN", "X-Team": "TEAM_ID"},
}
SPEC = AgentSpec.model_validate({"tools": {"mcp_servers": [SERVER]}})
BACKOFF = OutageBackoff(base_s=30, cap_s=1800)


def hold(*, name: str = "SEARCH_TOKEN", version: int = 0, seconds: int = 30) -> MissingSecret:
    return MissingSecret(name=name, spec_version=version, retry_at=NOW + timedelta(seconds=seconds))


def record(token: int = FENCE, **fields: object) -> c.RecordMissingSecret:
    return c.RecordMissingSecret(
        command_id="t1:missing_secret",
        agent_id=state().agent_id,
        fencing_token=token,
        hold=hold(**fields),  # type: ignore[arg-type]
    )


def test_the_first_missing_variable_is_named_in_sorted_order() -> None:
    assert first_missing(SPEC, {}) == "SEARCH_TOKEN"
    assert first_missing(SPEC, {"SEARCH_TOKEN": "x"}) == "TEAM_ID"
    assert first_missing(SPEC, {"SEARCH_TOKEN": "x", "TEAM_ID": ""}) is None
    assert first_missing(AgentSpec(), {}) is None


def test_a_stdio_servers_env_from_env_is_required_too() -> None:
    stdio = {"name": "fs", "transport": "stdio", "command": ["fs-server"]}
    spec = AgentSpec.model_validate(
        {"tools": {"mcp_servers": [{**stdio, "env_from_env": {"FS_KEY": "FS_KEY_FOR_AGENT"}}]}}
    )
    assert first_missing(spec, {"FS_KEY": "x"}) == "FS_KEY_FOR_AGENT"


def test_the_backoff_doubles_while_the_same_variable_stays_missing() -> None:
    first = next_missing(None, name="A_KEY", spec_version=2, now=NOW, backoff=BACKOFF)
    assert (first.attempts, first.retry_at) == (1, NOW + timedelta(seconds=30))
    second = next_missing(first, name="A_KEY", spec_version=2, now=NOW, backoff=BACKOFF)
    assert (second.attempts, second.retry_at) == (2, NOW + timedelta(seconds=60))
    other = next_missing(second, name="B_KEY", spec_version=2, now=NOW, backoff=BACKOFF)
    assert other.attempts == 1
    newer = next_missing(second, name="A_KEY", spec_version=3, now=NOW, backoff=BACKOFF)
    assert newer.attempts == 1


def test_the_ledger_parks_the_agent_idle_without_beginning_a_turn() -> None:
    decision = ledger_decide(state(), record(), ctx())
    (parked,) = decision.events
    assert isinstance(parked, e.AgentParked)
    assert (parked.posture, parked.reason, parked.name) == (
        Posture.IDLE,
        "missing_secret",
        "SEARCH_TOKEN",
    )
    agent = decision.state.require_agent()
    assert agent.state.posture is Posture.IDLE
    assert agent.missing_secret == hold()
    assert agent.current_turn_id is None
    assert agent.state.wake_budget == state().require_agent().state.wake_budget


def test_a_superseded_executor_cannot_park_the_agent() -> None:
    with pytest.raises(DomainError) as refused:
        ledger_decide(state(), record(FENCE - 1), ctx())
    assert refused.value.kind is ErrorKind.STALE_TURN


def test_a_hold_for_an_older_spec_version_parks_nothing() -> None:
    decision = ledger_decide(state(spec_version=3), record(version=2), ctx())
    assert decision.events == ()
    assert decision.result == {"parked": False, "spec_version": 3}


def test_a_turn_that_begins_clears_the_hold() -> None:
    held = state(missing_secret=hold())
    begun = ledger_decide(held, begin("t2"), ctx()).state.require_agent()
    assert begun.missing_secret is None


def test_a_spec_change_clears_the_hold() -> None:
    held = state(missing_secret=hold())
    change = c.EnsureAgent(
        command_id="spec-2",
        agent_id=held.agent_id,
        spec=AgentSpec(instructions="You file invoices."),
        agent_token_hash="a" * 64,
        callback_token_hash="b" * 64,
    )
    changed = ledger_decide(held, change, ctx())
    assert any(isinstance(event, e.AgentSpecChanged) for event in changed.events)
    assert changed.state.require_agent().missing_secret is None


def test_the_scheduler_holds_the_agent_until_retry_at() -> None:
    runnable = snapshot((item(1),), state=agent(current=1, posture=Posture.IDLE), inbox=1)
    held = replace(runnable, missing_secret=hold())
    decision = decide(held, NOW)
    assert (decision.tick, decision.hold, decision.posture) == (
        None,
        Hold.MISSING_SECRET,
        Posture.IDLE,
    )
    assert decision.wake_at == hold().retry_at
    assert park_reason(decision, held) is None  # the ledger parked it already
    woken = decide(held, hold().retry_at)
    assert woken.tick is not None
    assert woken.tick.kind.value == "input"


def test_why_not_running_names_the_missing_variable_until_retry_at() -> None:
    why = why_not_running(
        missing=hold(),
        outage=None,
        spent=None,
        limit=None,
        wake_budget=WakeBudget(limit=25),
        posture=Posture.IDLE,
        now=NOW,
    )
    assert why == {
        "kind": "missing_secret",
        "name": "SEARCH_TOKEN",
        "retry_at": hold().retry_at.isoformat().replace("+00:00", "Z"),
    }
    later = why_not_running(
        missing=hold(),
        outage=None,
        spent=None,
        limit=None,
        wake_budget=WakeBudget(limit=25),
        posture=Posture.IDLE,
        now=hold().retry_at,
    )
    assert later is None
