"""The collector tuning every service applies once built (shared.runtime.tune_gc)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shared.runtime import GC_THRESHOLDS

PROBE = """
import gc
from shared.runtime import tune_gc
before = gc.get_freeze_count()
tune_gc()
print(gc.get_threshold(), before, gc.get_freeze_count())
"""


def test_tune_gc_freezes_start_up_objects_and_raises_the_thresholds() -> None:
    out = subprocess.run(  # noqa: S603 (this interpreter, a fixed probe)
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split(")")
    assert out[0] + ")" == str(GC_THRESHOLDS)
    before, after = (int(x) for x in out[1].split())
    assert before == 0
    assert after > 1000, "modules and settings loaded at start-up should be frozen"


def test_every_service_tunes_the_collector() -> None:
    """Each service calls tune_gc once built: in its main (ledger, executor, and ingress, also in
    its worker factory) or once its subscribers run (scheduler)."""
    root = Path(__file__).resolve().parents[2] / "services"
    for service in ("ledger", "ingress", "turn_executor"):
        text = (root / service / "app.py").read_text()
        assert "tune_gc()" in text.split("def main", 1)[1], service
    ingress = (root / "ingress" / "app.py").read_text()
    assert "tune_gc()" in ingress.split("def create_app", 1)[1].split("def main", 1)[0]
    scheduler = (root / "scheduler" / "app.py").read_text()
    assert "tune_gc()" in scheduler.split("async def start_loops", 1)[1]
