"""Memory within one long turn: the openai provider against a local chat-completions server that
plays the model and counts every request's tokens itself. One turn reads a fact in its first
round and then a large log per round for 30 rounds: its oldest rounds are compacted into a
process note between rounds, so no request exceeds the context window less the answer's room
(without it the turn fails on the context guard), the fact stays in the request's notes, and the
next turn starts from the notes and from the rounds of the long turn that no note covers yet."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from services.turn_executor.memory import MemorySettings
from services.turn_executor.providers import ProviderConfig
from shared.domain import memory as m
from shared.domain.specs import AgentSpec
from shared.domain.tools import GetWorkItemInput
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.tool_gateway import ToolGateway
from shared.wire import commands as c
from tests.integration.test_executor_turns import (
    AGENT,
    executor,
    owned_redis,  # noqa: F401
    token_hash,
)
from tests.integration.test_memory_life import AnsweringModel, count, tokens_of
from tests.unit.test_provider_openai import completion, function_call, serving

ROUNDS = 30
FACT = "The vault code is 7319-ALPHA."
CONTEXT_WINDOW = 14_000
"""Room for the system prompt and the tool list (about 7,000 tokens with every tool on) and a
few rounds: thirty rounds of logs do not fit without compaction between rounds."""
MAX_OUTPUT = 1_000
LIMIT = CONTEXT_WINDOW - MAX_OUTPUT


@dataclass
class LongTurnModel(AnsweringModel):
    """Turn 1: read the facts, then one log per round, then say it is done. Turn 2: answer at
    once. A compaction call gets the deterministic extract."""

    base_url: str = ""
    turn: int = 0
    round: int = 0
    sizes: list[int] = field(default_factory=list)
    systems: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    """`compaction` or `turn N round R`, in the order the requests came."""
    requests: list[list[dict[str, Any]]] = field(default_factory=list)
    fail_compaction: bool = False
    """Answer compaction calls with no text (a failed compaction)."""

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sizes.append(tokens_of(request))
        messages = request["messages"]
        if messages[0]["content"] in (m.COMPACTION_PROMPT, m.MERGE_PROMPT):
            self.calls.append("compaction")
            if self.fail_compaction:
                return completion("")
            return completion(m.extract(messages[1]["content"], 1000, count))
        self.systems.add(messages[0]["content"])
        if not any(msg["role"] in ("assistant", "tool") for msg in messages) and not any(
            "of this turn are" in str(msg.get("content")) for msg in messages
        ):
            self.turn, self.round = self.turn + 1, 0
        self.round += 1
        self.calls.append(f"turn {self.turn} round {self.round}")
        self.requests.append(messages)
        if self.turn > 1 or self.round > ROUNDS:
            return completion("Done reading.")
        path = "facts.txt" if self.round == 1 else f"logs/log-{self.round}.txt"
        call = function_call(f"call_{self.round}", "ReadFile", json.dumps({"path": path}))
        return completion("", [call], "tool_calls")


def write_files(home: Path) -> None:
    agent_home = home / AGENT
    (agent_home / "logs").mkdir(parents=True)
    (agent_home / "facts.txt").write_text(FACT + "\n")
    for n in range(2, ROUNDS + 1):
        lines = [
            f"log {n} entry {i}: batch {n * 31 + i} checked, {i * 7 % 13} warnings"
            for i in range(40)
        ]
        (agent_home / "logs" / f"log-{n}.txt").write_text("\n".join(lines) + "\n")


async def start_item(client: LedgerClient, home: Path) -> str:
    spec = AgentSpec.model_validate(
        {
            "model": {
                "provider": "openai",
                "name": "gpt-4",
                "max_output_tokens": MAX_OUTPUT,
                "context_window": CONTEXT_WINDOW,
            },
            "limits": {"max_rounds_per_turn": ROUNDS + 5},
        }
    )
    ensure = c.EnsureAgent(
        command_id="ensure-long-turn",
        agent_id=AGENT,
        spec=spec,
        agent_token_hash=token_hash(f"agent-{AGENT}"),
        callback_token_hash=token_hash(f"callback-{AGENT}"),
    )
    assert (await client.send(ensure)).error is None
    gateway = ToolGateway(
        client,
        agent_home=home,
        callback_base_url="http://127.0.0.1:8080",
        clock=utc_now,
        new_id=new_id,
    )
    args = {"objective": "Audit the vault logs", "plan_status": "ready"}
    created = await gateway.call(AGENT, "CreateWorkItem", args, command_id="create-long")
    item_id = created.result["work_item"]["id"]
    picked = await gateway.call(AGENT, "PickWorkItem", {"work_item_id": item_id}, command_id="pick")
    assert picked.status == "success"
    return str(item_id)


def memory_texts(messages: list[dict[str, Any]]) -> tuple[str, str]:
    texts = [str(msg.get("content")) for msg in messages if msg["role"] == "user"]
    notes = next((t for t in texts if t.startswith("## Process notes")), "")
    trace = next((t for t in texts if t.startswith("## Process trace")), "")
    return notes, trace


@pytest.mark.usefixtures("pump")
async def test_a_long_turn_compacts_between_rounds_and_stays_within_budget(
    redis, names, client, tmp_path
) -> None:
    home = tmp_path / "home"
    write_files(home)
    model = LongTurnModel()
    item_id = await start_item(client, home)
    async with serving(model):
        config = ProviderConfig(
            kind="openai", base_url=model.base_url, model="gpt-4", max_retries=0
        )
        run = executor(
            redis, names, client, home, None, config=config, memory=MemorySettings(), max_rounds=100
        )
        first = await run.tick("continue_current")
        second = await run.tick("continue_current")
        await run.service.models.close()

    assert first is not c.TurnOutcome.FAILED, first
    assert second is not c.TurnOutcome.FAILED, second
    turn_one = [call for call in model.calls if call.startswith("turn 1 ")]
    assert len(turn_one) == ROUNDS + 1, model.calls
    # Compaction happened between rounds of the first turn, not only when a turn opened.
    inside = model.calls[model.calls.index("turn 1 round 2") : model.calls.index(turn_one[-1])]
    assert "compaction" in inside
    assert max(model.sizes) <= LIMIT, (max(model.sizes), LIMIT)
    assert len(model.systems) == 1
    last_of_turn_one = model.requests[len(turn_one) - 1]
    notes, _ = memory_texts(last_of_turn_one)
    assert FACT in notes
    # The turn's newest rounds are still there as they were.
    assert f"log {ROUNDS} entry 39" in json.dumps(last_of_turn_one)

    # The next turn starts from the notes and the long turn's rounds no note covers.
    notes, trace = memory_texts(model.requests[-1])
    assert FACT in notes
    assert f"log {ROUNDS} entry 39" in trace
    assert "log 2 entry 0:" not in trace
    shown = await run.reads.get_work_item(
        AGENT, GetWorkItemInput(work_item_id=item_id, include_process_notes=True)
    )
    covers = shown["work_item"]["process_notes"][-1]["covers"]
    assert covers["to_round"] is not None
    assert covers["to_round"] < ROUNDS
    print(
        f"\nlong turn: {ROUNDS} rounds, requests {len(model.sizes)}, largest {max(model.sizes)} "
        f"tokens (limit {LIMIT}), compaction calls {model.calls.count('compaction')}"
    )


@pytest.mark.usefixtures("pump")
async def test_a_failed_compaction_between_rounds_cuts_the_oldest_rounds_and_the_turn_goes_on(
    redis, names, client, tmp_path
) -> None:
    home = tmp_path / "home"
    write_files(home)
    model = LongTurnModel(fail_compaction=True)
    item_id = await start_item(client, home)
    async with serving(model):
        config = ProviderConfig(
            kind="openai", base_url=model.base_url, model="gpt-4", max_retries=0
        )
        run = executor(
            redis, names, client, home, None, config=config, memory=MemorySettings(), max_rounds=100
        )
        outcome = await run.tick("continue_current")
        await run.service.models.close()

    assert outcome is not c.TurnOutcome.FAILED, outcome
    assert "compaction" in model.calls
    assert max(model.sizes) <= LIMIT, (max(model.sizes), LIMIT)
    last = json.dumps(model.requests[-1])
    assert "are not shown: they outgrew the trace budget and compaction failed" in last
    assert f"log {ROUNDS} entry 39" in last
    shown = await run.reads.get_work_item(
        AGENT, GetWorkItemInput(work_item_id=item_id, include_process_notes=True)
    )
    assert shown["work_item"]["process_notes"] == []
