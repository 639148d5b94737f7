"""Coalesced XADDs against a real Redis: concurrent writes share pipelines, every sender gets
its own entry id or its own error, and everything else goes to the real client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ResponseError

from services.ingress.pipelining import CoalescedXadd
from shared.store.client import AnyRedis
from shared.wire.names import Names


class Counted(CoalescedXadd):
    """Counts the pipelines sent."""

    def __init__(self, redis: AnyRedis, **options: Any) -> None:
        super().__init__(redis, **options)
        self.pipelines: list[int] = []

    async def _send(self, batch: list[Any]) -> None:
        self.pipelines.append(len(batch))
        await super()._send(batch)


@pytest.mark.parametrize(("max_batch", "pipelines"), [(256, [50]), (20, [20, 20, 10])])
async def test_concurrent_xadds_share_pipelines_and_each_gets_its_entry_id(
    redis: AnyRedis, names: Names, max_batch: int, pipelines: list[int]
) -> None:
    stream = f"{names.prefix}:coalesced-{max_batch}"
    writer = Counted(redis, max_batch=max_batch)
    ids = await asyncio.gather(*(writer.xadd(stream, {"n": str(n)}) for n in range(50)))
    assert writer.pipelines == pipelines
    entries = await redis.xrange(stream)
    assert [entry_id for entry_id, _ in entries] == ids
    assert [fields[b"n"] for _, fields in entries] == [str(n).encode() for n in range(50)]
    # Idle again: a lone XADD leaves in a pipeline of its own.
    await writer.xadd(stream, {"n": "last"}, maxlen=1000, approximate=True)
    assert writer.pipelines[-1] == 1
    assert await writer.xlen(stream) == 51  # not coalesced: the real client's


async def test_a_failed_xadd_fails_only_its_sender(redis: AnyRedis, names: Names) -> None:
    good, wrong = f"{names.prefix}:good", f"{names.prefix}:not-a-stream"
    await redis.set(wrong, "a string")
    writer = CoalescedXadd(redis)
    answers = await asyncio.gather(
        writer.xadd(good, {"a": "1"}),
        writer.xadd(wrong, {"a": "2"}),
        writer.xadd(good, {"a": "3"}),
        return_exceptions=True,
    )
    assert isinstance(answers[1], ResponseError)
    assert [entry_id for entry_id, _ in await redis.xrange(good)] == [answers[0], answers[2]]


async def test_a_lost_connection_fails_every_sender_of_the_round_trip(
    redis: AnyRedis, names: Names
) -> None:
    class Broken:
        def pipeline(self, transaction: bool) -> Any:
            real = redis.pipeline(transaction=transaction)

            async def execute(raise_on_error: bool) -> Any:
                raise ConnectionError("redis went away")

            real.execute = execute  # type: ignore[method-assign]
            return real

    writer = CoalescedXadd(Broken())  # type: ignore[arg-type]
    answers = await asyncio.gather(
        *(writer.xadd(f"{names.prefix}:s", {"a": "1"}) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(a, ConnectionError) for a in answers)
    assert await redis.exists(f"{names.prefix}:s") == 0
    # The next round trip starts afresh.
    writer._redis = redis  # the connection is back
    assert await writer.xadd(f"{names.prefix}:s", {"a": "2"})
