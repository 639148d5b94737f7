"""Turns on a real Redis with the real ledger (in process): the turn protocol of docs/streams.md,
rounds and tool calls, promotion, plan refresh, transcripts, failures, crashes and fencing."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from services.ledger.handlers import decode_command
from services.turn_executor.app import executor_redis
from services.turn_executor.handlers import TickConsumer
from services.turn_executor.lease import Leases
from services.turn_executor.memory import MemorySettings
from services.turn_executor.model_calls import ModelCaller
from services.turn_executor.models import Models
from services.turn_executor.providers import (
    ChatMessage,
    Provider,
    ProviderConfig,
    ProviderRound,
    ToolCall,
    ToolSpec,
)
from services.turn_executor.providers.script_file import ScriptFileProvider, ScriptRound
from services.turn_executor.providers.scripted import ScriptedProvider
from services.turn_executor.rounds import ToolRunner
from services.turn_executor.service import (
    DEFAULT_MEMORY,
    DEFAULT_OUTAGE_BACKOFF,
    TurnConfig,
    TurnService,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.model_failures import OutageBackoff, RetryPolicy
from shared.ledger_client import LedgerClient
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.functions import load_functions
from shared.store.readmodel import ReadModel
from shared.streams import ensure_groups
from shared.tool_gateway import ToolGateway
from shared.wire import commands as c
from shared.wire.codec import Envelope, encode
from shared.wire.names import Group, Names
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick
from tests.integration.conftest import Pump, watch_writes

AGENT = "agent-1"
REQUEST = (
    "Draft the release notes. Check every link, then wait for the approval callback. "
    "Then publish them."
)
_ticks = itertools.count(1)


def token_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(name="redis")
async def owned_redis(redis_url: str) -> AsyncIterator[AnyRedis]:
    """This module's client owns its pool, so closing it closes every connection (the shared
    fixture's client does not: its pool outlives it, and filterwarnings=error turns the
    unclosed sockets into failures of whichever test the collector happens to run in)."""
    client = executor_redis(redis_url, 100)  # room for a driver's bursts of parallel reads
    await load_functions(client)
    yield client
    await client.aclose()


@dataclass
class Recording:
    """Wraps a provider and keeps every conversation it was asked to continue."""

    inner: Provider
    asked: list[list[dict[str, Any]]] = field(default_factory=list)

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        self.asked.append([dict(m) for m in messages])
        return await self.inner.complete(messages, tools)

    async def close(self) -> None:
        await self.inner.close()


FAST_RETRIES = RetryPolicy(max_retries=6, base_s=0.01, cap_s=0.05)
"""Retries that take milliseconds, so tests of model failures run in seconds."""


def serving(provider: Provider | None, config: ProviderConfig | None = None) -> Models:
    """Models that serve every agent with `provider` (labelled by `config`, scripted if none)."""
    default = config or ProviderConfig(kind="scripted", model="scripted")
    models = Models(default, {default.kind: default})
    if provider is not None:
        models.seed(provider)
    return models


@dataclass
class Executor:
    service: TurnService
    registry: CollectorRegistry
    reads: ReadModel
    client: LedgerClient
    leases: Leases

    async def tick(
        self, kind: str = "continue_current", agent: str = AGENT
    ) -> c.TurnOutcome | None:
        tick = Tick(tick_id=f"tick-{next(_ticks)}", agent_id=agent, kind=kind, issued_at=utc_now())
        return (await self.service.run(tick)).outcome

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def executor(
    redis: AnyRedis,
    names: Names,
    client: LedgerClient,
    home: Path,
    provider: Provider | None,
    *,
    max_rounds: int = 24,
    ttl_ms: int = 2000,
    config: ProviderConfig | None = None,
    models: Models | None = None,
    retry: RetryPolicy = FAST_RETRIES,
    backoff: OutageBackoff = DEFAULT_OUTAGE_BACKOFF,
    memory: MemorySettings = DEFAULT_MEMORY,
) -> Executor:
    """A turn service on the real ledger. `provider` serves every agent (labelled by `config`),
    unless `models` chooses per agent."""
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    gateway = ToolGateway(
        client,
        agent_home=home,
        callback_base_url="http://127.0.0.1:8080",
        clock=utc_now,
        new_id=new_id,
    )
    runner = ToolRunner(
        client=client, gateway=gateway, metrics=metrics, agent_home=home, clock=utc_now
    )
    leases = Leases(redis, names, ttl_ms=ttl_ms)
    reads = ReadModel(redis, names)
    service = TurnService(
        reads=reads,
        client=client,
        runner=runner,
        leases=leases,
        models=models or serving(provider, config),
        caller=ModelCaller(metrics, retry, clock=utc_now),
        metrics=metrics,
        config=TurnConfig(
            owner="executor-test",
            max_rounds=max_rounds,
            agent_home=home,
            outage_backoff=backoff,
            memory=memory,
        ),
        clock=utc_now,
        new_id=new_id,
    )
    return Executor(service, registry, reads, client, leases)


async def ensure_agent(client: LedgerClient, agent: str = AGENT) -> None:
    ensure = c.EnsureAgent(
        command_id=f"ensure-{agent}",
        agent_id=agent,
        agent_token_hash=token_hash(f"agent-{agent}"),
        callback_token_hash=token_hash(f"callback-{agent}"),
    )
    assert (await client.send(ensure)).error is None


async def say(client: LedgerClient, text: str, agent: str = AGENT) -> None:
    message_id = new_id("msg_")
    cmd = c.AppendOperatorMessage(
        command_id=message_id, agent_id=agent, message_id=message_id, text=text
    )
    assert (await client.send(cmd)).error is None


async def callback(client: LedgerClient, body: str, agent: str = AGENT) -> None:
    """A delivery to the agent-scope callback URL: triggers the agent's single external wait."""
    delivery = new_id("d_")
    cmd = c.RecordCallback(
        command_id=delivery,
        agent_id=agent,
        token_hash=token_hash(f"callback-{agent}"),
        delivery_id=delivery,
        content_type="text/plain",
        body=body,
        source=c.CallbackSource.STREAM,
    )
    reply = await client.send(cmd)
    assert reply.result is not None
    assert reply.result["disposition"] == "triggered"


async def history(reads: ReadModel, agent: str = AGENT) -> list[dict[str, Any]]:
    return await reads.history(agent, limit=1000)


def turn_events(events: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [
        (e["type"], e["data"]["turn_id"], e["data"].get("outcome"))
        for e in events
        if e["type"] in ("turn_started", "turn_finished")
    ]


def script(*rounds: dict[str, Any]) -> ScriptFileProvider:
    return ScriptFileProvider([ScriptRound.model_validate(r) for r in rounds])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


async def test_a_request_is_worked_through_a_callback_to_a_promoted_report(
    pump, redis, names, client, home
) -> None:
    recording = Recording(ScriptedProvider())
    run = executor(redis, names, client, home, recording)
    await ensure_agent(client)
    await say(client, REQUEST)
    outcomes = [await run.tick("input")]
    while outcomes[-1] is not c.TurnOutcome.WAITING:
        outcomes.append(await run.tick())
    await callback(client, "Approved by the release manager.")
    outcomes.append(await run.tick("review_triggered"))
    while outcomes[-1] is not c.TurnOutcome.COMPLETED:
        outcomes.append(await run.tick())
    assert outcomes == ["yielded", "yielded", "yielded", "waiting", "yielded", "completed"]

    (item,) = await run.reads.all_items(AGENT)
    assert item.state.value == "completed"
    briefs, summaries = await run.reads.briefs(AGENT, item.id)
    # The turns before the last ended with text: each left a reply; the completing one its report.
    assert [b.kind.value for b in briefs] == ["reply"] * 5 + ["result"]
    assert briefs[-1].text == item.result_summary == summaries[0].text
    assert item.result_summary.startswith('Completed "Draft the release notes"')

    events = await history(run.reads)
    turns = turn_events(events)
    assert [kind for kind, _, _ in turns] == ["turn_started", "turn_finished"] * 6
    assert all(a[1] == b[1] for a, b in zip(turns[::2], turns[1::2], strict=True))
    assert sum(e["type"] == "plan_artifact_refreshed" for e in events) == 2
    plan = await asyncio.to_thread(Path(item.plan_artifact.path).read_text)
    assert "- done: Check every link" in plan

    review_prompt = "\n".join(str(m["content"]) for m in recording.asked[-3])
    assert "External evidence for wait" in review_prompt
    assert "Approved by the release manager." in review_prompt

    assert run.metric("longrun_turns_total", outcome="completed") == 1
    assert run.metric("longrun_turns_total", outcome="yielded") == 4
    assert run.metric("longrun_tool_calls_total", tool="CreateWorkItem", status="success") == 1
    assert run.metric("longrun_tool_calls_total", tool="EditFile", status="success") == 2
    assert run.metric("longrun_turn_seconds_count") == 6


async def test_transcript_entries_are_bound_to_the_work_item_that_was_current(
    pump, redis, names, client, home
) -> None:
    run = executor(redis, names, client, home, ScriptedProvider())
    await ensure_agent(client)
    await say(client, "Write the summary. Then send it.")
    await run.tick("input")
    (item,) = await run.reads.all_items(AGENT)
    entries = await run.reads.transcript(AGENT)
    before = [e for e in entries if e["work_item_id"] is None]
    after = await run.reads.transcript(AGENT, work_item_id=item.id)
    assert [e["role"] for e in before][:2] == ["user", "user"]
    assert any(e["tool_name"] == "CreateWorkItem" for e in before)
    assert any(e["tool_name"] == "PickWorkItem" and e["role"] == "tool" for e in before)
    assert [e["tool_name"] for e in after if e["role"] == "tool"] == ["UpdateWorkItem"]
    assert after[-1]["role"] == "assistant"
    assert len({e["turn_id"] for e in entries}) == 1


async def current_item(run: Executor, objective: str = "Ship the notes") -> str:
    """An open WorkItem made current by tool calls outside any turn (no fencing token)."""
    gateway = run.service.runner.gateway
    args = {"objective": objective, "todo_list": [{"text": "Draft it"}, {"text": "Send it"}]}
    created = await gateway.call(AGENT, "CreateWorkItem", args, command_id=new_id("c_"))
    item_id = created.result["work_item"]["id"]  # type: ignore[index]
    picked = await gateway.call(
        AGENT, "PickWorkItem", {"work_item_id": item_id}, command_id=new_id("c_")
    )
    assert picked.status == "success"
    return str(item_id)


async def test_a_held_lease_clears_the_tick_marker_and_runs_no_turn(
    pump, redis, names, client, home
) -> None:
    run = executor(redis, names, client, home, ScriptedProvider())
    await ensure_agent(client)
    assert await run.leases.acquire(AGENT, "someone-else:turn_x:tick-other") is not None
    tick = Tick(tick_id="tick-held", agent_id=AGENT, kind="input", issued_at=utc_now())
    await redis.set(names.outstanding_tick(AGENT), "tick-held")
    served = await run.service.run(tick)
    assert (served.outcome, served.settled) == (None, True)
    assert await redis.get(names.outstanding_tick(AGENT)) is None
    assert await redis.get(names.lease(AGENT)) == b"someone-else:turn_x:tick-other"
    assert turn_events(await history(run.reads)) == []


async def test_a_duplicate_of_a_tick_being_served_elsewhere_stays_pending(
    pump, redis, names, client, home
) -> None:
    run = executor(redis, names, client, home, ScriptedProvider())
    await ensure_agent(client)
    assert await run.leases.acquire(AGENT, "other-executor:turn_x:tick-1") is not None
    await redis.set(names.outstanding_tick(AGENT), "tick-1")
    tick = Tick(tick_id="tick-1", agent_id=AGENT, kind="input", issued_at=utc_now())
    served = await run.service.run(tick)
    assert (served.outcome, served.settled) == (None, False)
    assert await redis.get(names.outstanding_tick(AGENT)) == b"tick-1"


async def test_a_tick_marker_naming_a_newer_tick_is_left_alone(
    pump, redis, names, client, home
) -> None:
    run = executor(redis, names, client, home, ScriptedProvider())
    await ensure_agent(client)
    await redis.set(names.outstanding_tick(AGENT), "tick-newer")
    tick = Tick(tick_id="tick-older", agent_id=AGENT, kind="input", issued_at=utc_now())
    assert (await run.service.run(tick)).outcome is c.TurnOutcome.YIELDED
    assert await redis.get(names.outstanding_tick(AGENT)) == b"tick-newer"
    assert await redis.get(names.lease(AGENT)) is None


async def dead_turn(run: Executor, turn_id: str) -> None:
    """What an executor killed mid-turn leaves: a begun turn whose lease then expired."""
    token = await run.leases.acquire(AGENT, f"dead:{turn_id}")
    assert token is not None
    begin = c.BeginTurn(
        command_id=f"{turn_id}:begin",
        agent_id=AGENT,
        turn_id=turn_id,
        fencing_token=token,
        tick_id=f"tick-{turn_id}",
        tick_kind="continue_current",
    )
    assert (await run.client.send(begin)).error is None
    await run.leases.redis.delete(run.leases.names.lease(AGENT))  # the lease expires


async def test_a_dead_executors_turn_is_retried_as_an_interrupted_turn(
    pump, redis, names, client, home
) -> None:
    recording = Recording(ScriptedProvider())
    run = executor(redis, names, client, home, recording)
    await ensure_agent(client)
    item_id = await current_item(run)
    await dead_turn(run, "turn_dead_1")
    assert await run.tick() is c.TurnOutcome.YIELDED
    prompt = "\n".join(str(m["content"]) for m in recording.asked[0])
    assert "previous attempt at this turn (turn_dead_1) was interrupted" in prompt
    events = await history(run.reads)
    started = [e for e in events if e["type"] == "turn_started"]
    assert started[-1]["data"]["interrupted_turn_id"] == "turn_dead_1"
    finished = [e for e in events if e["type"] == "turn_finished"]
    first = finished[0]["data"]
    assert (first["turn_id"], first["outcome"]) == ("turn_dead_1", "interrupted")
    (item,) = await run.reads.all_items(AGENT)
    assert item.id == item_id
    assert item.blocked_by is None


async def test_three_interrupted_attempts_block_the_item_and_release_focus(
    pump, redis, names, client, home
) -> None:
    run = executor(redis, names, client, home, ScriptedProvider())
    await ensure_agent(client)
    item_id = await current_item(run)
    for n in (1, 2, 3):
        await dead_turn(run, f"turn_dead_{n}")
    assert await run.tick() is c.TurnOutcome.YIELDED
    (item,) = await run.reads.all_items(AGENT)
    assert item.id == item_id
    assert item.blocked_by == "turn failed 3 times: previous turn was interrupted"
    state = await run.reads.agent_state(AGENT)
    assert state is not None
    assert state.current_work_item_id is None


async def test_provider_errors_fail_the_turn_with_a_brief_and_the_third_blocks_the_item(
    pump, redis, names, client, home
) -> None:
    down = {"error": "the model endpoint answered 503: overloaded"}
    run = executor(redis, names, client, home, script(down, down, down))
    await ensure_agent(client)
    item_id = await current_item(run)
    assert [await run.tick() for _ in range(3)] == ["failed"] * 3
    briefs, _ = await run.reads.briefs(AGENT, item_id)
    assert [b.kind.value for b in briefs] == ["failure"] * 3
    assert briefs[0].text == "provider error: the model endpoint answered 503: overloaded"
    (item,) = await run.reads.all_items(AGENT)
    assert item.blocked_by == (
        "turn failed 3 times: provider error: the model endpoint answered 503: overloaded"
    )
    state = await run.reads.agent_state(AGENT)
    assert state is not None
    assert state.current_work_item_id is None  # focus released with the blocker
    assert run.metric("longrun_turns_total", outcome="failed") == 3


def shown(conversation: list[dict[str, Any]]) -> str:
    return "\n".join(str(m["content"]) for m in conversation)


async def test_a_failed_turn_keeps_its_inbox_and_the_next_turn_consumes_it_once(
    pump, redis, names, client, home
) -> None:
    recording = Recording(script({"error": "boom"}, {"text": "On it."}))
    run = executor(redis, names, client, home, recording)
    await ensure_agent(client)
    await say(client, "Please do something.")
    assert await run.tick("input") is c.TurnOutcome.FAILED
    assert [m.text for m in await run.reads.inbox(AGENT)] == ["Please do something."]
    assert await run.tick("input") is c.TurnOutcome.YIELDED
    assert "Please do something." in shown(recording.asked[1])
    assert await run.reads.inbox(AGENT) == []
    await say(client, "And then this.")
    # Consumed once: the success popped the one message it was shown, not the newer one.
    assert [m.text for m in await run.reads.inbox(AGENT)] == ["And then this."]


async def test_messages_shown_to_three_failed_turns_are_set_aside_visibly(
    pump, redis, names, client, home
) -> None:
    down = {"error": "the model endpoint answered 503: overloaded"}
    recording = Recording(script(down, down, down))
    run = executor(redis, names, client, home, recording)
    await ensure_agent(client)
    await say(client, "Please do something.")
    (message,) = await run.reads.inbox(AGENT)
    for attempt in range(3):
        assert await run.reads.inbox(AGENT) == [message], attempt
        assert await run.tick("input") is c.TurnOutcome.FAILED
        assert "Please do something." in shown(recording.asked[attempt])
    assert await run.reads.inbox(AGENT) == []
    briefs, _ = await run.reads.briefs(AGENT)
    (note,) = [b for b in briefs if message.id in b.text]
    assert note.kind.value == "failure"
    assert "503: overloaded" in note.text
    (aside,) = [e for e in await history(run.reads) if e["type"] == "inbox_undeliverable"]
    assert aside["data"]["message_ids"] == [message.id]


def call(name: str, args: dict[str, Any] | str, call_id: str = "call_1") -> ToolCall:
    raw = args if isinstance(args, str) else orjson.dumps(args).decode()
    return ToolCall(id=call_id, name=name, arguments=raw)


@dataclass
class TakeOver:
    """A model call during which another executor takes the agent over (lease expiry), then
    answers with a write to the current item. `after_begin`: the takeover waits until the
    turn's BeginTurn, sent beside this first round, has been applied; else it holds the ledger
    back (`pump`) so that BeginTurn arrives after the takeover."""

    leases: Leases
    reads: ReadModel
    pump: Pump
    after_begin: bool
    work_item_id: str = ""

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        for _ in range(500):
            record = await self.reads.agent_record(AGENT)
            if not self.after_begin or (record is not None and record.current_turn_id):
                break
            await asyncio.sleep(0.01)
        await self.leases.redis.delete(self.leases.names.lease(AGENT))
        assert await self.leases.acquire(AGENT, "newer:turn_new") is not None
        self.pump.running.set()
        rename = {"work_item_id": self.work_item_id, "objective": "Renamed"}
        return ProviderRound(text="Renaming it.", tool_calls=(call("UpdateWorkItem", rename),))

    async def close(self) -> None:
        return None


@pytest.mark.parametrize("after_begin", [True, False], ids=["after-begin", "before-begin"])
async def test_a_superseded_turn_stops_without_writing(
    pump, redis, names, client, home, *, after_begin
) -> None:
    takeover = TakeOver(
        Leases(redis, names, ttl_ms=2000), ReadModel(redis, names), pump, after_begin
    )
    run = executor(redis, names, client, home, takeover)
    await ensure_agent(client)
    takeover.work_item_id = await current_item(run)
    tick = Tick(tick_id="tick-taken", agent_id=AGENT, kind="continue_current", issued_at=utc_now())
    await redis.set(names.outstanding_tick(AGENT), "tick-taken")
    if not after_begin:
        pump.running.clear()
    served = await run.service.run(tick)
    assert (served.outcome, served.settled) == (c.TurnOutcome.INTERRUPTED, False)
    assert await redis.get(names.outstanding_tick(AGENT)) == b"tick-taken"
    (item,) = await run.reads.all_items(AGENT)
    assert item.objective == "Ship the notes"
    turns = turn_events(await history(run.reads))
    # A BeginTurn that arrives after the takeover is refused too: the turn never started, and
    # the model's first round, asked for meanwhile, is dropped unused.
    assert [kind for kind, _, _ in turns] == (["turn_started"] if after_begin else [])
    assert await redis.get(names.lease(AGENT)) == b"newer:turn_new"
    assert run.metric("longrun_turns_total", outcome="interrupted") == 1


async def test_a_rounds_ledger_calls_share_round_trips_and_keep_their_order(
    pump, redis, names, client, home, *, monkeypatch
) -> None:
    """Consecutive WorkItem calls go out together (`ToolGateway.call_all`); a read waits for
    the writes before it, a file tool splits the run, and the transcript keeps call order."""
    first_round = {
        "text": "Working on it.",
        "tool_calls": [
            {"name": "UpdateWorkItem", "arguments": {"work_item_id": "$CURRENT", "objective": "A"}},
            {"name": "GetWorkItem", "arguments": {"work_item_id": "$CURRENT"}},
            {"name": "WriteFile", "arguments": {"path": "notes.md", "content": "notes"}},
            {
                "name": "UpdateWorkItem",
                "arguments": {
                    "work_item_id": "$CURRENT",
                    "todo_list": [{"text": "Draft it", "state": "completed"}],
                },
            },
            {"name": "UpdateWorkItem", "arguments": {"work_item_id": "$CURRENT", "objective": "B"}},
        ],
    }
    run = executor(redis, names, client, home, script(first_round, {"text": "Done."}))
    await ensure_agent(client)
    item_id = await current_item(run)
    writes = watch_writes(client, monkeypatch)
    assert await run.tick() is c.TurnOutcome.YIELDED
    assert writes == [
        ["BeginTurn"],
        ["UpdateWorkItem"],
        ["UpdateWorkItem", "UpdateWorkItem"],
        ["RecordTranscript", "FinishTurn"],
    ]
    (item,) = await run.reads.all_items(AGENT)
    assert (item.id, item.objective) == (item_id, "B")
    assert [t.state.value for t in item.todo_list] == ["completed"]
    entries = await run.reads.transcript(AGENT)
    calls = [(e["role"], e["tool_name"]) for e in entries if e["tool_name"]]
    names_in_order = ["UpdateWorkItem", "GetWorkItem", "WriteFile"] + ["UpdateWorkItem"] * 2
    assert calls == [(role, n) for n in names_in_order for role in ("assistant", "tool")]
    read = next(e for e in entries if e["role"] == "tool" and e["tool_name"] == "GetWorkItem")
    assert orjson.loads(read["content"])["result"]["work_item"]["objective"] == "A"


async def test_malformed_arguments_go_back_to_the_model_as_invalid_tool_input(
    pump, redis, names, client, home
) -> None:
    recording = Recording(
        script(
            {"tool_calls": [{"name": "GetWorkItem", "arguments": '{"work_item_id": '}]},
            {"text": "I will fix my input next time."},
        )
    )
    run = executor(redis, names, client, home, recording)
    await ensure_agent(client)
    assert await run.tick() is c.TurnOutcome.YIELDED
    answer = recording.asked[1][-1]
    assert answer["role"] == "tool"
    envelope = orjson.loads(answer["content"])
    assert envelope["status"] == "error"
    assert envelope["error"]["kind"] == "invalid_tool_input"
    assert "not valid JSON" in envelope["error"]["message"]
    assert run.metric("longrun_tool_calls_total", tool="GetWorkItem", status="error") == 1


async def test_the_round_cap_ends_a_busy_turn_as_yielded(pump, redis, names, client, home) -> None:
    busy = {"text": "Looking.", "tool_calls": [{"name": "ListWorkItems", "arguments": {}}]}
    recording = Recording(script(*[busy] * 5))
    run = executor(redis, names, client, home, recording, max_rounds=3)
    await ensure_agent(client)
    assert await run.tick() is c.TurnOutcome.YIELDED
    assert len(recording.asked) == 3
    rounds = {e["round"] for e in await run.reads.transcript(AGENT)}
    assert rounds == {0, 1, 2, 3}


async def test_two_completions_in_one_round_promote_no_report(
    pump, redis, names, client, home
) -> None:
    both = {
        "text": "Both are done.",
        "tool_calls": [
            {"name": "CompleteWorkItem", "arguments": {"work_item_id": "$CURRENT"}},
            {"name": "CompleteWorkItem", "arguments": {"work_item_id": "$CREATED"}},
        ],
    }
    create = {"tool_calls": [{"name": "CreateWorkItem", "arguments": {"objective": "Other"}}]}
    run = executor(redis, names, client, home, script(create, both))
    await ensure_agent(client)
    await current_item(run)
    assert await run.tick() is c.TurnOutcome.COMPLETED
    items = await run.reads.all_items(AGENT)
    assert [i.state.value for i in items] == ["completed", "completed"]
    assert [i.result_summary for i in items] == [None, None]
    briefs, summaries = await run.reads.briefs(AGENT)
    assert [(b.kind.value, b.text) for b in briefs] == [("reply", "Both are done.")]
    assert summaries == []


async def test_file_tools_are_confined_to_the_agent_home(pump, redis, names, client, home) -> None:
    writes = {
        "tool_calls": [
            {"name": "WriteFile", "arguments": {"path": "notes/today.md", "content": "hello"}},
            {"name": "WriteFile", "arguments": {"path": "../agent-2/x.md", "content": "boo"}},
            {"name": "ReadFile", "arguments": {"path": "/etc/hostname"}},
        ]
    }
    recording = Recording(script(writes, {"text": "ok"}))
    run = executor(redis, names, client, home, recording)
    await ensure_agent(client)
    await run.tick()
    answers = [orjson.loads(m["content"]) for m in recording.asked[1] if m["role"] == "tool"]
    assert [a["status"] for a in answers] == ["success", "error", "error"]
    assert [a["error"]["kind"] for a in answers[1:]] == ["access_denied", "access_denied"]
    assert (home / AGENT / "notes" / "today.md").read_text() == "hello"
    assert not (home / "agent-2").exists()


async def test_the_lease_is_renewed_while_the_model_works(pump, redis, names, client, home) -> None:
    slow = script({"text": "thinking hard", "sleep_ms": 1500})
    run = executor(redis, names, client, home, slow, ttl_ms=300)
    await ensure_agent(client)
    turn = asyncio.create_task(run.tick())
    await asyncio.sleep(1.0)  # more than three lease lifetimes into the model call
    owner = await redis.get(names.lease(AGENT))
    assert owner is not None
    assert owner.startswith(b"executor-test:turn_")
    assert owner.endswith(b":tick-" + str(next(_ticks) - 1).encode())
    assert await turn is c.TurnOutcome.YIELDED
    assert await redis.get(names.lease(AGENT)) is None


def refreshes(events: list[dict[str, Any]]) -> int:
    return sum(e["type"] == "plan_artifact_refreshed" for e in events)


async def test_a_plan_file_changed_in_a_turn_is_described_again_at_its_end(
    pump, redis, names, client, home
) -> None:
    plan = "# Plan\n\n- draft the notes\n- send them\n"
    write = {"tool_calls": [{"name": "WriteFile", "arguments": {"path": "$PLAN", "content": plan}}]}
    read = {"tool_calls": [{"name": "ReadFile", "arguments": {"path": "$PLAN"}}]}
    rounds = (write, {"text": "Plan written."}, write, read, {"text": "Plan unchanged."})
    run = executor(redis, names, client, home, script(*rounds))
    await ensure_agent(client)
    item_id = await current_item(run)
    (before,) = await run.reads.all_items(AGENT)
    assert await run.tick() is c.TurnOutcome.YIELDED
    (item,) = await run.reads.all_items(AGENT)
    data = plan.encode()
    artifact = item.plan_artifact
    assert artifact.sha256 == hashlib.sha256(data).hexdigest() != before.plan_artifact.sha256
    assert (artifact.bytes, artifact.preview, artifact.preview_complete) == (len(data), plan, True)
    assert artifact.path == before.plan_artifact.path
    assert refreshes(await history(run.reads)) == 1
    # The same bytes written again, then only read: nothing to describe, so no refresh.
    assert await run.tick() is c.TurnOutcome.YIELDED
    assert refreshes(await history(run.reads)) == 1
    (again,) = await run.reads.all_items(AGENT)
    assert (again.id, again.plan_artifact.sha256) == (item_id, artifact.sha256)


async def test_a_turns_end_is_its_transcript_then_plan_refresh_then_finish_in_one_run(
    pump, redis, names, client, home
) -> None:
    """The end of a turn goes to the ledger as one write: adjacent on the agent's partition
    stream, FinishTurn last, all with the turn's fencing token."""
    plan = "# Plan\n\n- draft the notes\n"
    write = {"tool_calls": [{"name": "WriteFile", "arguments": {"path": "$PLAN", "content": plan}}]}
    run = executor(redis, names, client, home, script(write, {"text": "Plan written."}))
    await ensure_agent(client)
    await current_item(run)
    assert await run.tick() is c.TurnOutcome.YIELDED
    entries = await redis.xrange(names.commands(names.partition(AGENT)))
    sent = [decode_command({k.decode(): v for k, v in f.items()}) for _, f in entries]
    begin = next(i for i, cmd in enumerate(sent) if isinstance(cmd, c.BeginTurn))
    turn = sent[begin:]
    assert [type(cmd).__name__ for cmd in turn] == [
        "BeginTurn",
        "RecordTranscript",
        "RefreshPlanArtifact",
        "FinishTurn",
    ]
    assert len({cmd.fencing_token for cmd in turn}) == 1  # type: ignore[attr-defined]
    assert refreshes(await history(run.reads)) == 1


async def test_a_plan_written_in_the_completing_round_is_described_before_completion(
    pump, redis, names, client, home
) -> None:
    plan = "# Plan\n\nAll done.\n"
    finish = {
        "text": "Finished the notes.",
        "tool_calls": [
            {"name": "WriteFile", "arguments": {"path": "$PLAN", "content": plan}},
            {"name": "CompleteWorkItem", "arguments": {"work_item_id": "$CURRENT"}},
        ],
    }
    run = executor(redis, names, client, home, script(finish))
    await ensure_agent(client)
    await current_item(run)
    assert await run.tick() is c.TurnOutcome.COMPLETED
    (item,) = await run.reads.all_items(AGENT)
    assert item.state.value == "completed"
    assert item.result_summary == "Finished the notes."
    assert item.plan_artifact.sha256 == hashlib.sha256(plan.encode()).hexdigest()
    assert item.plan_artifact.preview == plan
    assert refreshes(await history(run.reads)) == 1


async def test_a_long_turn_keeps_its_tick_from_other_executors_reclaimers(
    pump, redis, names, client, home
) -> None:
    """The lease beat also touches the tick entry, so a turn that outlasts the reclaim idle time
    keeps its tick: a reclaimer elsewhere never takes it, and the turn's end acknowledges it."""
    slow = script({"text": "thinking for a long time", "sleep_ms": 3000})
    run = executor(redis, names, client, home, slow, ttl_ms=300)
    consumer = TickConsumer(
        run.service, redis, names, build_metrics(CollectorRegistry()), consumer="c1", concurrency=2
    )
    await ensure_agent(client)
    stream = names.ticks(names.partition(AGENT))
    await ensure_groups(redis, [stream], Group.EXECUTOR)
    tick = Tick(tick_id="tick-long", agent_id=AGENT, kind="input", issued_at=utc_now())
    await redis.xadd(stream, {"m": encode(Envelope(id=new_id("msg_"), at=utc_now(), body=tick))})
    ((_, [(entry_id, fields)]),) = await redis.xreadgroup(Group.EXECUTOR, "c1", {stream: ">"})
    await consumer.stream.consume(stream, [entry_id.decode()], [fields], consumer="c1")
    stolen = []
    while consumer.running:
        # Another process's reclaimer: takes entries idle for more than three beats.
        _, claimed, _ = await redis.xautoclaim(stream, Group.EXECUTOR, "thief", 1000, "0-0")
        stolen += claimed
        await asyncio.sleep(0.1)
    assert stolen == []
    assert (await redis.xpending(stream, Group.EXECUTOR))["pending"] == 0
    assert [kind for kind, _, _ in turn_events(await history(run.reads))] == [
        "turn_started",
        "turn_finished",
    ]


async def test_a_refused_begin_turn_drops_the_first_round_and_sends_nothing_else(
    pump, redis, names, client, home, *, monkeypatch
) -> None:
    """BeginTurn travels beside the first model round; when the ledger refuses it (here for a
    reason other than a newer turn), the round's answer is dropped, nothing else of the turn
    is sent, and the tick is settled."""
    rename = {"name": "UpdateWorkItem", "arguments": {"work_item_id": "$CURRENT", "objective": "X"}}
    recording = Recording(script({"text": "Renaming.", "tool_calls": [rename]}))
    run = executor(redis, names, client, home, recording)
    await ensure_agent(client)
    await current_item(run)
    queue_all = client.queue_all

    def refuse_begin(commands: Sequence[c.Command], **kw: Any) -> asyncio.Task[Any]:
        if not isinstance(commands[0], c.BeginTurn):
            return queue_all(commands, **kw)
        error = DomainError(ErrorKind.ACCESS_DENIED, "not this one").body()
        reply = CommandReply(command_id=commands[0].command_id, outcome="rejected", error=error)

        async def refused() -> list[CommandReply]:
            return [reply]

        return asyncio.ensure_future(refused())

    monkeypatch.setattr(client, "queue_all", refuse_begin)
    writes = watch_writes(client, monkeypatch)
    tick = Tick(tick_id="tick-refused", agent_id=AGENT, kind="input", issued_at=utc_now())
    await redis.set(names.outstanding_tick(AGENT), "tick-refused")
    served = await run.service.run(tick)
    assert (served.outcome, served.settled) == (None, True)
    assert len(recording.asked) == 1  # the first round was asked for, then dropped
    assert writes == []
    (item,) = await run.reads.all_items(AGENT)
    assert item.objective == "Ship the notes"
    assert await redis.get(names.lease(AGENT)) is None
    assert await redis.get(names.outstanding_tick(AGENT)) is None
    assert turn_events(await history(run.reads)) == []
