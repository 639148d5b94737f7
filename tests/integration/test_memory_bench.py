"""Memory across turns, measured (by hand: `python -m pytest tests/integration/test_memory_bench.py
-m bench -s`; figures in docs/benchmarks.md). Here beside the integration fixtures it uses; the
`bench` marker keeps it out of the default run.

- An agent lives 5,000 rounds on one WorkItem (ten rounds a turn, each reading a file) with the
  default budgets and LONGRUN_TRANSCRIPT_MAX_ROUNDS at its default 2000: Redis MEMORY USAGE of the
  transcript levels off once the bound is reached (covered rounds are trimmed), while the
  history, a hash chain kept whole by design, grows with every turn.
- Opening a turn's prompt as the trace grows (10, 100, 1,000 recorded rounds of the current
  WorkItem, none yet compacted): the time and tokens of today's projection (summary, inbox)
  against the projection with the notes and trace, in the same run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from services.turn_executor.memory import READ_FACTOR, MemorySettings, Recall
from services.turn_executor.projection import project_turn
from services.turn_executor.providers import ChatMessage, ProviderRound, ToolCall, ToolSpec
from services.turn_executor.tokens import TokenCounter
from shared.domain import memory as m
from shared.runtime import new_id, utc_now
from shared.tool_gateway import ToolGateway
from tests.integration.test_executor_turns import AGENT, ensure_agent, executor

pytestmark = [pytest.mark.bench, pytest.mark.usefixtures("pump")]

ROUNDS = 5_000
ROUNDS_PER_TURN = 10
SAMPLE_EVERY = 250


@dataclass
class Worker:
    """Nine file reads a turn, then a word: ten rounds (counted here: a compaction between
    rounds takes the turn's oldest rounds out of the request)."""

    done: int = 0

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        if not any(message["role"] == "assistant" for message in messages) and not any(
            "of this turn are" in str(message["content"]) for message in messages
        ):
            self.done = 0  # a new turn
        done, self.done = self.done, self.done + 1
        if done >= ROUNDS_PER_TURN - 1:
            return ProviderRound(text="Read them; more next turn.")
        path = f"logs/log-{done % 7}.txt"
        call = ToolCall(id=f"c{done}", name="ReadFile", arguments=json.dumps({"path": path}))
        return ProviderRound(
            text=f"Reading {path}.", tool_calls=(call,), finish_reason="tool_calls"
        )

    async def close(self) -> None:
        return None


async def _usage(redis: Any, key: str) -> int:
    return int(await redis.memory_usage(key, samples=0) or 0)


Row = tuple[int, int, int, int, int]
"""rounds lived, rounds the transcript keeps, MEMORY USAGE of transcript, items, history."""


async def live(
    redis: Any,
    names: Any,
    client: Any,
    tmp_path: Any,
    *,
    rounds: int,
    memory: MemorySettings,
    every: int = SAMPLE_EVERY,
) -> list[Row]:
    """One agent lives `rounds` rounds on one WorkItem; MEMORY USAGE sampled every `every`
    rounds."""
    home = tmp_path / "home"
    logs = home / AGENT / "logs"
    logs.mkdir(parents=True)
    for n in range(7):
        logs.joinpath(f"log-{n}.txt").write_text(
            "\n".join(f"log {n} entry {i}: batch {i * 13 + n} checked" for i in range(30))
        )
    run = executor(redis, names, client, home, Worker(), memory=memory, ttl_ms=10_000)
    await ensure_agent(client)
    gateway = ToolGateway(
        client,
        agent_home=home,
        callback_base_url="http://127.0.0.1:8080",
        clock=utc_now,
        new_id=new_id,
    )
    created = await gateway.call(
        AGENT,
        "CreateWorkItem",
        {"objective": "Read the logs", "plan_status": "ready"},
        command_id="create",
    )
    item = created.result["work_item"]["id"]
    await gateway.call(AGENT, "PickWorkItem", {"work_item_id": item}, command_id="pick")
    rows = []
    for turn in range(1, rounds // ROUNDS_PER_TURN + 1):
        await run.tick()
        if turn * ROUNDS_PER_TURN % every == 0:
            transcript = await _usage(redis, names.transcript(AGENT))
            items = await _usage(redis, names.items(AGENT))
            history = await _usage(redis, names.history(AGENT))
            kept = await run.reads.transcript_rounds(AGENT)
            rows.append((turn * ROUNDS_PER_TURN, kept, transcript, items, history))
    return rows


def levelled_off(rows: list[Row], *, after: int) -> bool:
    """The transcript's MEMORY USAGE stays within a quarter once `after` rounds were lived."""
    late = [transcript for lived, _, transcript, _, _ in rows if lived >= after]
    return len(late) >= 2 and max(late) < 1.25 * min(late)


@pytest.mark.timeout(3600)
async def test_bench_transcript_memory_levels_off_over_5000_rounds(
    redis, names, client, tmp_path
) -> None:
    started = time.perf_counter()
    rows = await live(redis, names, client, tmp_path, rounds=ROUNDS, memory=MemorySettings())
    seconds = time.perf_counter() - started
    print(f"\n{ROUNDS} rounds in {seconds:.0f} s; MEMORY USAGE in bytes")
    print("rounds  kept  transcript    items  history")
    for row in rows:
        print("{:6d} {:5d} {:11d} {:8d} {:8d}".format(*row))
    assert levelled_off(rows, after=2500)
    assert rows[-1][1] <= 2000 + ROUNDS_PER_TURN


def _entries(turns: int, work_item_id: str) -> list[bytes]:
    docs = []
    for t in range(turns):
        turn_id = f"turn_01J{t:023d}"
        for kind, content in (
            ("assistant", f"Reading log {t}."),
            ("call", json.dumps({"path": f"logs/log-{t}.txt"})),
            ("tool", json.dumps({"status": "success", "result": {"content": f"log {t} " * 60}})),
        ):
            role = "assistant" if kind != "tool" else "tool"
            tool = None if kind == "assistant" else "ReadFile"
            docs.append(
                orjson.dumps(
                    {
                        "turn_id": turn_id,
                        "work_item_id": work_item_id,
                        "role": role,
                        "content": content,
                        "round": 1,
                        "tool_name": tool,
                    }
                )
            )
    return docs


async def test_bench_projection_as_the_trace_grows(redis, names, reads, client, tmp_path) -> None:
    """Seeded straight into the transcript list (a bench fixture, not a ledger write)."""
    counter = TokenCounter("openai", "gpt-4")
    budget = MemorySettings().trace_tokens
    await ensure_agent(client)
    gateway = ToolGateway(
        client,
        agent_home=tmp_path / "home",
        callback_base_url="http://127.0.0.1:8080",
        clock=utc_now,
        new_id=new_id,
    )
    created = await gateway.call(
        AGENT,
        "CreateWorkItem",
        {"objective": "Read the logs", "plan_status": "ready"},
        command_id="create",
    )
    item_id = created.result["work_item"]["id"]
    await gateway.call(AGENT, "PickWorkItem", {"work_item_id": item_id}, command_id="pick")
    record = await reads.agent_record(AGENT)
    items = await reads.all_items(AGENT)
    print("\nrounds  today ms  tokens  with-trace ms  tokens  rounds shown")
    for size in (10, 100, 1000):
        key = names.transcript(AGENT)
        await redis.delete(key)
        await redis.rpush(key, *_entries(size, item_id))
        today, traced = [], []
        for _ in range(20):
            t0 = time.perf_counter()
            base = project_turn(record.state, items, [], [], utc_now())
            t1 = time.perf_counter()
            entries, _ = await reads.work_item_rounds(
                AGENT, item_id, covered=None, max_chars=budget * READ_FACTOR
            )
            rounds = m.trace_rounds(entries, max_entry_chars=budget * 2)
            shown = m.newest_within(rounds, budget, counter.count)
            recall = Recall(work_item_id=item_id, rounds=shown)
            memory = [t for t in (recall.notes_text(), recall.trace_text()) if t]
            full = project_turn(record.state, items, [], [], utc_now(), memory=memory)
            t2 = time.perf_counter()
            today.append(t1 - t0)
            traced.append(t2 - t1)
        print(
            f"{size:6d} {statistics.median(today) * 1000:9.2f} {counter.request(base):7d} "
            f"{statistics.median(traced) * 1000:14.2f} {counter.request(full):7d} {len(shown):6d}"
        )
        assert counter.request(full) <= counter.request(base) + budget + 200
