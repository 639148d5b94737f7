"""The Taskiq side: RedisStreamBroker, one task that records the event and kicks a follow-up
task to another stream. Worker: `taskiq worker tests.bench.peers.taskiq_app:broker --workers 1`
(the bench starts it with the settings of `shape.Shape` in its environment).

The consumer group starts at `0`, not taskiq-redis's default `$`, so a worker started after the
backlog was enqueued reads it (with `$` a pre-loaded backlog would be skipped). Tasks are
acknowledged after they ran (taskiq's default `when_saved`; no result backend).
"""

from __future__ import annotations

import functools

from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from tests.bench.peers.shape import FOLLOWUP_TASK, RECORD_TASK, Shape

GROUP = "bench"


def build(shape: Shape) -> RedisStreamBroker:
    """A broker for `shape`; the bench builds one to enqueue, the worker one to consume."""
    broker = RedisStreamBroker(
        shape.redis_url, queue_name=shape.events, consumer_group_name=GROUP, consumer_id="0"
    )
    store = functools.cache(lambda: Redis.from_url(shape.redis_url))

    @broker.task(task_name=FOLLOWUP_TASK)
    async def followup(event_id: str, agent: str) -> None:
        """Declared so the kick is typed; no worker reads its stream, the bench's reader does."""

    @broker.task(task_name=RECORD_TASK)
    async def record(event_id: str, agent: str) -> None:
        """Count the event, keep the last id and append it to the agent's list (one MULTI),
        then kick the follow-up to its own stream."""
        async with store().pipeline(transaction=True) as pipe:
            pipe.hincrby(shape.agent(agent), "events", 1)
            pipe.hset(shape.agent(agent), "last", event_id)
            pipe.rpush(shape.history(agent), event_id)
            await pipe.execute()
        await followup.kicker().with_labels(queue_name=shape.followups).kiq(event_id, agent)

    return broker


@functools.cache
def _from_env() -> RedisStreamBroker:
    return build(Shape.from_env())


def __getattr__(name: str) -> RedisStreamBroker:
    """`taskiq worker module:broker` looks up `broker`; built on first use so importing this
    module in the bench process reads no environment and makes no broker."""
    if name == "broker":
        return _from_env()
    raise AttributeError(name)
