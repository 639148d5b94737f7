"""Webhook acceptance checks: the scheduler calls them, since the ledger never waits on the
network (docs/architecture.md). Each verifying WorkItem's awaited webhook checks are POSTed,
signed with LONGRUN_WEBHOOK_SECRET, with bounded concurrency and the check's timeout; the answer
becomes a `RecordVerdict` command whose id is derived from (item, attempt, check), so a call
repeated after a crash is a duplicate verdict, never a second one. Anything but a 2xx JSON
`{passed: bool, reason: string}` fails the check (fail-closed).

A check an agent set (or a delegator) is called only where LONGRUN_WEBHOOK_ALLOW lets it: its
host is resolved here, every address must be public or allowed as an address, and the call goes
to the address that was checked (so a name cannot resolve elsewhere between the check and the
connection); a refused call fails the check with `webhook_not_allowed: <why>` and sends nothing.
Redirects are never followed: a 3xx answer fails the check like any other non-2xx.

Work arrives two ways: `work_item_verifying` events (consumer group `webhooks` on the partition
event streams, acked once the verdicts are sent), and a sweep at start and every so often that
finds verifying items whose webhook checks have no verdict (a crash, a trimmed stream)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import structlog

from services.scheduler.webhook_http import ClientPool
from shared.consumer import Delivered, required
from shared.domain.acceptance import SetBy, WebhookCheck, verdict_command_id
from shared.domain.records import WorkItem
from shared.domain.webhooks import IPAddress, WebhookAllow, target_of
from shared.ledger_client import LedgerClient
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.store.verifying import verifying_items
from shared.wire.codec import CodecError
from shared.wire.commands import RecordVerdict
from shared.wire.events import LedgerEvents, WorkItemVerifying
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.scheduler.webhooks")

SIGNATURE_HEADER = "X-Longrun-Signature"
REASON_MAX = 4000
ANSWER_SHAPE = 'the answer is not {"passed": bool, "reason": string}'
NOT_ALLOWED = "webhook_not_allowed"


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one call goes: the URL (its host replaced by the checked address for an agent's
    check), the Host header and TLS name that keep the original host, for httpx."""

    url: str
    headers: dict[str, str]
    extensions: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PendingCheck:
    """One webhook check of one attempt, still without a verdict."""

    agent_id: str
    item: WorkItem
    attempt: int
    index: int
    check: WebhookCheck

    @property
    def command_id(self) -> str:
        return verdict_command_id(self.item.id, self.attempt, self.index)


def pending_checks(item: WorkItem) -> list[PendingCheck]:
    """The item's webhook checks awaiting a verdict in its current attempt."""
    ver = item.verification
    if not item.is_verifying or ver is None:
        return []
    out = []
    for index in ver.pending():
        check = item.acceptance[index] if index < len(item.acceptance) else None
        if isinstance(check, WebhookCheck):
            out.append(PendingCheck(item.agent_id, item, ver.attempt, index, check))
    return out


def signature(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def request_body(pending: PendingCheck) -> bytes:
    ver = pending.item.verification
    report = ver.report_candidate if ver is not None else None
    return orjson.dumps(
        {
            "agent_id": pending.agent_id,
            "work_item": pending.item.model_dump(mode="json"),
            "report": report,
            "attempt": pending.attempt,
        }
    )


def judge(status: int, content: bytes) -> tuple[bool, str]:
    """The verdict an answer gives: only a 2xx JSON `{passed: bool, reason: string}` counts."""
    if not 200 <= status < 300:
        return False, f"webhook answered HTTP {status}"
    try:
        doc = orjson.loads(content)
    except orjson.JSONDecodeError:
        return False, f"webhook answered HTTP {status} without JSON: {ANSWER_SHAPE}"
    if not isinstance(doc, dict):
        return False, f"webhook {ANSWER_SHAPE}"
    passed, reason = doc.get("passed"), doc.get("reason")
    if not isinstance(passed, bool) or not isinstance(reason, str):
        return False, f"webhook {ANSWER_SHAPE}"
    return passed, reason.strip()[:REASON_MAX] or ("passed" if passed else "failed")


def decode_verifying(fields: Mapping[Any, Any]) -> list[PendingCheck]:
    """The webhook checks a `ledger_events` entry starts (most entries start none)."""
    try:
        doc = orjson.loads(required(fields, "m"))
        if doc.get("type") != LedgerEvents.message_type:
            raise CodecError(f"{doc.get('type')!r} is not {LedgerEvents.message_type!r}")
        events = doc["body"]["events"]
        found = []
        for event in events:
            if event.get("type") == WorkItemVerifying.message_type:
                item = WorkItem.model_validate(event["data"]["work_item"])
                found += pending_checks(item)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CodecError(f"invalid ledger_events: {exc!r}") from None
    return found


class WebhookRunner:
    """Calls webhook checks and sends their verdicts; one call per check at a time in this
    process, at most `concurrency` calls at once over reused connections (`ClientPool`)."""

    def __init__(
        self,
        redis: AnyRedis,
        names: Names,
        ledger: LedgerClient,
        *,
        secret: str | None,
        concurrency: int,
        allow: WebhookAllow | None = None,
    ) -> None:
        self.reads = ReadModel(redis, names)
        self.allow = allow or WebhookAllow()
        """Where agent-set checks may call (LONGRUN_WEBHOOK_ALLOW); operator-set ones anywhere."""
        self.redis = redis
        self.ledger = ledger
        self.secret = secret
        self.pool = ClientPool(concurrency)
        self.entries = asyncio.Semaphore(concurrency)
        """Event entries whose checks run: reading the stream waits while all are taken."""
        self.inflight: dict[str, asyncio.Task[None]] = {}
        self.entry_tasks: set[asyncio.Task[None]] = set()
        self.calls = 0

    async def close(self) -> None:
        """Cancel the calls still running before closing their connections: a call cut off by
        the close would read as an unreachable webhook and fail its check. Cancelled, it sends
        no verdict, its entry stays pending, and the next process makes the call again."""
        tasks = [*self.inflight.values(), *self.entry_tasks]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self.pool.close()

    async def handle(self, batch: Sequence[Delivered[list[PendingCheck]]]) -> None:
        """Event entries (the consumer acks none: `AckPolicy.MANUAL`). One that starts no check
        is acked at once; each other one by a task of its own once its verdicts are sent, so
        a slow webhook holds up no entry read after it, and a crash leaves the entry pending."""
        idle: dict[str, list[str]] = {}
        for one in batch:
            if not one.value:
                idle.setdefault(one.stream, []).append(one.entry_id)
        for stream, ids in idle.items():
            await self.redis.xack(stream, Group.WEBHOOKS, *ids)
        for one in batch:
            if one.value:
                await self.entries.acquire()
                task = asyncio.create_task(self._entry(one), name=f"webhook-entry-{one.entry_id}")
                self.entry_tasks.add(task)
                task.add_done_callback(self._entry_done)

    def _entry_done(self, task: asyncio.Task[None]) -> None:
        self.entry_tasks.discard(task)
        self.entries.release()

    async def _entry(self, one: Delivered[list[PendingCheck]]) -> None:
        # asyncio.wait, not gather: a check's task may be shared with another entry (or the
        # sweep), and a cancelled gather would cancel it for them too.
        done, _ = await asyncio.wait([self._task(p) for p in one.value])
        if all(not t.cancelled() and t.exception() is None for t in done):
            await self.redis.xack(one.stream, Group.WEBHOOKS, one.entry_id)
        # Else a verdict was not sent: the entry stays pending for the reclaimer (and the sweep
        # finds the check without a verdict), so the call is made again.

    async def run(self, checks: Sequence[PendingCheck]) -> None:
        """Call these checks (those already running here are awaited, not called twice)."""
        tasks = [self._task(p) for p in checks]
        if tasks:
            await asyncio.wait(tasks)

    def _task(self, pending: PendingCheck) -> asyncio.Task[None]:
        key = pending.command_id
        task = self.inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._one(pending), name=f"webhook-{key}")
            self.inflight[key] = task
            task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self.inflight.pop(task.get_name().removeprefix("webhook-"), None)
        if not task.cancelled() and task.exception() is not None:
            # The verdict was not sent: the event stays pending, or the next sweep runs it.
            log.warning("webhook_verdict_not_sent", error=repr(task.exception()))

    async def _one(self, pending: PendingCheck) -> None:
        passed, reason = await self.call(pending)
        command = RecordVerdict(
            command_id=pending.command_id,
            agent_id=pending.agent_id,
            work_item_id=pending.item.id,
            attempt=pending.attempt,
            check_index=pending.index,
            source="webhook",
            passed=passed,
            reason=reason[:REASON_MAX],
        )
        await self.ledger.publish(command)

    async def call(self, pending: PendingCheck) -> tuple[bool, str]:
        """POST the signed report; every failure to get a proper answer fails the check."""
        if not self.secret:
            return False, "LONGRUN_WEBHOOK_SECRET is not set: webhook checks cannot be signed"
        timeout = pending.check.timeout_s
        try:
            destination = await self.destination(pending.check)
        except TimeoutError:
            return False, f"webhook timed out after {timeout:g} s resolving its host"
        if isinstance(destination, str):
            log.warning("webhook_not_allowed", url=pending.check.url, why=destination)
            return False, f"{NOT_ALLOWED}: {destination}"[:REASON_MAX]
        body = request_body(pending)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(body, self.secret),
            **destination.headers,
        }
        self.calls += 1
        try:
            async with self.pool.slot() as http:
                answer = await http.post(
                    destination.url,
                    content=body,
                    headers=headers,
                    timeout=timeout,
                    extensions=destination.extensions,
                )
        except httpx.TimeoutException:
            return False, f"webhook timed out after {timeout:g} s"
        except httpx.HTTPError as exc:
            return False, f"webhook unreachable: {type(exc).__name__}: {exc}"[:REASON_MAX]
        return judge(answer.status_code, answer.content)

    async def destination(self, check: WebhookCheck) -> Destination | str:
        """Where the call goes, or why it may not be made (an agent's check only)."""
        if check.set_by is SetBy.OPERATOR:
            return Destination(check.url, {}, {})
        target = target_of(check.url)
        if target is None or not self.allow.allows_url(check.url):
            return f"{check.url} is not in LONGRUN_WEBHOOK_ALLOW"
        async with asyncio.timeout(check.timeout_s):
            addresses = await resolve(target.host, target.port)
        refusal = self.allow.refusal(check.url, addresses)
        if refusal is not None:
            return refusal
        pinned = httpx.URL(check.url).copy_with(host=str(addresses[0]))
        default = {"http": 80, "https": 443}[target.scheme]
        host = f"[{target.host}]" if ":" in target.host else target.host
        netloc = host if target.port == default else f"{host}:{target.port}"
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        return Destination(str(pinned), {"Host": netloc}, extensions)

    async def sweep(self) -> int:
        """Find every verifying item's awaited webhook checks and run those not running here
        (at start, after any crash, and now and then for anything an event did not bring)."""
        found: list[PendingCheck] = []
        for agent_id in await self.reads.agent_ids():
            for item in await verifying_items(self.reads, agent_id):
                found += [p for p in pending_checks(item) if p.command_id not in self.inflight]
        if found:
            log.info("webhook_checks_resumed", count=len(found))
            for pending in found:
                self._task(pending)
        return len(found)


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to now (an address literal is itself); none on failure."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    out: list[IPAddress] = []
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if address not in out:
            out.append(address)
    return out
