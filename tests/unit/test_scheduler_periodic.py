"""The scheduler's background loops stop even when a step swallows the cancel (gh-86296)."""

from __future__ import annotations

import asyncio
import contextlib

from services.scheduler.timers import Periodic


async def test_stop_ends_a_loop_whose_step_swallowed_the_cancel() -> None:
    steps = 0

    async def step() -> None:
        nonlocal steps
        steps += 1
        # What redis-py under asyncio.wait_for can do on Python 3.11: the cancel is lost.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)

    loop = Periodic("swallower", 0.01, step)
    loop.start()
    await asyncio.sleep(0.03)
    await asyncio.wait_for(loop.stop(), timeout=2.0)
    assert not loop.running
    stopped_at = steps
    await asyncio.sleep(0.1)
    assert steps == stopped_at, "the loop kept running after stop()"


async def test_a_failing_step_keeps_the_loop_alive_until_stopped() -> None:
    calls = 0
    second_call = asyncio.Event()

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls >= 2:
            second_call.set()
        raise RuntimeError("a bad read")

    loop = Periodic("failing", 0.005, step)
    loop.start()
    # Each failure is logged with its traceback, which can take longer than many intervals on a
    # busy machine: wait for the second call (bounded) rather than for a fixed time.
    await asyncio.wait_for(second_call.wait(), timeout=10.0)
    assert loop.running
    await asyncio.wait_for(loop.stop(), timeout=2.0)
    assert not loop.running
