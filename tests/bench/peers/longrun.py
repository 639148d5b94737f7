"""longrun as a system of the peers benchmark: agents blocked on external waits, callbacks
XADDed to `<prefix>:callbacks`, ticks read from the partition tick streams."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry

from services.ledger.service import LedgerService
from shared.domain.capability import TOKEN_SEPARATOR, hash_token
from shared.metrics import build_metrics
from shared.runtime import new_id, utc_now
from shared.store.client import AnyRedis
from shared.store.functions import load_functions
from shared.wire.names import Group, Names
from tests.bench.peers.measure import Sent
from tests.bench.settings import passed_settings
from tests.integration.conftest import ServiceProcess, free_port
from tests.integration.scheduler_driver import create, ensure, wait_for

PARTITIONS = int(os.environ.get("BENCH_PEERS_LONGRUN_PARTITIONS", "16"))
"""The deployment's partition count (LONGRUN_PARTITIONS, default 16), read here too so the
benchmark's own keys match the services'."""
STOP_GRACE = 30.0
OPERATOR = "bench-operator-" + secrets.token_hex(8)


@dataclass
class Longrun:
    """Ingress, ledger and scheduler as one process each; no executor (the reader releases
    each tick's marker, as the executor does once its turn is over)."""

    redis_url: str
    tmp: Path
    redis: AnyRedis
    name: str = "longrun"
    processes: str = "ingress + ledger + scheduler, 1 process each"
    names: Names = field(default_factory=lambda: Names("lr" + secrets.token_hex(3), PARTITIONS))
    tokens: dict[str, str] = field(default_factory=dict)
    procs: dict[str, ServiceProcess] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What went wrong outside the measured path (printed with the results)."""

    async def setup(self, agents: list[str]) -> None:
        """Each agent: one WorkItem blocked on an external wait with a capability token. Done
        in-process through LedgerService (as the HTTP API would), before the services start."""
        await load_functions(self.redis)
        ledger = LedgerService(
            self.redis,
            self.names,
            build_metrics(CollectorRegistry()),
            clock=utc_now,
            new_id=new_id,
            wake_limit=25,
        )
        for start in range(0, len(agents), 250):
            chunk = agents[start : start + 250]
            items = {a: new_id("wi_") for a in chunk}
            self.tokens |= {a: f"{a}{TOKEN_SEPARATOR}{secrets.token_hex(16)}" for a in chunk}
            await ledger.apply_batch([ensure(a) for a in chunk])
            await ledger.apply_batch([create(a, items[a]) for a in chunk])
            waits = [
                wait_for(
                    a,
                    items[a],
                    wake="external",
                    capability_token_hash=hash_token(self.tokens[a]),
                )
                for a in chunk
            ]
            await ledger.apply_batch(waits)
        # The scheduler starts at the tail: the set-up events leave every agent dormant anyway.
        for p in range(PARTITIONS):
            await self.redis.xgroup_create(
                self.names.events(p), Group.SCHEDULER, id="$", mkstream=True
            )
            stream = self.names.ticks(p)
            newest = await self.redis.xrevrange(stream, count=1)
            self.last[stream] = newest[0][0].decode() if newest else "0-0"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
        env.update(
            REDIS_URL=self.redis_url,
            LONGRUN_PREFIX=self.names.prefix,
            LONGRUN_PARTITIONS=str(PARTITIONS),
            LONGRUN_AGENT_HOME=str(self.tmp / "home"),
            LONGRUN_OPERATOR_TOKEN=OPERATOR,
            LONGRUN_CALLBACK_RATE="0",
            LONGRUN_LOG_LEVEL="WARNING",
            # No turn ever runs here, so every triggered agent looks owed a turn: no repairs.
            LONGRUN_WATCHDOG_GRACE_MS=str(3_600_000),
        )
        env.update(passed_settings("peers"))
        return env

    async def start(self) -> None:
        ports = {
            "ledger": "LONGRUN_LEDGER_PORT",
            "scheduler": "LONGRUN_SCHEDULER_PORT",
            "ingress": "LONGRUN_HTTP_PORT",
        }
        for name, port_env in ports.items():
            port = free_port()
            env = {**self._env(), port_env: str(port)}
            log = self.tmp / f"{self.names.prefix}-{name}.log"
            self.procs[name] = ServiceProcess(f"services.{name}", env, port, log)
            self.procs[name].start()
        for proc in self.procs.values():
            await proc.wait_ready(120)

    async def stop_intake(self) -> None:
        await self._stop(self.procs["ingress"])

    async def start_intake(self) -> None:
        self.procs["ingress"].start()

    async def stop(self) -> None:
        for proc in self.procs.values():
            await self._stop(proc)

    async def _stop(self, service: ServiceProcess) -> None:
        """SIGTERM, then SIGKILL after STOP_GRACE; a slow stop is reported, not fatal."""
        proc = service.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.notes.append(f"{service.module} ignored SIGTERM for {STOP_GRACE:.0f} s: killed")
            proc.kill()
            proc.wait(timeout=10)

    async def send(self, events: Sent) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for event_id, agent in events:
            entry = {
                "token": self.tokens[agent],
                "body": b'{"status": "done"}',
                "content_type": "application/json",
                "delivery_id": event_id,
            }
            pipe.xadd(self.names.callbacks, entry)
        await pipe.execute()

    async def followups(self) -> list[tuple[str, str | None]]:
        got = await self.redis.xread(self.last, count=1000, block=100)
        agents: list[str] = []
        for stream, entries in got or []:
            self.last[stream.decode()] = entries[-1][0].decode()
            agents += [fields[b"k"].decode() for _, fields in entries]
        if agents:
            await self.redis.delete(*(self.names.outstanding_tick(a) for a in agents))
        return [(a, None) for a in agents]

    def pids(self) -> dict[str, int]:
        return {name: p.proc.pid for name, p in self.procs.items() if p.proc is not None}

    async def verify(self, sent: Sent) -> None:
        """From the ledger, not from the reader: each delivery is one wait_triggered event in
        its agent's (hash-chained) history, and the waits' trigger counts add up."""
        expected: dict[str, list[str]] = {}
        for event_id, agent in sent:
            expected.setdefault(agent, []).append(event_id)
        agents = list(expected)
        pipe = self.redis.pipeline(transaction=False)
        for agent in agents:
            pipe.lrange(self.names.history(agent), 0, -1)
            pipe.hvals(self.names.waits(agent))
        found = await pipe.execute()
        for n, agent in enumerate(agents):
            history = [orjson.loads(e) for e in found[2 * n]]
            triggered = [e["data"]["delivery_id"] for e in history if e["type"] == "wait_triggered"]
            assert triggered == expected[agent], agent
            counts = [orjson.loads(w)["trigger_count"] for w in found[2 * n + 1]]
            assert counts == [len(expected[agent])], agent
