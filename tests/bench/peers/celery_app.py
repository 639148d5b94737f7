"""The Celery side: one task that records the event and publishes a follow-up task to another
queue. Worker: `celery -A tests.bench.peers.celery_app worker --pool solo` (the bench starts it
with the settings of `shape.Shape` in its environment).

Settings chosen to match what longrun promises, not Celery's defaults: `task_acks_late` (the
event is acknowledged after the handler ran, as longrun's consumer groups ack after the commit;
Celery's default acks on receipt and loses the task if the worker dies) and no result backend
(longrun's path returns nothing either).
"""

from __future__ import annotations

import functools
import os

import redis
from celery import Celery

from tests.bench.peers.shape import FOLLOWUP_TASK, RECORD_TASK, Shape

PREFETCH_ENV = "BENCH_PEERS_CELERY_PREFETCH"


def build(shape: Shape, prefetch: int = 4) -> Celery:
    """An app for `shape`; the bench builds one to enqueue, the worker one to consume."""
    app = Celery("bench-peers", broker=shape.redis_url, set_as_current=False)
    app.conf.update(
        task_default_queue=shape.events,
        task_acks_late=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=prefetch,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    store = functools.cache(lambda: redis.Redis.from_url(shape.redis_url))

    @app.task(name=RECORD_TASK)  # type: ignore[untyped-decorator]
    def record(event_id: str, agent: str) -> None:
        """Count the event, keep the last id and append it to the agent's list (one MULTI),
        then publish the follow-up."""
        pipe = store().pipeline(transaction=True)
        pipe.hincrby(shape.agent(agent), "events", 1)
        pipe.hset(shape.agent(agent), "last", event_id)
        pipe.rpush(shape.history(agent), event_id)
        pipe.execute()
        app.send_task(FOLLOWUP_TASK, args=(event_id, agent), queue=shape.followups)

    return app


@functools.cache
def _from_env() -> Celery:
    return build(Shape.from_env(), int(os.environ.get(PREFETCH_ENV, "4")))


def __getattr__(name: str) -> Celery:
    """`celery -A` looks up `app`; built on first use so importing this module in the bench
    process reads no environment and makes no app."""
    if name == "app":
        return _from_env()
    raise AttributeError(name)
