"""The integration tier's ledger, scheduler and executor tests, run unchanged on the cluster.

Their fixtures (`redis`, `names`, `ledger`, `reads`, `client`) come from tests/cluster/conftest.py
and point at the 3-primary cluster, with four partitions spread over all three primaries. Every
ledger commit and load, the scheduler's snapshots, tick publishing, timers and watchdog, and the
executor's leases and turns then run against it: a Function touching a key of another slot, or a
multi-key command across slots, fails there (CROSSSLOT, or redis-py refusing to route it), so a
passing run shows each of those steps stays in one slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import ModuleType

import pytest

from services.ledger.service import LedgerService
from shared.store.client import AnyRedis
from shared.wire.names import Names
from tests.integration import test_executor_turns, test_ledger_smoke, test_scheduler_service
from tests.integration.conftest import Found, Pump, pumping


def adopt(
    module: ModuleType, *, skip: tuple[str, ...] = (), leave_out: tuple[str, ...] = ()
) -> None:
    """Collect `module`'s tests and its own fixtures here, except the fixtures named in `skip`
    (replaced by cluster-safe ones in this module or the conftest) and the tests in
    `leave_out`."""
    for key, value in vars(module).items():
        if key in leave_out:
            continue
        is_fixture = type(value).__name__ == "FixtureFunctionDefinition"
        if is_fixture and getattr(value, "name", key) in skip:
            continue
        if is_fixture or (key.startswith("test_") and callable(value)):
            globals()[key] = value


adopt(test_ledger_smoke)
adopt(test_scheduler_service)
# The executor module's `redis` builds a single-server client; its `pump` reads every partition's
# commands stream in one XREAD, which a cluster refuses (the streams live on different nodes).
adopt(test_executor_turns, skip=("redis", "pump"))


@pytest.fixture
async def pump(redis: AnyRedis, names: Names, ledger: LedgerService) -> AsyncIterator[Pump]:
    """The ledger in process, as in the executor tests, reading one partition's stream at a time
    (the service's subscribers read them the same way: one stream per subscriber)."""
    streams = {names.commands(p): "0-0" for p in range(names.partitions)}

    async def read(last: dict[str, str]) -> Found:
        streams.update(last)
        found: Found = []
        for stream, cursor in streams.items():
            found += await redis.xread({stream: cursor}, count=100) or []
        if not found:
            await asyncio.sleep(0.02)
        return found

    async with pumping(ledger, read) as control:
        yield control
