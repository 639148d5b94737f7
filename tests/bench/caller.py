"""The benchmark's own process tuned like a longrun service while it measures.

A benchmark's generator, reader and in-process baselines stand in for services (an executor, a
producer, a hand-written consumer), which tune their collector once built
(`shared.runtime.tune_gc`). Left alone, the pytest process's large heap (workloads, results,
pytest itself) made full collections stall the timed calls for hundreds of milliseconds, which
the figures then charged to the system under test. `BENCH_CALLER_GC=default` leaves the
collector alone, to see that difference."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

from shared.runtime import tune_gc


@contextlib.contextmanager
def tuned_like_a_service() -> Iterator[None]:
    """Collector tuned as the services tune theirs while the block runs; restored after."""
    if os.environ.get("BENCH_CALLER_GC") == "default":
        yield
        return
    thresholds = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
