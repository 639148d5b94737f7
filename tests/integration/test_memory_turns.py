"""Memory across turns on a real Redis with the real ledger: the trace is the current WorkItem's
only, a completed item's is not projected, a failed compaction cuts the trace and the turn goes
on, the transcript is trimmed once covered while every entry keeps its seq, and a parked item's
rounds are compacted into its notes rather than pin the transcript."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.turn_executor.memory import MemorySettings
from services.turn_executor.providers import (
    ChatMessage,
    ModelFailure,
    ProviderConfig,
    ProviderRound,
    ToolCall,
    ToolSpec,
)
from shared.domain import memory as m
from shared.ledger_client import LedgerClient
from shared.runtime import new_id, utc_now
from shared.tool_gateway import ToolGateway
from shared.wire import commands as c
from tests.integration.test_executor_turns import (
    AGENT,
    ensure_agent,
    executor,
    owned_redis,  # noqa: F401
)
from tests.integration.test_memory_bench import ROUNDS_PER_TURN, levelled_off, live

pytestmark = pytest.mark.usefixtures("pump")


@dataclass
class Reader:
    """Reads the file named after the current WorkItem each turn, then says it did; fails
    every compaction call when told to."""

    files: dict[str, str] = field(default_factory=dict)
    """WorkItem id → the file its turns read."""
    fail_compaction: bool = False
    first_rounds: list[list[ChatMessage]] = field(default_factory=list)
    compactions: int = 0

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        if messages[0]["content"] in (m.COMPACTION_PROMPT, m.MERGE_PROMPT):
            self.compactions += 1
            if self.fail_compaction:
                raise ModelFailure("the compaction model is down", transient=False)
            return ProviderRound(text=m.extract(str(messages[1]["content"]), 500, _words))
        if any(message["role"] == "assistant" for message in messages):
            return ProviderRound(text="Read it.")
        self.first_rounds.append(list(messages))
        summary = str(messages[1]["content"])
        current = next(
            (line[4:] for line in summary.splitlines() if line.startswith("id: wi_")), None
        )
        path = self.files.get(current or "", "none.txt")
        call = ToolCall(id="c1", name="ReadFile", arguments=json.dumps({"path": path}))
        return ProviderRound(tool_calls=(call,), finish_reason="tool_calls")

    async def close(self) -> None:
        return None


def _words(text: str) -> int:
    return len(text.split())


def memory_of(prompt: list[ChatMessage]) -> tuple[str, str]:
    """The notes and the trace a first request showed ('' when none)."""
    texts = [str(msg["content"]) for msg in prompt if msg["role"] == "user"]
    notes = next((t for t in texts if t.startswith("## Process notes")), "")
    trace = next((t for t in texts if t.startswith("## Process trace")), "")
    return notes, trace


async def tools(client: LedgerClient, home: Path) -> ToolGateway:
    return ToolGateway(
        client,
        agent_home=home,
        callback_base_url="http://127.0.0.1:8080",
        clock=utc_now,
        new_id=new_id,
    )


async def create(gateway: ToolGateway, objective: str) -> str:
    args = {"objective": objective, "plan_status": "ready"}
    created = await gateway.call(AGENT, "CreateWorkItem", args, command_id=new_id("cmd_"))
    return str(created.result["work_item"]["id"])


async def pick(gateway: ToolGateway, item_id: str) -> None:
    args = {"work_item_id": item_id, "reason": "the test moves focus"}
    assert (
        await gateway.call(AGENT, "PickWorkItem", args, command_id=new_id("cmd_"))
    ).status == "success"


def write(home: Path, name: str, text: str) -> None:
    (home / AGENT).mkdir(parents=True, exist_ok=True)
    (home / AGENT / name).write_text(text)


async def test_the_trace_shows_only_the_current_work_items_rounds(
    redis, names, client, tmp_path
) -> None:
    home = tmp_path / "home"
    write(home, "a.txt", "alpha-secret lives in A")
    write(home, "b.txt", "bravo-secret lives in B")
    model = Reader()
    run = executor(redis, names, client, home, model)
    await ensure_agent(client)
    gateway = await tools(client, home)
    a, b = await create(gateway, "Work on A"), await create(gateway, "Work on B")
    model.files = {a: "a.txt", b: "b.txt"}
    await pick(gateway, a)
    await run.tick()
    await pick(gateway, b)
    await run.tick()
    await run.tick()
    _, trace_b = memory_of(model.first_rounds[-1])
    assert "bravo-secret" in trace_b
    assert "alpha-secret" not in trace_b
    await pick(gateway, a)
    await run.tick()
    _, trace_a = memory_of(model.first_rounds[-1])
    assert "alpha-secret" in trace_a
    assert "bravo-secret" not in trace_a
    complete = {"work_item_id": a}
    assert (
        await gateway.call(AGENT, "CompleteWorkItem", complete, command_id="done-a")
    ).status == "success"
    await pick(gateway, b)
    await run.tick()
    notes, trace = memory_of(model.first_rounds[-1])
    assert "alpha-secret" not in notes + trace
    assert "bravo-secret" in trace


async def test_a_failed_compaction_cuts_the_trace_says_so_and_the_turn_goes_on(
    redis, names, client, tmp_path
) -> None:
    home = tmp_path / "home"
    write(home, "big.txt", "\n".join(f"line {n} of a long file" for n in range(60)))
    model = Reader(fail_compaction=True)
    memory = MemorySettings(trace_tokens=400, notes_tokens=200)
    config = ProviderConfig(kind="openai", model="stub-model")  # not scripted: a real call
    run = executor(redis, names, client, home, model, memory=memory, config=config)
    await ensure_agent(client)
    gateway = await tools(client, home)
    item = await create(gateway, "Read the big file")
    model.files = {item: "big.txt"}
    await pick(gateway, item)
    outcomes = [await run.tick() for _ in range(6)]
    assert c.TurnOutcome.FAILED not in outcomes
    assert model.compactions > 0
    _, trace = memory_of(model.first_rounds[-1])
    assert "older rounds are not shown" in trace
    assert "compaction failed: the compaction model is down" in trace
    (stored,) = await run.reads.all_items(AGENT)
    assert stored.process_notes == ()


async def test_the_transcript_is_trimmed_once_covered_and_seq_survives(
    redis, names, client, tmp_path
) -> None:
    home = tmp_path / "home"
    write(home, "log.txt", "\n".join(f"entry {n}: fine" for n in range(40)))
    model = Reader()
    memory = MemorySettings(trace_tokens=300, notes_tokens=200, transcript_max_rounds=12)
    run = executor(redis, names, client, home, model, memory=memory)
    await ensure_agent(client)
    gateway = await tools(client, home)
    item = await create(gateway, "Read the log again and again")
    model.files = {item: "log.txt"}
    await pick(gateway, item)
    for _ in range(30):
        await run.tick()
    rounds = await run.reads.transcript_rounds(AGENT)
    assert rounds <= 12 + 3  # one turn's rounds may be recorded past the bound
    entries, _ = await run.reads.transcript_page(AGENT, after=0, limit=1000)
    seqs = [e["seq"] for e in entries]
    assert seqs[0] > 1
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    later, _ = await run.reads.transcript_page(AGENT, after=seqs[2], limit=2)
    assert [e["seq"] for e in later] == seqs[3:5]
    events = [e["type"] for e in await run.reads.history(AGENT, limit=1000)]
    assert "transcript_trimmed" in events
    assert "work_item_compacted" in events


async def test_a_parked_item_does_not_pin_the_transcript_and_keeps_its_facts(
    redis, names, client, tmp_path
) -> None:
    """One WorkItem reads a file and is parked on a wait; another runs 30 turns. The transcript
    stays within its bound (the parked item's rounds at its head are compacted into that item's
    notes, then trimmed) and the parked item's facts come back in its notes when it resumes."""
    home = tmp_path / "home"
    write(home, "quote.txt", "supplier quote: 4411 units at 7.20 EUR, valid until Friday")
    write(home, "log.txt", "\n".join(f"entry {n}: fine" for n in range(40)))
    model = Reader()
    memory = MemorySettings(trace_tokens=300, notes_tokens=200, transcript_max_rounds=12)
    run = executor(redis, names, client, home, model, memory=memory)
    await ensure_agent(client)
    gateway = await tools(client, home)
    parked = await create(gateway, "Order from the supplier")
    worker = await create(gateway, "Read the log again and again")
    model.files = {parked: "quote.txt", worker: "log.txt"}
    await pick(gateway, parked)
    await run.tick()
    wait = {"reason": "the supplier's callback", "wake": "external", "work_item_id": parked}
    assert (await gateway.call(AGENT, "WaitFor", wait, command_id="park")).status == "success"
    await pick(gateway, worker)
    for _ in range(30):
        await run.tick()
    assert await run.reads.transcript_rounds(AGENT) <= 12 + 3
    (stored,) = await run.reads.items(AGENT, [parked])
    assert stored.is_open
    assert any("4411 units at 7.20 EUR" in note.text for note in stored.process_notes)
    kept, _ = await run.reads.transcript_page(AGENT, after=0, limit=1000)
    assert not any("4411 units" in entry["content"] for entry in kept)  # trimmed from the head
    await pick(gateway, parked)  # the wait is over: the item is current again
    await run.tick()
    notes, _ = memory_of(model.first_rounds[-1])
    assert notes.startswith(f"## Process notes of {parked}")
    assert "4411 units at 7.20 EUR" in notes


async def test_the_transcript_memory_levels_off_over_a_long_life(
    redis, names, client, tmp_path
) -> None:
    """The 5,000-round benchmark in small: 800 rounds (ten a turn) with the bound at 100 rounds;
    Redis MEMORY USAGE of the transcript grows until the bound, then stays level."""
    memory = MemorySettings(transcript_max_rounds=100)
    rows = await live(redis, names, client, tmp_path, rounds=800, memory=memory, every=50)
    print("\nrounds  kept  transcript    items  history")
    for row in rows:
        print("{:6d} {:5d} {:11d} {:8d} {:8d}".format(*row))
    assert levelled_off(rows, after=300)
    assert max(kept for _, kept, _, _, _ in rows) <= 100 + ROUNDS_PER_TURN + 1
    assert rows[-1][2] < 2 * rows[0][2]  # 16 times the rounds of the first sample
    assert rows[-1][4] > 8 * rows[0][4]  # the history, kept whole by design, grows
