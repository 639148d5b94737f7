"""Console benchmark: what open console pages cost one ingress, and how fast they hear.

A producer XADDs ledger-event entries to the partitions' event streams at BENCH_CONSOLE_RATE
entries per second (default 500, one event each, spread over BENCH_CONSOLE_AGENTS agents in
different partitions, each event stamped with its send time), as the ledger would. Three phases
of BENCH_CONSOLE_SECONDS each, same run, same ingress process:

1. the flow with no watchers (baseline ingress CPU: its readers are idle, nothing is watched);
2. the flow with BENCH_CONSOLE_WATCHERS (default 100) lightweight SSE clients
   (tests/bench/console_watchers.py), spread evenly over the agents, first in one process, then
   split over BENCH_CONSOLE_CLIENT_PROCS processes (default 4): one Python process reading
   5,000 deliveries a second is busy enough to be the bottleneck of its own delays;
3. the same number of watchers, of which BENCH_CONSOLE_TABS (default 3) are real headless
   Chromium tabs on agent pages (each also re-fetches its page's live part after events), the
   SSE clients split as in 2.

Printed: ingress CPU (utime + stime from /proc over the flow) per phase and what the watchers
add over the baseline; the client processes' CPU (busiest, 1.0 = a core); event -> client delay
(arrival minus the event's stamped time) p50, p99 and max for the SSE clients and for the
browser tabs. Nothing about timing is asserted; what is asserted is that every watcher heard
events and none failed.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as sync_redis

from services.ingress.console.session import ConsoleKeys
from shared.wire.names import Names
from tests.integration.conftest import ServiceProcess, free_port

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

OPERATOR = "bench-operator-" + secrets.token_hex(8)
PARTITIONS = 16
ROOT = Path(__file__).resolve().parents[2]


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"BENCH_CONSOLE_{name}", default))


@dataclass(frozen=True)
class Config:
    rate: int = int(_env("RATE", 500))
    seconds: float = _env("SECONDS", 20)
    agents: int = int(_env("AGENTS", 10))
    watchers: int = int(_env("WATCHERS", 100))
    tabs: int = int(_env("TABS", 3))
    client_procs: int = int(_env("CLIENT_PROCS", 4))


@dataclass
class Bench:
    url: str
    ingress: ServiceProcess
    names: Names
    redis_url: str
    agents: list[str]
    cookie: str


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def entry(agent_id: str, seq: int) -> dict[str, bytes]:
    event = {"seq": seq, "type": "bench_event", "at": iso_now(), "agent_id": agent_id,
             "work_item_id": None, "data": {}, "prev_hash": "", "hash": ""}  # fmt: skip
    body = {"agent_id": agent_id, "command_id": f"bench-{seq}", "events": [event]}
    doc = {"id": f"b{seq}", "type": "ledger_events", "version": 1, "at": event["at"], "body": body}
    return {"m": orjson.dumps(doc), "k": agent_id.encode()}


async def produce(bench: Bench, rate: int, seconds: float) -> int:
    """Paced XADDs every 10 ms; returns how many entries were sent."""
    client = sync_redis.Redis.from_url(bench.redis_url)
    tick, sent, seq = 0.01, 0, 0
    start = time.monotonic()
    try:
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate) - sent
            pipe = client.pipeline(transaction=False)
            for _ in range(max(due, 0)):
                agent = bench.agents[seq % len(bench.agents)]
                seq += 1
                stream = bench.names.events(bench.names.partition(agent))
                pipe.xadd(stream, entry(agent, seq), maxlen=20_000, approximate=True)
            pipe.execute()
            sent += max(due, 0)
            await asyncio.sleep(tick)
    finally:
        client.close()
    return sent


def measure_flow(bench: Bench, config: Config) -> tuple[float, int]:
    """Ingress CPU share (1.0 = one core) over a paced flow, and the entries sent."""
    pid = bench.ingress.proc.pid if bench.ingress.proc else 0
    before, started = cpu_seconds(pid), time.monotonic()
    sent = asyncio.run(produce(bench, config.rate, config.seconds))
    return (cpu_seconds(pid) - before) / (time.monotonic() - started), sent


def start_watchers(
    bench: Bench, count: int, seconds: float, procs: int
) -> list[subprocess.Popen[str]]:
    """`count` SSE clients spread evenly over the agents, split over `procs` processes."""
    agents = [bench.agents[n % len(bench.agents)] for n in range(count)]
    module = [sys.executable, "-m", "tests.bench.console_watchers", bench.url, bench.cookie]
    return [
        subprocess.Popen(  # noqa: S603 - our own module
            [*module, str(seconds), *agents[n::procs]], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for n in range(procs)
    ]


def finish_watchers(procs: list[subprocess.Popen[str]]) -> dict[str, Any]:
    """The processes' results together; `cpu` is the busiest one's share of a core."""
    merged: dict[str, Any] = {"received": 0, "delays_ms": [], "errors": [], "cpu": 0.0}
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        result = orjson.loads(out.strip().splitlines()[-1])
        merged["received"] += result["received"]
        merged["delays_ms"] += result["delays_ms"]
        merged["errors"] += result["errors"]
        merged["cpu"] = max(merged["cpu"], result["cpu_s"] / result["wall_s"])
    return merged


def light_phase(bench: Bench, config: Config, procs: int, base_cpu: float) -> None:
    watchers = start_watchers(bench, config.watchers, config.seconds + 8, procs)
    time.sleep(4)  # every stream open before the flow starts
    cpu, _ = measure_flow(bench, config)
    light = finish_watchers(watchers)
    assert light["errors"] == []
    assert light["received"] > 0
    print(f"2. {config.watchers} SSE clients in {procs} process(es): ingress CPU {cpu:.1%} "
          f"(+{cpu - base_cpu:.1%}); busiest client process {light['cpu']:.0%} of a core; "
          f"delay {percentiles(light['delays_ms'])}")  # fmt: skip


def percentiles(delays: list[float]) -> str:
    if not delays:
        return "no events"
    ordered = sorted(delays)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered):.0f} ms, p99 {p99:.0f} ms, max {ordered[-1]:.0f} ms "
        f"({len(ordered)} deliveries)"
    )


@pytest.fixture(scope="module")
def bench(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    prefix = "bc" + secrets.token_hex(4)
    logs = tmp_path_factory.mktemp("logs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(REDIS_URL=redis_url, LONGRUN_PREFIX=prefix, LONGRUN_PARTITIONS=str(PARTITIONS),
               LONGRUN_AGENT_HOME=str(tmp_path_factory.mktemp("home")),
               LONGRUN_OPERATOR_TOKEN=OPERATOR, LONGRUN_LOG_LEVEL="WARNING")  # fmt: skip
    ledger_port, http_port = free_port(), free_port()
    ledger = ServiceProcess("services.ledger", {**env, "LONGRUN_LEDGER_PORT": str(ledger_port)},
                            ledger_port, logs / "ledger.log")  # fmt: skip
    ingress = ServiceProcess("services.ingress", {**env, "LONGRUN_HTTP_PORT": str(http_port)},
                             http_port, logs / "ingress.log")  # fmt: skip
    ledger.start()
    ingress.start()
    asyncio.run(ledger.wait_ready())
    asyncio.run(ingress.wait_ready())
    names = Names(prefix=prefix, partitions=PARTITIONS)
    agents = distinct_partitions(names, Config().agents)
    url = f"http://127.0.0.1:{http_port}"
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {OPERATOR}"}) as http:
        for agent in agents:
            assert http.put(f"/v1/agents/{agent}", json={"loop": "external"}).status_code == 201
    ledger.stop()  # the flow is synthetic: only ingress works from here on
    cookie = ConsoleKeys(OPERATOR).new_session(time.time())
    yield Bench(url, ingress, names, redis_url, agents, cookie)
    ingress.stop()
    client = sync_redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()


def distinct_partitions(names: Names, count: int) -> list[str]:
    found: dict[int, str] = {}
    n = 0
    while len(found) < min(count, names.partitions):
        agent = f"bench-{n}"
        found.setdefault(names.partition(agent), agent)
        n += 1
    return list(found.values())


def open_tabs(bench: Bench, count: int) -> Any:
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.options import Options  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    from tests.browser.conftest import CHROMEDRIVER, CHROMIUM  # noqa: PLC0415 - only here

    options = Options()
    options.binary_location = CHROMIUM
    flags = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-timer-throttling",
        "--disable-renderer-backgrounding",
    ]
    for flag in flags:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.get(f"{bench.url}/ui/login")
    driver.add_cookie({"name": "longrun_session", "value": bench.cookie, "path": "/ui"})
    for n in range(count):
        if n:
            driver.switch_to.new_window("tab")
        driver.get(f"{bench.url}/ui/agents/{bench.agents[n % len(bench.agents)]}")
    return driver


def tab_delays(driver: Any) -> list[float]:
    delays: list[float] = []
    for handle in driver.window_handles:
        driver.switch_to.window(handle)
        arrivals = driver.execute_script("return window.longrunLive.arrivals")
        for _id, arrived_ms, at in arrivals:
            if at:
                stamped = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000
                delays.append(arrived_ms - stamped)
    return delays


def test_console_watchers_cost_and_delay(bench: Bench) -> None:
    config = Config()
    print(f"\nconsole bench: {config}")
    base_cpu, sent = measure_flow(bench, config)
    print(f"1. no watchers: {sent} entries in {config.seconds:.0f} s; ingress CPU {base_cpu:.1%}")

    for procs in sorted({1, config.client_procs}):
        light_phase(bench, config, procs, base_cpu)

    driver = open_tabs(bench, config.tabs)
    try:
        count = config.watchers - config.tabs
        watchers = start_watchers(bench, count, config.seconds + 8, config.client_procs)
        time.sleep(4)
        mixed_cpu, _ = measure_flow(bench, config)
        mixed = finish_watchers(watchers)
        browser = tab_delays(driver)
    finally:
        driver.quit()
    assert mixed["errors"] == []
    assert browser, "the browser tabs heard nothing"
    print(f"3. {config.watchers - config.tabs} SSE clients in {config.client_procs} "
          f"process(es) + {config.tabs} Chromium tabs: "
          f"ingress CPU {mixed_cpu:.1%} (+{mixed_cpu - base_cpu:.1%}); "
          f"busiest client process {mixed['cpu']:.0%} of a core; "
          f"SSE clients delay {percentiles(mixed['delays_ms'])}; "
          f"browser tabs delay {percentiles(browser)}")  # fmt: skip
