"""The compose stack (docker-compose.yml with the host-network override) under the chaos run's
load generator: agents run rounds of messages, callbacks and timers through ingress to ticks and
turns while the ledger's container is stopped with `docker kill` (and started again, as an
operator would) and the executor's process is killed (the restart policy brings it back); then
the chaos run's invariants hold: every accepted trigger counted once, every history verifies."""

from __future__ import annotations

import asyncio
import json
import os
import signal

from shared.store.client import connect
from shared.wire.names import Names
from tests.bench.loadgen import LoadGenerator, LoadOptions, Target
from tests.chaos.invariants import check, quiesce
from tests.docker.tools import ComposeStack, docker, wait_until

PARTITIONS = 16  # docker-compose.yml's LONGRUN_PARTITIONS


def state(container: str) -> dict[str, object]:
    return dict(json.loads(docker("inspect", container))[0]["State"])


def crash(container: str) -> None:
    """SIGKILL the container's main process from the host: a crash, which the restart policy
    answers (`docker kill` is a stop, which it does not)."""
    pid = int(str(state(container)["Pid"]))
    assert pid > 1, pid
    os.kill(pid, signal.SIGKILL)


def restarted(container: str) -> bool:
    restarts = int(docker("inspect", "-f", "{{.RestartCount}}", container))
    return restarts >= 1 and state(container)["Running"] is True


async def test_the_compose_stack_loses_nothing_when_containers_are_killed(image: str) -> None:
    stack = ComposeStack()
    try:
        await asyncio.to_thread(stack.up)
        ledger, executor = stack.container("ledger"), stack.container("turn-executor")
        target = Target([stack.ingress_url], stack.token, stack.redis_url, "lr", PARTITIONS)
        options = LoadOptions(agents=12, rate=2.0, duration=40.0, step_timeout=120.0)
        generator = LoadGenerator(target, options)
        load = asyncio.create_task(generator.run())

        await asyncio.sleep(10)
        await asyncio.to_thread(docker, "kill", ledger)
        await asyncio.sleep(3)
        assert state(ledger)["Running"] is False
        await asyncio.to_thread(stack.compose, "start", "ledger")
        await asyncio.sleep(7)
        await asyncio.to_thread(crash, executor)
        await asyncio.to_thread(
            wait_until, "the executor is restarted", lambda: restarted(executor)
        )

        report = await load
        redis = connect(stack.redis_url)
        try:
            names = Names("lr", PARTITIONS)
            left = await quiesce(redis, names, 90.0)
            agents = [f"load-{options.run_id}-{n:05d}" for n in range(options.agents)]
            findings = await check(redis, names, generator.accepted, agents)
        finally:
            await redis.aclose()
        summary = json.dumps(
            {"load": report.summary(), "figures": findings.figures, "left": left}, default=str
        )
        print(summary)
        assert findings.violations == [], (findings.violations[:20], stack.logs())
        assert report.failed == [], (report.failed[:20], stack.logs())
        assert report.accepted.unexpected == [], summary
        assert left == {}, summary
        # Rounds went through ingress, callbacks and timers to ticks and turns.
        assert report.completed > 0, summary
        assert findings.figures["accepted callbacks"] > 0, summary
        assert findings.figures["timer triggers"] > 0, summary
    finally:
        await asyncio.to_thread(stack.down)
