"""Load generator: N scripted agents driven over longrun's public surfaces, at a set rate.

Each agent runs rounds one after the other. A round is what a user of longrun does: an operator
message asking for planned work that waits for a callback (HTTP), then the wait is resolved in one
of three ways, in turn: a callback over HTTP, a callback XADDed to `<prefix>:callbacks`, or a
`WaitFor` timer set through the tools route (it replaces the external wait, and its firing wakes
the agent). Every resolution is also delivered a second time with the same key, to prove the
duplicate counts nothing. The round ends when the WorkItem's `work_item_completed` event appears.

Progress is read from the partitions' event streams (XREAD, no consumer group), not by polling
the API: one reader per partition serves every agent, so observing costs almost nothing.

What the generator was told "accepted" (message ids, callback delivery ids, timer commands,
completed WorkItems) is kept in `Accepted`, so a chaos run can check the ledger against it.

Run by hand against a running stack (`longrun up` prints the operator token):
    python -m tests.bench.loadgen --url http://127.0.0.1:8080 --token T --redis-url URL
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import secrets
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import redis.exceptions
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared.store.client import AnyRedis, connect
from shared.wire.codec import decode
from shared.wire.events import LedgerEvents
from shared.wire.names import Names

REQUEST = (
    "Prepare release note {n} for {agent}. Outline the changes, then draft the note. "
    "Wait for the reviewer's callback before you finish."
)
MODES = ("http", "stream", "timer")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class StepTimeout(Exception):
    """A round did not reach its next step in time."""


class Ambiguous(Exception):
    """A request whose answer was lost: it may or may not have been applied."""


class CrashBlocked(Exception):
    """The round's WorkItem was blocked by the crash rule (docs/contract.md §4: a turn failed
    3 times); it is a visible blocker for an operator, so the agent runs no more rounds."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where the stack is: every ingress URL (tried in turn), the operator token, its Redis."""

    ingress_urls: Sequence[str]
    operator_token: str
    redis_url: str
    prefix: str = "lr"
    partitions: int = 16
    cluster: bool = False


@dataclass(frozen=True, slots=True)
class LoadOptions:
    agents: int = 20
    rate: float = 5.0
    """Rounds started per second, across all agents (an agent runs one round at a time)."""
    duration: float = 30.0
    """New rounds start only within this many seconds; then the generator drains."""
    step_timeout: float = 60.0
    """How long one step of a round may take before the round is counted as failed."""
    timer_ms: int = 300
    lost_answer_wait: float = 15.0
    """After a lost answer to a message POST, how long to look for the message before resending."""
    modes: tuple[str, ...] = MODES
    duplicates: bool = True
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))


@dataclass
class Accepted:
    """What longrun acknowledged, per agent: the chaos invariants are checked against this."""

    messages: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Message ids answered 202."""
    ambiguous_messages: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Message POSTs whose answer was lost (they may or may not have been applied)."""
    callbacks: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Delivery ids accepted (HTTP 202, or XADD acknowledged by Redis)."""
    timers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """WorkItem ids whose wait was replaced by an accepted WaitFor timer."""
    completed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """WorkItem ids whose round finished (work_item_completed seen)."""
    crash_blocked: dict[str, list[str | None]] = field(default_factory=lambda: defaultdict(list))
    """WorkItem ids (None if not known yet) blocked by the crash rule during their round."""
    unexpected: list[str] = field(default_factory=list)
    """Answers that contradict the contract (a second delivery that was not a duplicate)."""


@dataclass
class LoadReport:
    elapsed: float
    started: int
    completed: int
    failed: list[str]
    latencies: dict[str, list[float]]
    counts: dict[str, int]
    accepted: Accepted

    def percentile(self, name: str, q: float) -> float | None:
        values = sorted(self.latencies.get(name) or [])
        if not values:
            return None
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    def summary(self) -> dict[str, Any]:
        """Plain numbers, for logs and committed reports."""
        rates = {k: round(v / self.elapsed, 2) for k, v in sorted(self.counts.items())}
        lat = {
            name: {
                "n": len(values),
                **{
                    f"p{int(q * 100)}_ms": round(1000 * (self.percentile(name, q) or 0.0), 1)
                    for q in (0.5, 0.95, 0.99)
                },
            }
            for name, values in sorted(self.latencies.items())
        }
        return {
            "elapsed_s": round(self.elapsed, 1),
            "rounds_started": self.started,
            "rounds_completed": self.completed,
            "rounds_failed": len(self.failed),
            "rounds_per_s": round(self.completed / self.elapsed, 2) if self.elapsed else 0.0,
            "per_s": rates,
            "latency": lat,
        }

    def table(self) -> Table:
        table = Table(title="load generator")
        for column in ("latency", "n", "p50 ms", "p95 ms", "p99 ms"):
            table.add_column(column, justify="right" if column != "latency" else "left")
        for name, values in sorted(self.latencies.items()):
            cells = [f"{1000 * (self.percentile(name, q) or 0.0):.1f}" for q in (0.5, 0.95, 0.99)]
            table.add_row(name, str(len(values)), *cells)
        return table


Event = tuple[str, str | None, dict[str, Any]]


class AgentEvents:
    """One agent's events in order; events looked at and put back are read again first."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.replay: list[Event] = []

    async def get(self, within: float) -> Event:
        if self.replay:
            return self.replay.pop(0)
        return await asyncio.wait_for(self.queue.get(), max(0.0, within))

    def put_back(self, events: list[Event]) -> None:
        self.replay[:0] = events


class EventWatch:
    """Reads every partition's event stream from its end at start; routes events to agents."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        self.redis = redis
        self.names = names
        self.queues: dict[str, AgentEvents] = {}
        self.seen = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False

    def queue(self, agent_id: str) -> AgentEvents:
        return self.queues.setdefault(agent_id, AgentEvents())

    async def start(self) -> None:
        for p in range(self.names.partitions):
            stream = self.names.events(p)
            last = await self._retry(lambda s=stream: self.redis.xrevrange(s, "+", "-", count=1))  # type: ignore[misc]
            start = last[0][0] if last else b"0-0"
            self._tasks.append(asyncio.create_task(self._read(stream, start)))

    async def _retry(self, call: Callable[[], Any]) -> Any:
        while True:
            try:
                return await call()
            except REDIS_DOWN:
                await asyncio.sleep(0.2)

    async def _read(self, stream: str, last: bytes | str) -> None:
        while not self._stopped:
            try:
                reply: Any = await self.redis.xread({stream: last}, count=500, block=1000)
            except REDIS_DOWN:
                await asyncio.sleep(0.2)  # Redis restarting; resume from the last id read
                continue
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    last = entry_id
                    self._route(fields)

    def _route(self, fields: dict[bytes, bytes]) -> None:
        agent = fields.get(b"k", b"").decode()
        queue = self.queues.get(agent)
        if queue is None:
            return
        body = decode(fields[b"m"]).body
        if not isinstance(body, LedgerEvents):
            return
        for event in body.events:
            self.seen += 1
            queue.queue.put_nowait((event.type, event.work_item_id, event.data))

    async def stop(self) -> None:
        # Stopped by a flag as well as a cancel: on Python 3.11 a cancel can be swallowed
        # mid-Redis-call (gh-86296), which left this waiting on a reader for minutes.
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)


class Api:
    """HTTP calls with failover across ingress processes and retries on lost answers."""

    def __init__(self, target: Target, timeout: float) -> None:
        self.urls = list(target.ingress_urls)
        self._next = itertools.cycle(range(len(self.urls)))
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=2.0),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=100),
        )
        self.auth = {"Authorization": f"Bearer {target.operator_token}"}

    async def call(
        self,
        method: str,
        path: str,
        *,
        deadline: float,
        on_latency: Callable[[float], None],
        on_retry: Callable[[str], None],
        auth: bool = True,
        retry: bool = True,
        **kwargs: Any,
    ) -> httpx.Response:
        """The first answer that is neither a transport failure nor retryable; retried on the
        next ingress until `deadline`. Callers make repeats safe (idempotency keys)."""
        headers = {**(self.auth if auth else {}), **kwargs.pop("headers", {})}
        while True:
            url = self.urls[next(self._next)] + path
            began = time.perf_counter()
            try:
                response = await self.http.request(method, url, headers=headers, **kwargs)
            except httpx.ConnectError as exc:
                on_retry(type(exc).__name__)  # never sent: safe to send again
            except httpx.TransportError as exc:
                on_retry(type(exc).__name__)
                if not retry:
                    raise Ambiguous(type(exc).__name__) from exc
            else:
                if response.status_code not in RETRY_STATUSES:
                    on_latency(time.perf_counter() - began)
                    return response
                on_retry(str(response.status_code))
                if not retry and response.status_code != 429:
                    raise Ambiguous(str(response.status_code))
            if time.monotonic() > deadline:
                raise StepTimeout(f"{method} {path}: no answer before the step deadline")
            await asyncio.sleep(0.1)

    async def close(self) -> None:
        await self.http.aclose()


class LoadGenerator:
    def __init__(self, target: Target, options: LoadOptions) -> None:
        self.target = target
        self.options = options
        self.names = Names(target.prefix, target.partitions)
        self.accepted = Accepted()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.counts: dict[str, int] = defaultdict(int)
        self.failed: list[str] = []
        self.started = 0
        self.completed = 0
        self.in_flight = 0
        self._modes = itertools.cycle(options.modes)
        self._began = 0.0

    # ------------------------------------------------------------------ running

    async def run(self, console: Console | None = None) -> LoadReport:
        redis = connect(self.target.redis_url, cluster=self.target.cluster)
        api = Api(self.target, timeout=min(30.0, self.options.step_timeout))
        watch = EventWatch(redis, self.names)
        try:
            await watch.start()
            self._began = time.monotonic()
            agents = [f"load-{self.options.run_id}-{n:05d}" for n in range(self.options.agents)]
            for agent in agents:
                watch.queue(agent)
            starts: asyncio.Queue[int] = asyncio.Queue()
            workers = [
                asyncio.create_task(self._agent(agent, api, redis, watch, starts))
                for agent in agents
            ]
            pacer = asyncio.create_task(self._pace(starts, len(agents)))
            await self._show(console, watch, workers)
            await pacer
        finally:
            await watch.stop()
            await api.close()
            await redis.aclose()
        elapsed = time.monotonic() - self._began
        self.counts["events_observed"] = watch.seen
        return LoadReport(
            elapsed,
            self.started,
            self.completed,
            self.failed,
            dict(self.latencies),
            dict(self.counts),
            self.accepted,
        )

    async def _pace(self, starts: asyncio.Queue[int], agents: int) -> None:
        """Release round starts at the configured rate; then one stop token per agent."""
        interval = 1.0 / self.options.rate if self.options.rate > 0 else 0.0
        n = 0
        end = self._began + self.options.duration
        while time.monotonic() < end:
            starts.put_nowait(n)
            n += 1
            due = self._began + n * interval
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        for _ in range(agents):
            starts.put_nowait(-1)

    async def _show(
        self, console: Console | None, watch: EventWatch, workers: list[asyncio.Task[None]]
    ) -> None:
        done = asyncio.gather(*workers)
        if console is None:
            await done
            return
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[line]}"),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("load", total=self.options.duration, line="")
            while not done.done():
                elapsed = time.monotonic() - self._began
                p99 = sorted(self.latencies.get("round", []) or [0.0])
                line = (
                    f"started {self.started} done {self.completed} in flight {self.in_flight} "
                    f"failed {len(self.failed)} events {watch.seen} "
                    f"round p99 {1000 * p99[int(0.99 * (len(p99) - 1))]:.0f} ms"
                )
                progress.update(task, completed=min(elapsed, self.options.duration), line=line)
                await asyncio.wait({done}, timeout=0.25)
            await done

    # ------------------------------------------------------------------ one agent

    async def _agent(
        self,
        agent: str,
        api: Api,
        redis: AnyRedis,
        watch: EventWatch,
        starts: asyncio.Queue[int],
    ) -> None:
        token: str | None = None
        round_no = 0
        end = self._began + self.options.duration
        # A backlog of starts left when the duration ends is dropped, not run late.
        while await starts.get() >= 0 and time.monotonic() < end:
            self.started += 1
            self.in_flight += 1
            began = time.monotonic()
            try:
                if token is None:
                    token = await self._create(agent, api)
                await self._round(
                    agent, round_no, token=token, api=api, redis=redis, events=watch.queue(agent)
                )
                self.completed += 1
                self.latencies["round"].append(time.monotonic() - began)
            except StepTimeout as exc:
                self.failed.append(f"{agent} round {round_no}: {exc}")
                return  # the agent's state is unknown now: it runs no more rounds
            except CrashBlocked as exc:
                self.accepted.crash_blocked[agent].append(exc.args[0])
                self._count("rounds blocked by the crash rule")
                return
            finally:
                self.in_flight -= 1
            round_no += 1

    def _deadline(self) -> float:
        return time.monotonic() + self.options.step_timeout

    def _http(self, route: str) -> dict[str, Any]:
        return {
            "on_latency": self.latencies[f"http {route}"].append,
            "on_retry": lambda why: self._count(f"retries {route} {why}"),
        }

    def _count(self, name: str) -> None:
        self.counts[name] += 1

    async def _create(self, agent: str, api: Api) -> str:
        response = await api.call(
            "PUT", f"/v1/agents/{agent}", deadline=self._deadline(), **self._http("agent")
        )
        _expect(response, (200, 201))
        self._count("agents_created")
        return str(urlsplit(response.json()["callback_url"]).path).rsplit("/", 1)[-1]

    async def _round(
        self,
        agent: str,
        n: int,
        *,
        token: str,
        api: Api,
        redis: AnyRedis,
        events: AgentEvents,
    ) -> None:
        sent = time.monotonic()
        await self._message(agent, n, api, events)
        wait = await self._next(
            events, lambda t, _, d: _is_external_wait(t, d), "an external wait", None
        )
        work_item = str(wait[1])
        self.latencies["message to wait"].append(time.monotonic() - sent)
        for attempt in itertools.count():
            mode = next(self._modes)
            resolved = time.monotonic()
            key = f"{self.options.run_id}-{agent}-{n}" + (f"-{attempt}" if attempt else "")
            if mode == "http":
                await self._http_callback(agent, token, key, api)
            elif mode == "stream":
                await self._stream_callback(agent, token, key, redis)
            else:
                await self._timer(agent, work_item, key, api)
            await self._next(
                events,
                lambda t, w, _: t == "wait_triggered" and w == work_item,
                "trigger",
                work_item,
            )
            self.latencies[f"{mode} to trigger"].append(time.monotonic() - resolved)
            # A turn interrupted after it cleared the wait is retried, and the agent may ask for
            # the callback again: a new external wait on the same item is answered again.
            kind, _, _ = await self._next(
                events,
                lambda t, w, d: (
                    w == work_item and (t == "work_item_completed" or _is_external_wait(t, d))
                ),
                "completion",
                work_item,
            )
            if kind == "work_item_completed":
                break
            self._count("waits asked again")
        self.latencies["trigger to completed"].append(time.monotonic() - resolved)
        self.accepted.completed[agent].append(work_item)

    async def _next(
        self,
        events: AgentEvents,
        match: Callable[[str, str | None, dict[str, Any]], bool],
        what: str,
        work_item: str | None,
    ) -> Event:
        deadline = self._deadline()
        while True:
            try:
                event = await events.get(deadline - time.monotonic())
            except TimeoutError:
                raise StepTimeout(f"no {what} within {self.options.step_timeout:.0f}s") from None
            if match(*event):
                return event
            if _crash_blocked(*event) and work_item in (None, event[1]):
                raise CrashBlocked(event[1])

    async def _message(self, agent: str, n: int, api: Api, events: AgentEvents) -> None:
        """POST the request. Messages carry no idempotency key, so after a lost answer (a killed
        ingress, a 503 while the command waits in its stream) the generator first looks for the
        message in the agent's events, and sends again only if it did not arrive."""
        text = REQUEST.format(n=n, agent=agent)
        deadline = self._deadline()
        while True:
            try:
                response = await api.call(
                    "POST",
                    f"/v1/agents/{agent}/messages",
                    json={"text": text},
                    deadline=deadline,
                    retry=False,
                    **self._http("message"),
                )
            except Ambiguous:
                self.accepted.ambiguous_messages[agent] += 1
                found = await self._find_message(events, text)
                if found is not None:
                    self.accepted.messages[agent].append(found)
                    self._count("messages found after a lost answer")
                    return
                if time.monotonic() > deadline:
                    raise StepTimeout("POST message: no answer before the step deadline") from None
                continue
            _expect(response, (202,))
            self.accepted.messages[agent].append(str(response.json()["message_id"]))
            self._count("messages")
            return

    async def _find_message(self, events: AgentEvents, text: str) -> str | None:
        """The id of the message with `text` if it shows up in the agent's events soon."""
        seen: list[Event] = []
        deadline = time.monotonic() + self.options.lost_answer_wait
        found = None
        while found is None and time.monotonic() < deadline:
            try:
                event = await events.get(deadline - time.monotonic())
            except TimeoutError:
                break
            seen.append(event)
            kind, _, data = event
            if kind == "operator_message_received" and data.get("text") == text:
                found = str(data["message_id"])
        events.put_back(seen)
        return found

    async def _http_callback(self, agent: str, token: str, key: str, api: Api) -> None:
        body = b'{"verdict": "approved"}'
        answers = []
        for _ in range(2 if self.options.duplicates else 1):
            response = await api.call(
                "POST",
                f"/v1/callbacks/{token}",
                content=body,
                headers={"Content-Type": "application/json", "Idempotency-Key": key},
                auth=False,
                deadline=self._deadline(),
                **self._http("callback"),
            )
            _expect(response, (202,))
            answers.append(response.json().get("disposition"))
            self._count("callbacks_http")
        self.accepted.callbacks[agent].append(key)
        if answers[1:] and answers[1] != "duplicate":
            self.accepted.unexpected.append(f"{agent}: second delivery of {key} was {answers[1]}")

    async def _stream_callback(self, agent: str, token: str, key: str, redis: AnyRedis) -> None:
        fields = {
            "token": token,
            "body": '{"verdict": "approved"}',
            "content_type": "application/json",
            "delivery_id": key,
        }
        deadline = self._deadline()
        for _ in range(2 if self.options.duplicates else 1):
            while True:
                try:
                    await redis.xadd(self.names.callbacks, fields)  # type: ignore[arg-type]
                    break
                except REDIS_DOWN:
                    # Not acknowledged: not accepted yet. The same delivery id makes a repeat safe.
                    self._count("retries stream")
                    if time.monotonic() > deadline:
                        raise StepTimeout("XADD callbacks: Redis did not come back") from None
                    await asyncio.sleep(0.2)
            self._count("callbacks_stream")
        self.accepted.callbacks[agent].append(key)

    async def _timer(self, agent: str, work_item: str, key: str, api: Api) -> None:
        args = {
            "reason": "Wait for the review timer",
            "wake": "timer",
            "wake_after_ms": self.options.timer_ms,
            "work_item_id": work_item,
        }
        for _ in range(2 if self.options.duplicates else 1):
            response = await api.call(
                "POST",
                f"/v1/agents/{agent}/tools/WaitFor",
                json={"args": args, "command_id": f"timer-{key}"},
                deadline=self._deadline(),
                **self._http("tool"),
            )
            _expect(response, (200,))
            self._count("timers")
        self.accepted.timers[agent].append(work_item)


def _crash_blocked(event_type: str, work_item: str | None, data: dict[str, Any]) -> bool:
    if event_type != "work_item_updated" or work_item is None:
        return False
    blocked_by = (data.get("work_item") or {}).get("blocked_by") or ""
    return str(blocked_by).startswith("turn failed")


def _is_external_wait(event_type: str, data: dict[str, Any]) -> bool:
    return event_type == "wait_created" and (data.get("wait") or {}).get("wake") == "external"


def _expect(response: httpx.Response, statuses: tuple[int, ...]) -> None:
    if response.status_code not in statuses:
        raise StepTimeout(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}: {response.text[:300]}"
        )


# ---------------------------------------------------------------------- command line


def parse(argv: Sequence[str]) -> tuple[Target, LoadOptions]:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.loadgen", description=__doc__)
    parser.add_argument("--url", action="append", help="an ingress URL (repeat for several)")
    parser.add_argument("--token", default=os.environ.get("LONGRUN_OPERATOR_TOKEN"))
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--prefix", default=os.environ.get("LONGRUN_PREFIX", "lr"))
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--rate", type=float, default=5.0, help="rounds started per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of new rounds")
    parser.add_argument("--step-timeout", type=float, default=60.0)
    parser.add_argument("--timer-ms", type=int, default=300)
    args = parser.parse_args(argv)
    if not args.token or not args.redis_url:
        parser.error("--token (or LONGRUN_OPERATOR_TOKEN) and --redis-url (or REDIS_URL)")
    target = Target(
        args.url or ["http://127.0.0.1:8080"],
        args.token,
        args.redis_url,
        args.prefix,
        args.partitions,
        args.cluster,
    )
    options = LoadOptions(
        agents=args.agents,
        rate=args.rate,
        duration=args.duration,
        step_timeout=args.step_timeout,
        timer_ms=args.timer_ms,
    )
    return target, options


def main(argv: Sequence[str] | None = None) -> int:
    target, options = parse(sys.argv[1:] if argv is None else argv)
    console = Console(stderr=True)
    report = asyncio.run(LoadGenerator(target, options).run(console))
    console.print(report.table())
    console.print(report.summary())
    for failure in report.failed[:20]:
        console.print(f"[red]failed[/] {failure}", highlight=False)
    return 1 if report.failed or report.accepted.unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
