"""Usage summed per UTC day, exact over any life: turns with model calls go through the real
ledger (in process, its clock stepped across midnights) and the read model sums any range, whole
days from the per-day rows and the days a bound cuts from their turn_finished events. More than
10,000 turns count whole (the capped list of turn records kept only the newest 10,000), and a
duplicated FinishTurn counts once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from services.ledger.service import LedgerService
from services.turn_executor.lease import Leases
from shared.domain.usage import TurnUsage, Usage, UsageSummary, sum_summaries
from shared.domain.wake import TickKind
from shared.metrics import build_metrics
from shared.runtime import new_id
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.wire import commands as c
from shared.wire.names import Names
from tests.integration.ledger_driver import Driver

AGENT = "usage-days"
START = datetime(2026, 3, 1, 20, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def _usage(n: int) -> TurnUsage:
    """Turn n's usage: 1 or 2 calls, of one of two models, counts that differ per turn."""
    usage = TurnUsage()
    for call in range(1 + n % 2):
        model = "openai/a" if (n + call) % 3 else "anthropic/b"
        one = Usage(input_tokens=100 + n, cached_input_tokens=n % 7, output_tokens=n % 11)
        usage = usage.plus_call(model, one)
    return usage


def _expected(
    turns: list[tuple[datetime, TurnUsage]], since: datetime, until: datetime | None
) -> UsageSummary:
    return sum_summaries(
        [
            UsageSummary(turns=1, **u.model_dump())
            for at, u in turns
            if at >= since and (until is None or at < until)
        ]
    )


async def _turns(
    ledger: LedgerService, token: int, clock: Clock, *, first: int, count: int, step: timedelta
) -> list[tuple[datetime, TurnUsage]]:
    """`count` turns in one batch of commands, each at its own instant `step` apart."""
    done: list[tuple[datetime, TurnUsage]] = []
    for n in range(first, first + count):
        clock.now += step
        turn_id = f"turn-{n}"
        begin = c.BeginTurn(
            command_id=f"{turn_id}:begin",
            agent_id=AGENT,
            turn_id=turn_id,
            fencing_token=token,
            tick_id=f"tick-{n}",
            tick_kind=TickKind.INPUT,
        )
        finish = c.FinishTurn(
            command_id=f"{turn_id}:finish",
            agent_id=AGENT,
            turn_id=turn_id,
            fencing_token=token,
            outcome=c.TurnOutcome.YIELDED,
            usage=_usage(n),
        )
        replies = await ledger.apply_batch([begin, finish])
        assert [a.reply.error for a in replies] == [None, None]
        done.append((clock.now, _usage(n)))
    return done


async def test_usage_sums_exactly_over_any_range_across_days(
    redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    clock = Clock()
    ledger = LedgerService(
        redis, names, build_metrics(CollectorRegistry()), clock=clock, new_id=new_id, wake_limit=25
    )
    await Driver(ledger, reads, AGENT).ensure()
    token = await Leases(redis, names, ttl_ms=600_000).acquire(AGENT, "test")
    assert token is not None
    # 2026-03-01 20:00 to 2026-03-05 01:00: five days, four midnights crossed.
    turns = await _turns(ledger, token, clock, first=0, count=60, step=timedelta(minutes=77))
    # The last turn's FinishTurn again (a redelivery): answered as a duplicate, counted once.
    again = c.FinishTurn(
        command_id="turn-59:finish",
        agent_id=AGENT,
        turn_id="turn-59",
        fencing_token=token,
        outcome=c.TurnOutcome.YIELDED,
        usage=_usage(59),
    )
    await ledger.apply_batch([again])
    days = await reads.usage_days(AGENT)
    assert [d.day for d in days] == [f"2026-03-0{n}" for n in range(1, 6)]
    midnight = datetime(2026, 3, 2, tzinfo=UTC)
    ranges: list[tuple[datetime, datetime | None]] = [
        (START - timedelta(days=30), None),
        (midnight, midnight + timedelta(days=1)),
        (midnight + timedelta(hours=5, minutes=3), None),
        (START, midnight + timedelta(days=1, hours=13, seconds=1)),
        (midnight + timedelta(hours=1), midnight + timedelta(hours=9)),
        (turns[10][0], turns[11][0]),
        (clock.now + timedelta(seconds=1), None),
    ]
    for since, until in ranges:
        got = await reads.usage_between(AGENT, since, until)
        assert got == _expected(turns, since, until), (since, until)
    assert (await reads.usage_between(AGENT, START - timedelta(days=1))).turns == 60


async def test_more_than_ten_thousand_turns_count_whole(
    redis: AnyRedis, names: Names, reads: ReadModel
) -> None:
    clock = Clock()
    ledger = LedgerService(
        redis, names, build_metrics(CollectorRegistry()), clock=clock, new_id=new_id, wake_limit=25
    )
    await Driver(ledger, reads, AGENT).ensure()
    token = await Leases(redis, names, ttl_ms=600_000).acquire(AGENT, "test")
    assert token is not None
    turns = await _turns(ledger, token, clock, first=0, count=10_050, step=timedelta(seconds=1))
    since = START - timedelta(days=1)
    total = await reads.usage_between(AGENT, since)
    assert total == _expected(turns, since, None)
    assert total.turns == 10_050
    # A bound inside the day reads that day's events: still exact.
    cut = turns[3_000][0]
    assert await reads.usage_between(AGENT, cut) == _expected(turns, cut, None)
