"""What signing history heads costs, to choose between signing every head the ledger commits
and signing on demand (what longrun does: `GET .../history/head`).

Same run, same process, the ledger benchmark's workload (half AppendOperatorMessage, half
CreateWorkItem with 5 todos, over 200 agents): the ledger's decision path per command (decode and
plan, as test_bench_ledger_decisions measures it), then the Ed25519 signature of the agent's new
head after each of those commands (what signing every head would add), then one on-demand
request as the ledger answers it (decide SignHistoryHead: load nothing new, sign, reply). Rounds
are interleaved; the best of each is printed. Nothing about timing is asserted.

    .venv/bin/python -m pytest tests/bench/test_bench_signing.py -m bench -s
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from services.ledger.rules import decide
from services.ledger.service import LedgerService
from shared.domain.history import GENESIS_HASH
from shared.domain.signing import SigningKey
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.wire.commands import SignHistoryHead
from shared.wire.names import Names
from tests.bench.caller import tuned_like_a_service
from tests.bench.test_bench_ledger import Workload
from tests.bench.test_bench_ledger_decisions import _size, decision_round, fresh_slices

pytestmark = [pytest.mark.bench, pytest.mark.timeout(600)]


def sign_every_head(key: SigningKey, agents: list[str], count: int) -> float:
    """CPU seconds to sign one new head per command (round-robin over the agents)."""
    at = utc_now()
    started = time.process_time()
    for n in range(count):
        key.sign_head(agents[n % len(agents)], n + 1, GENESIS_HASH, at)
    return time.process_time() - started


def on_demand(service: LedgerService, agents: list[str], requests: int) -> float:
    """CPU seconds for `requests` SignHistoryHead decisions (the rule and its signature)."""
    slices = fresh_slices(service, agents)
    commands = [
        SignHistoryHead(command_id=f"c{n}", agent_id=agents[n % len(agents)])
        for n in range(requests)
    ]
    ctx = service.context()
    started = time.process_time()
    for command in commands:
        decision = decide(slices[command.agent_id].state, command, ctx)
        assert decision.result is not None
    return time.process_time() - started


def test_signing_every_head_against_signing_on_demand() -> None:
    count, agents_n, rounds = _size("COMMANDS", 40_000), _size("AGENTS", 200), _size("ROUNDS", 5)
    work = Workload.build(agents_n, count, 5)
    entries = [{b"m": raw} for _, raw in work.encoded]
    key = SigningKey.generate()
    service = LedgerService(
        Redis(),  # a client that never connects: nothing here touches Redis
        Names(prefix="bench-signing"),
        build_metrics(CollectorRegistry()),
        clock=utc_now,
        new_id=new_id,
        wake_limit=25,
        inline_replies=True,
        signing_key=key,
    )
    path_s, sign_s, demand_s = [], [], []
    requests = 5_000
    with tuned_like_a_service():
        for _ in range(rounds):
            decoding, planning, applied = decision_round(service, work, entries)
            assert applied == count
            path_s.append(decoding + planning)
            sign_s.append(sign_every_head(key, work.agents, count))
            demand_s.append(on_demand(service, work.agents, requests))
    per = 1e6 / count
    path, sign = min(path_s) * per, min(sign_s) * per
    print(
        f"\nsigning heads, {count:,} commands over {agents_n} agents, best of {rounds} rounds:"
        f"\n| | CPU µs |\n|---|---|"
        f"\n| ledger decision path per command (decode and plan) | {path:.1f} |"
        f"\n| + one Ed25519 head signature per command (sign every head) | {sign:.1f} "
        f"(+{100 * sign / path:.0f}%) |"
        f"\n| sign on demand: per applied command | 0 |"
        f"\n| sign on demand: per request (decide SignHistoryHead) | "
        f"{min(demand_s) * 1e6 / requests:.1f} |"
    )
