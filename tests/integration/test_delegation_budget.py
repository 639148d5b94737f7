"""A builtin agent whose model delegates again after every result, against the real ledger,
scheduler and executor as processes: each result wakes it but spends its wake budget, so it
stops at its budget without fresh outside input; the result that arrives with the budget spent
is recorded (delegation succeeded, inbox message) but starts no turn, and the next operator
message wakes the agent again."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from shared.domain.delegation import DelegationStatus
from shared.domain.records import AgentLoop, MessageOrigin, Posture
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names

LEDGER = ("services.ledger", "LONGRUN_LEDGER_PORT")
SCHEDULER = ("services.scheduler", "LONGRUN_SCHEDULER_PORT")
EXECUTOR = ("services.turn_executor", "LONGRUN_EXECUTOR_PORT")
BUDGET = 3
WITHIN = 120.0
"""An upper bound on the run settling, not a latency assertion."""


def script(child: str, blocks: int) -> list[dict[str, Any]]:
    """Every turn: create a WorkItem, focus it, delegate it to `child` (which ends the turn)."""
    rounds: list[dict[str, Any]] = []
    for n in range(blocks):
        rounds += [
            {"tool_calls": [{"name": "CreateWorkItem", "arguments": {"objective": f"Part {n}"}}]},
            {"tool_calls": [{"name": "PickWorkItem", "arguments": {"work_item_id": "$CREATED"}}]},
            {
                "tool_calls": [
                    {
                        "name": "DelegateWorkItem",
                        "arguments": {
                            "to_agent": child,
                            "objective": f"Do part {n}",
                            "reason": "the child does the parts",
                        },
                    }
                ]
            },
        ]
    return rounds


async def settle(check: Any) -> Any:
    deadline = time.monotonic() + WITHIN
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, "did not settle in time"
        await asyncio.sleep(0.1)


def ensure(agent_id: str, loop: AgentLoop) -> c.EnsureAgent:
    return c.EnsureAgent(
        command_id=f"ensure-{agent_id}",
        agent_id=agent_id,
        loop=loop,
        agent_token_hash="a" * 64,
        callback_token_hash="b" * 64,
    )


async def test_delegating_after_every_result_stops_at_the_wake_budget(
    spawn: Any, redis: AnyRedis, names: Names, reads: ReadModel, tmp_path: Path
) -> None:
    parent, child = "boss", "helper"
    assert names.partition(parent) != names.partition(child)
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script(child, blocks=10)))
    budget = {"LONGRUN_MAX_WAKE_CYCLES": str(BUDGET)}
    procs = [
        spawn(*LEDGER, **budget),
        spawn(*SCHEDULER, **budget),
        spawn(*EXECUTOR, LONGRUN_SCRIPT_FILE=str(path)),
    ]
    for proc in procs:
        await proc.wait_ready()
    client = LedgerClient(redis, names, clock=utc_now, new_id=new_id, timeout=10.0)
    await client.start()
    try:
        await client.send(ensure(parent, AgentLoop.BUILTIN))
        await client.send(ensure(child, AgentLoop.EXTERNAL))
        await client.send(
            c.AppendOperatorMessage(
                command_id="start", agent_id=parent, message_id="m-start", text="Start"
            )
        )
        done = await complete_until_exhausted(client, reads, parent, child)
        # Every result after the first fresh turn woke one turn, spending one unit each; the
        # last result found the budget spent: recorded, and no turn.
        assert done == BUDGET + 1
        records = await reads.delegations(parent)
        assert [r.status for r in records] == [DelegationStatus.SUCCEEDED] * (BUDGET + 1)
        results = [m for m in await reads.inbox(parent) if m.origin is MessageOrigin.TASK_RESULT]
        assert [m.delegation_id for m in results] == [records[-1].id]
        state = await reads.agent_state(parent)
        assert state is not None
        assert state.posture is Posture.IDLE
        assert state.wake_budget.used == BUDGET
        turns = [e for e in await reads.history(parent, limit=1000) if e["type"] == "turn_started"]
        assert len(turns) == BUDGET + 1
        # Fresh input: the operator speaks, the budget resets and a turn runs (it delegates).
        await client.send(
            c.AppendOperatorMessage(
                command_id="again", agent_id=parent, message_id="m-again", text="Go on"
            )
        )

        async def fifth() -> bool:
            return len(await reads.delegations(parent)) == BUDGET + 2

        await settle(fifth)
    finally:
        await client.stop()


async def complete_until_exhausted(
    client: LedgerClient, reads: ReadModel, parent: str, child: str
) -> int:
    """Act as the child's own loop: complete each delegated WorkItem as it arrives, until the
    parent has recorded `wake_budget_exhausted`; returns how many were completed."""
    completed: set[str] = set()

    async def step() -> bool:
        for item in await reads.all_items(child):
            if item.is_open and item.id not in completed:
                await client.send(
                    c.CompleteWorkItem(
                        command_id=f"complete-{item.id}",
                        agent_id=child,
                        args={"work_item_id": item.id},  # type: ignore[arg-type]
                        report_text=f"did {item.objective}",
                    )
                )
                completed.add(item.id)
        history = await reads.history(parent, limit=1000)
        exhausted = any(e["type"] == "wake_budget_exhausted" for e in history)
        records = await reads.delegations(parent)
        return exhausted and all(not r.running for r in records)

    await settle(step)
    return len(completed)
