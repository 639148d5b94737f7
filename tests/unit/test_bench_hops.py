"""The hop breakdown of tests/bench/peers/hops.py lines events up across streams correctly."""

from __future__ import annotations

from tests.bench.peers.hops import HOPS, Timeline


def test_each_event_is_split_into_its_hops_and_later_ticks_are_its_own() -> None:
    timeline = Timeline(since_ms=0)
    timeline.callback = {"d1": (1000, "a"), "d2": (1005, "b"), "lost": (1006, "c")}
    timeline.command = {"d1": 1003, "d2": 1006, "lost": 1007}
    timeline.event = {"d1": 1010, "d2": 1020}  # `lost` never reached the ledger's events
    # Agent a had a tick before its event (a warm-up's): the event's own is the first after it.
    timeline.ticks = {"a": [1011, 990], "b": [1030]}

    hops = timeline.hops()

    assert [round(v * 1000) for v in hops[HOPS[0]]] == [3, 1]
    assert [round(v * 1000) for v in hops[HOPS[1]]] == [7, 14]
    assert [round(v * 1000) for v in hops[HOPS[2]]] == [1, 10]
    assert [round(v * 1000) for v in hops["total"]] == [11, 25]


def test_an_event_without_a_tick_after_it_is_left_out() -> None:
    timeline = Timeline(since_ms=0)
    timeline.callback = {"d1": (1000, "a")}
    timeline.command = {"d1": 1001}
    timeline.event = {"d1": 1002}
    timeline.ticks = {"a": [999]}

    assert all(values == [] for values in timeline.hops().values())
