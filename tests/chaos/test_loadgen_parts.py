"""The load generator's pure parts: its report's percentiles, the crash-rule signal, the command
line, and the event inbox that puts back what it looked at."""

from __future__ import annotations

import pytest

from tests.bench.loadgen import (
    Accepted,
    AgentEvents,
    LoadReport,
    _crash_blocked,
    _is_external_wait,
    parse,
)


def test_report_percentiles_and_rates() -> None:
    values = [i / 1000 for i in range(1, 101)]
    report = LoadReport(10.0, 5, 4, ["x"], {"round": values}, {"messages": 20}, Accepted())
    assert report.percentile("round", 0.5) == values[50]
    assert report.percentile("round", 0.99) == values[98]
    assert report.percentile("missing", 0.5) is None
    summary = report.summary()
    assert summary["per_s"] == {"messages": 2.0}
    assert summary["rounds_failed"] == 1
    assert summary["latency"]["round"]["p99_ms"] == 99.0


def test_crash_rule_and_external_wait_signals() -> None:
    blocked = {"work_item": {"blocked_by": "turn failed 3 times: previous turn was interrupted"}}
    assert _crash_blocked("work_item_updated", "w1", blocked)
    assert not _crash_blocked("work_item_updated", "w1", {"work_item": {"blocked_by": "Wait"}})
    assert not _crash_blocked("work_item_created", "w1", blocked)
    assert _is_external_wait("wait_created", {"wait": {"wake": "external"}})
    assert not _is_external_wait("wait_created", {"wait": {"wake": "timer"}})


def test_command_line() -> None:
    where = ["--url", "http://a", "--url", "http://b", "--token", "t", "--redis-url", "redis://r"]
    target, options = parse(
        [*where, "--agents", "7", "--rate", "2.5", "--duration", "9", "--cluster"]
    )
    assert list(target.ingress_urls) == ["http://a", "http://b"]
    assert target.cluster
    assert (options.agents, options.rate, options.duration) == (7, 2.5, 9.0)


async def test_events_put_back_are_read_first() -> None:
    events = AgentEvents()
    events.queue.put_nowait(("c", None, {}))
    events.put_back([("a", None, {}), ("b", None, {})])
    got = [(await events.get(1.0))[0] for _ in range(3)]
    assert got == ["a", "b", "c"]
    with pytest.raises(TimeoutError):
        await events.get(0.01)
