"""Builders for domain records in tests: valid defaults, any field overridden by keyword."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.domain.records import AgentState, PlanArtifact, TodoItem, WaitingIntent, WorkItem
from shared.domain.stored import AgentRecord

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
"""The fixed instant tests start from; later instants are `at(minutes=5)` and so on."""

AGENT_ID = "agent-1"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
"""The ULID alphabet (Crockford base32: no I, L, O, U)."""


def at(**delta: float) -> datetime:
    """T0 shifted by a timedelta's keywords: `at(seconds=30)`, `at(hours=-1)`."""
    return T0 + timedelta(**delta)


def ulid_body(n: int) -> str:
    """A valid 26-character ULID body that encodes `n`, so ids sort in the order of `n`."""
    chars = []
    for _ in range(26):
        n, digit = divmod(n, 32)
        chars.append(CROCKFORD[digit])
    return "".join(reversed(chars))


def work_item_id(n: int = 1) -> str:
    return "wi_" + ulid_body(n)


def wait_id(n: int = 1) -> str:
    return "wait_" + ulid_body(n)


def make_plan_artifact(
    *, agent_id: str = AGENT_ID, item_id: str | None = None, **overrides: Any
) -> PlanArtifact:
    relative = f"work-items/{item_id or work_item_id()}/plan.md"
    fields: dict[str, Any] = {
        "path": f"/home/longrun/{agent_id}/{relative}",
        "relative_path": relative,
        "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bytes": 0,
        "updated_at": T0,
        "preview": "",
        "preview_complete": True,
    }
    fields.update(overrides)
    return PlanArtifact.model_validate(fields)


def make_todo(text: str = "Write the tests", state: str = "pending") -> TodoItem:
    return TodoItem.model_validate({"text": text, "state": state})


def make_work_item(**overrides: Any) -> WorkItem:
    """An open, runnable WorkItem `work_item_id(1)` of `AGENT_ID`, created and updated at T0."""
    item_id = overrides.get("id", work_item_id())
    agent_id = overrides.get("agent_id", AGENT_ID)
    fields: dict[str, Any] = {
        "id": item_id,
        "agent_id": agent_id,
        "revision": 1,
        "objective": "Ship the release notes",
        "plan_artifact": make_plan_artifact(agent_id=agent_id, item_id=item_id),
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(overrides)
    return WorkItem.model_validate(fields)


def make_wait(**overrides: Any) -> WaitingIntent:
    """An active, untriggered `external` wait `wait_id(1)` on `work_item_id(1)`, made at T0."""
    fields: dict[str, Any] = {
        "id": wait_id(),
        "agent_id": AGENT_ID,
        "work_item_id": work_item_id(),
        "wake": "external",
        "reason": "Waiting for the build callback",
        "created_at": T0,
    }
    fields.update(overrides)
    return WaitingIntent.model_validate(fields)


def make_agent(**overrides: Any) -> AgentState:
    """A new, dormant, builtin-loop agent `AGENT_ID` with no current WorkItem."""
    fields: dict[str, Any] = {"agent_id": AGENT_ID}
    fields.update(overrides)
    return AgentState.model_validate(fields)


def make_agent_record(**overrides: Any) -> AgentRecord:
    """The ledger's record of `make_agent()` at version 1; `state` and any field overridable."""
    fields: dict[str, Any] = {
        "state": make_agent(),
        "version": 1,
        "agent_token_hash": "a" * 64,
        "callback_token_id": "cb_agent-1",
        "created_at": T0,
    }
    fields.update(overrides)
    return AgentRecord.model_validate(fields)
