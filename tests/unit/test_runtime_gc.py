"""The collector tuning every service applies once built (shared.runtime.tune_gc)."""

from __future__ import annotations

import gc
from pathlib import Path

from prometheus_client import CollectorRegistry

from shared.metrics import build_metrics
from shared.runtime import GC_THRESHOLDS, tune_gc, watch_gc


def test_tune_gc_freezes_start_up_objects_and_raises_the_thresholds() -> None:
    """In this process, its state put back after: a child interpreter importing the services'
    libraries took 6-29 s of wall time on a loaded CI machine (0.8 s of CPU), past the unit
    tier's 10 s, for nothing the check needs."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 1000, (
            "modules and settings loaded at start-up should be frozen"
        )
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_every_service_tunes_the_collector() -> None:
    """Each service calls tune_gc once built, timing its collections into its own metrics: in
    its main (ledger, executor, and ingress, also in its worker factory) or once its
    subscribers run (scheduler)."""
    root = Path(__file__).resolve().parents[2] / "services"
    for service in ("ledger", "ingress", "turn_executor"):
        text = (root / service / "app.py").read_text()
        assert "tune_gc(built." in text.split("def main", 1)[1], service
    ingress = (root / "ingress" / "app.py").read_text()
    assert "tune_gc(built." in ingress.split("def create_app", 1)[1].split("def main", 1)[0]
    scheduler = (root / "scheduler" / "app.py").read_text()
    assert "tune_gc(pauses)" in scheduler.split("async def start_loops", 1)[1]


def test_watched_collections_are_timed_by_generation_and_a_second_watch_replaces_the_first() -> (
    None
):
    registry = CollectorRegistry()
    pauses = build_metrics(registry).gc_pauses
    before = list(gc.callbacks)
    try:
        watch_gc(pauses)
        watch_gc(pauses)  # a second app built in the same process: still one callback
        assert len(gc.callbacks) == len(before) + 1
        gc.collect(0)
        gc.collect(2)
        for generation in ("0", "2"):
            count = registry.get_sample_value(
                "longrun_gc_pause_seconds_count", {"generation": generation}
            )
            assert count is not None, generation
            assert count >= 1, generation
        total = registry.get_sample_value("longrun_gc_pause_seconds_sum", {"generation": "2"})
        assert total is not None
        assert total > 0
    finally:
        gc.callbacks[:] = before
