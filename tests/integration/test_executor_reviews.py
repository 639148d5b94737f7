"""A builtin reviewer on a real Redis with the real ledger: another agent's gated WorkItem
delegates a review item to it, its turn is offered SubmitVerdict and the scripted model passes
the report, and the reviewed item completes as done, decided by the reviewer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from services.turn_executor.providers.scripted import ScriptedProvider
from shared.domain.records import WorkItemOutcome
from shared.ledger_client import LedgerClient
from shared.runtime import new_id
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from tests.builders import make_plan_artifact
from tests.integration.test_executor_specs import Prompts
from tests.integration.test_executor_turns import AGENT, ensure_agent, executor, home, owned_redis

__all__ = ["home", "owned_redis"]  # fixtures shared with the turns tests

WRITER = "writer-1"


async def _gated_item_completed(client: LedgerClient, home: Path) -> str:
    wid = new_id("wi_")
    plan = make_plan_artifact(agent_id=WRITER, item_id=wid)
    create = c.CreateWorkItem.model_validate(
        {
            "command_id": f"create-{wid}",
            "agent_id": WRITER,
            "args": {
                "objective": "Write the release note",
                "acceptance": [{"kind": "reviewer_agent", "agent_id": AGENT}],
            },
            "work_item_id": wid,
            "plan_artifact": plan.model_copy(
                update={"path": str(home / WRITER / plan.relative_path)}
            ),
        }
    )
    complete = c.CompleteWorkItem.model_validate(
        {
            "command_id": f"complete-{wid}",
            "agent_id": WRITER,
            "args": {"work_item_id": wid},
            "report_text": "Release 1.2: the ledger is faster.",
        }
    )
    for reply in await client.send_all([create, complete]):
        assert reply.error is None, reply.error
    return wid


async def _review_item(reads: ReadModel) -> str:
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        items = [i for i in await reads.all_items(AGENT) if i.is_open_review]
        if items:
            return items[0].id
        await asyncio.sleep(0.05)
    raise AssertionError("no review item arrived")


async def test_a_builtin_reviewer_passes_the_report_with_submit_verdict(
    pump, redis, names, client, home
) -> None:
    prompts = Prompts(ScriptedProvider())
    run = executor(redis, names, client, home, prompts)
    await ensure_agent(client)
    await ensure_agent(client, WRITER)
    wid = await _gated_item_completed(client, home)
    review = await _review_item(run.reads)
    outcomes = [await run.tick("input")]
    while len(outcomes) < 5 and outcomes[-1] != c.TurnOutcome.COMPLETED:
        outcomes.append(await run.tick())
    assert outcomes[-1] == c.TurnOutcome.COMPLETED, outcomes
    (item,) = [i for i in await run.reads.all_items(AGENT) if i.id == review]
    assert item.result_summary == "passed: The report answers the objective."
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        (reviewed,) = await run.reads.all_items(WRITER)
        if reviewed.outcome is WorkItemOutcome.DONE:
            break
        await asyncio.sleep(0.05)
    assert reviewed.outcome is WorkItemOutcome.DONE
    assert reviewed.result_summary == "Release 1.2: the ledger is faster."
    assert reviewed.verification is not None
    assert [ch.decided_by for ch in reviewed.verification.checks] == ["reviewer"]
    assert wid == reviewed.id
