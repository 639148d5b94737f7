"""Settings a benchmark passes to the services it starts: `BENCH_<NAME>_LONGRUN_<SETTING>=value`
in the benchmark's environment becomes `LONGRUN_<SETTING>=value` for its services, so a run can
try another batch size or round count without editing code."""

from __future__ import annotations

import os


def passed_settings(bench: str) -> dict[str, str]:
    """`LONGRUN_*` settings named for this benchmark (`bench`: ledger, scheduler, peers...)."""
    knob = f"BENCH_{bench.upper()}_"
    return {
        key.removeprefix(knob): value
        for key, value in os.environ.items()
        if key.startswith(f"{knob}LONGRUN_")
    }
