"""The agent's spec in its turns, on a real Redis with the real ledger: the instructions reach the
model after longrun's guide, the system prompt and tool list are byte-identical across the turns
of one spec version, a spec change lands at the next turn, and the spec's round cap holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from services.turn_executor.prompt import INSTRUCTIONS_HEADING
from services.turn_executor.providers import ChatMessage, Provider, ProviderRound, ToolSpec
from services.turn_executor.providers.scripted import ScriptedProvider
from shared.domain.delegation import DelegatedFrom, ReviewOf
from shared.domain.specs import AgentSpec
from shared.ledger_client import LedgerClient
from shared.wire import commands as c
from tests.builders import make_plan_artifact
from tests.integration.test_executor_turns import (
    AGENT,
    REQUEST,
    executor,
    home,
    owned_redis,
    say,
    script,
    token_hash,
)

__all__ = ["home", "owned_redis"]  # fixtures shared with the turns tests

FRENCH = "Always write your reports in French."


@dataclass
class Prompts:
    """Wraps a provider and keeps each round's system prompt and tool list as sent."""

    inner: Provider
    rounds: list[tuple[str, bytes]] = field(default_factory=list)

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        system = next(str(m["content"]) for m in messages if m["role"] == "system")
        self.rounds.append((system, orjson.dumps(list(tools))))
        return await self.inner.complete(messages, tools)

    async def close(self) -> None:
        await self.inner.close()


async def put_spec(client: LedgerClient, spec: dict[str, Any], command_id: str) -> dict[str, Any]:
    ensure = c.EnsureAgent(
        command_id=command_id,
        agent_id=AGENT,
        spec=AgentSpec.model_validate(spec),
        agent_token_hash=token_hash(f"agent-{AGENT}"),
        callback_token_hash=token_hash(f"callback-{AGENT}"),
    )
    reply = await client.send(ensure)
    assert reply.error is None
    assert reply.result is not None
    return reply.result


async def test_instructions_follow_the_guide_and_the_prefix_is_stable_across_turns(
    pump, redis, names, client, home
) -> None:
    scripted = ScriptedProvider()
    prompts = Prompts(scripted)
    run = executor(redis, names, client, home, prompts)
    await put_spec(client, {"instructions": FRENCH}, "spec-1")
    await say(client, REQUEST)
    await run.tick("input")
    first_turn = len(prompts.rounds)
    await run.tick()
    assert len(prompts.rounds) > first_turn
    (system, tools), *rest = prompts.rounds
    assert all(other == (system, tools) for other in rest)
    assert system.endswith(f"{INSTRUCTIONS_HEADING}\n{FRENCH}\n")
    assert system.index("# Your job") > system.index("## CreateWorkItem")
    assert scripted.last_system_prompt == system


async def test_a_spec_change_lands_at_the_next_turn(pump, redis, names, client, home) -> None:
    prompts = Prompts(ScriptedProvider())
    run = executor(redis, names, client, home, prompts)
    await put_spec(client, {"instructions": FRENCH}, "spec-1")
    await say(client, REQUEST)
    await run.tick("input")
    before = prompts.rounds[-1]
    changed = await put_spec(client, {"instructions": "Write in German."}, "spec-2")
    assert changed["spec_version"] == 2
    asked = len(prompts.rounds)
    await run.tick()
    after = prompts.rounds[asked]
    assert after[1] == before[1]
    assert after[0].endswith("\nWrite in German.\n")
    assert FRENCH not in after[0]
    assert before[0].removesuffix(f"{FRENCH}\n") == after[0].removesuffix("Write in German.\n")


async def test_the_specs_round_cap_ends_a_busy_turn(pump, redis, names, client, home) -> None:
    busy = {"text": "Looking.", "tool_calls": [{"name": "ListWorkItems", "arguments": {}}]}
    prompts = Prompts(script(*[busy] * 6))
    run = executor(redis, names, client, home, prompts, max_rounds=24)
    await put_spec(client, {"limits": {"max_rounds_per_turn": 2}}, "spec-1")
    assert await run.tick() is c.TurnOutcome.YIELDED
    assert len(prompts.rounds) == 2


async def test_the_executor_ceiling_caps_a_generous_spec(pump, redis, names, client, home) -> None:
    busy = {"text": "Looking.", "tool_calls": [{"name": "ListWorkItems", "arguments": {}}]}
    prompts = Prompts(script(*[busy] * 6))
    run = executor(redis, names, client, home, prompts, max_rounds=3)
    await put_spec(client, {"limits": {"max_rounds_per_turn": 50}}, "spec-1")
    assert await run.tick() is c.TurnOutcome.YIELDED
    assert len(prompts.rounds) == 3


async def test_the_transcript_pages_by_seq_and_filters_by_work_item(
    pump, redis, names, client, home
) -> None:
    run = executor(redis, names, client, home, ScriptedProvider())
    await put_spec(client, {}, "spec-1")
    await say(client, REQUEST)
    await run.tick("input")
    everything = await run.reads.transcript(AGENT)
    assert len(everything) > 3
    first, after = await run.reads.transcript_page(AGENT, after=0, limit=2)
    rest, end = await run.reads.transcript_page(AGENT, after=after, limit=1000)
    assert [e["seq"] for e in first + rest] == list(range(1, len(everything) + 1))
    assert [{k: v for k, v in e.items() if k != "seq"} for e in first + rest] == everything
    assert (after, end) == (2, len(everything))
    assert await run.reads.transcript_page(AGENT, after=end, limit=10) == ([], end)
    (item,) = await run.reads.all_items(AGENT)
    bound, _ = await run.reads.transcript_page(AGENT, after=0, limit=1000, work_item_id=item.id)
    assert bound
    assert [e["seq"] for e in bound] == [
        i + 1 for i, e in enumerate(everything) if e["work_item_id"] == item.id
    ]


AUTHORS_ITEM = "wi_01JA0TH0RA0TH0RA0TH0RA0THX"


async def _review_item_arrives(client: LedgerClient, home: Path) -> str:
    """What a `reviewer_agent` check of agent `author` delivers to AGENT: a review item."""
    review = "wi_01JREV1EWREV1EWREV1EWREV1E"
    plan = make_plan_artifact(agent_id=AGENT, item_id=review)
    create = c.CreateDelegatedWorkItem(
        command_id="dlg_01JREV1EWREV1EWREV1EWREV1E:create",
        agent_id=AGENT,
        work_item_id=review,
        plan_artifact=plan.model_copy(update={"path": str(home / AGENT / plan.relative_path)}),
        objective="Review WorkItem wi_x of agent author (attempt 1)",
        delegated_from=DelegatedFrom(
            delegation_id="dlg_01JREV1EWREV1EWREV1EWREV1E",
            agent_id="author",
            work_item_id=AUTHORS_ITEM,
            reason="Review this report and call SubmitVerdict with passed and a reason.",
            chain=("author",),
            review_of=ReviewOf(work_item_id=AUTHORS_ITEM, attempt=1, check_index=0),
        ),
    )
    assert (await client.send(create)).error is None
    return review


def _offered(prompts: Prompts, index: int) -> tuple[bool, bool]:
    """Whether round `index` offered SubmitVerdict in its tool list and in its system prompt."""
    system, tools = prompts.rounds[index]
    names = [tool["function"]["name"] for tool in orjson.loads(tools)]
    return "SubmitVerdict" in names, "## SubmitVerdict" in system


async def test_submit_verdict_is_offered_only_while_the_agent_holds_a_review_item(
    pump, redis, names, client, home
) -> None:
    verdict = {"work_item_id": "wi_01JREV1EWREV1EWREV1EWREV1E", "passed": True, "reason": "ok"}
    prompts = Prompts(
        script(
            {"text": "Nothing to do yet."},
            {"text": "Right.", "tool_calls": [{"name": "SubmitVerdict", "arguments": verdict}]},
            {"text": "Nothing left."},
        )
    )
    run = executor(redis, names, client, home, prompts)
    await put_spec(client, {}, "spec-1")
    await say(client, "Stand by for reviews.")
    await run.tick("input")
    assert _offered(prompts, 0) == (False, False)
    review = await _review_item_arrives(client, home)
    assert await run.tick("input") is c.TurnOutcome.COMPLETED
    assert _offered(prompts, 1) == (True, True)
    (item,) = [i for i in await run.reads.all_items(AGENT) if i.id == review]
    assert item.outcome == "done"
    await say(client, "Anything else?")
    await run.tick("input")
    assert _offered(prompts, 2) == (False, False)
