"""The ledger's decision path alone, in this process and without Redis: what one command costs in
Python between its entry's bytes and the lr_commit arguments that write it.

The workload is the ledger benchmark's (half AppendOperatorMessage, half CreateWorkItem with 5
todos, round-robin over the agents). Per round, every command is decoded (`decode_command`, as
the subscribers do), then planned in waves as `apply_batch` plans them (`_split_wave`,
`_plan_run`: decide, reply, history, index moves, the commit plan) against each agent's cached
slice, which is remembered as after a commit. The baseline in the same run is the floor of any
implementation: orjson parsing each entry and writing its body back, with no validation and no
decision. Rounds are interleaved with the baseline and the best round of each is printed.

Nothing about timing is asserted; what is asserted is that every command was planned and
applied with no rejection. Sizes: BENCH_DECISIONS_COMMANDS (40,000), BENCH_DECISIONS_AGENTS
(200), BENCH_DECISIONS_ROUNDS (5).

    .venv/bin/python -m pytest tests/bench/test_bench_ledger_decisions.py -m bench -s
"""

from __future__ import annotations

import os
import time

import orjson
import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from services.ledger.handlers import decode_command
from services.ledger.planning import split_wave
from services.ledger.rules import LedgerState, decide
from services.ledger.service import LedgerService
from services.ledger.store import Loaded
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.wire.names import Names
from shared.wire.replies import CommandOutcome
from tests.bench.caller import tuned_like_a_service
from tests.bench.test_bench_ledger import Workload, ensure

pytestmark = [pytest.mark.bench, pytest.mark.timeout(600)]

WAVE = 200
"""Commands per planned batch: the ledger's round limit."""


def _size(name: str, default: int) -> int:
    return int(os.environ.get(f"BENCH_DECISIONS_{name}", default))


def fresh_slices(service: LedgerService, agents: list[str]) -> dict[str, Loaded]:
    ctx = service.context()
    slices = {}
    for agent_id in agents:
        made = decide(LedgerState(agent_id=agent_id, agent=None), ensure(agent_id), ctx)
        slices[agent_id] = Loaded(stored_reply=None, state=made.state.committed(), version=1)
    return slices


def decision_round(
    service: LedgerService, work: Workload, entries: list[dict[bytes, bytes]]
) -> tuple[float, float, int]:
    """CPU seconds decoding and planning every command once; returns them and the count of
    commands applied."""
    slices = fresh_slices(service, work.agents)
    started = time.process_time()
    commands = [decode_command(fields) for fields in entries]
    decoded = time.process_time()
    ctx = service.context()
    applied = 0
    for start in range(0, len(commands), WAVE):
        pending = list(enumerate(commands[start : start + WAVE]))
        acks = {i: ("stream", "0-1") for i, _ in pending}
        while pending:
            wave, pending = split_wave(pending)
            for run in wave:
                agent_id = run[0][1].agent_id
                planned = service.planner.plan_run(run, slices[agent_id], ctx, acks)
                assert not planned.deferred
                applied += sum(p.reply.outcome is CommandOutcome.APPLIED for p in planned.planned)
                after = planned.planned[-1].after
                assert after is not None
                service.cache.remember(agent_id, after)
                slices[agent_id] = service.cache.lookup(run[-1][1]) or after
    return decoded - started, time.process_time() - decoded, applied


def floor_round(entries: list[dict[bytes, bytes]]) -> float:
    """CPU seconds to parse every entry and write its body back, with nothing in between."""
    started = time.process_time()
    for fields in entries:
        orjson.dumps(orjson.loads(fields[b"m"])["body"])
    return time.process_time() - started


def test_ledger_decision_path() -> None:
    count, agents, rounds = _size("COMMANDS", 40_000), _size("AGENTS", 200), _size("ROUNDS", 5)
    work = Workload.build(agents, count, 5)
    entries = [{b"m": raw} for _, raw in work.encoded]
    service = LedgerService(
        Redis(),  # a client that never connects: nothing here touches Redis
        Names(prefix="bench-decisions"),
        build_metrics(CollectorRegistry()),
        clock=utc_now,
        new_id=new_id,
        wake_limit=25,
        inline_replies=True,
    )
    decode_s, plan_s, floor_s = [], [], []
    with tuned_like_a_service():
        for _ in range(rounds):
            decoding, planning, applied = decision_round(service, work, entries)
            assert applied == count
            decode_s.append(decoding)
            plan_s.append(planning)
            floor_s.append(floor_round(entries))
    per = 1e6 / count
    print(
        f"\nledger decision path, {count:,} commands over {agents} agents, best of {rounds} rounds:"
        f"\n| step | CPU µs per command |\n|---|---|"
        f"\n| decode (decode_command) | {min(decode_s) * per:.1f} |"
        f"\n| plan (decide, reply, history, indexes, commit plan) | {min(plan_s) * per:.1f} |"
        f"\n| both | {(min(decode_s) + min(plan_s)) * per:.1f} |"
        f"\n| baseline: orjson parse and re-dump of the body | {min(floor_s) * per:.1f} |"
    )
