"""`command` acceptance checks, the scheduler's side: it never runs a command (the turn
executors have the agent homes and the sandbox); it asks. Each awaited command check of a
verifying attempt becomes one request on the check-requests stream, asked once (a key with a
TTL per verdict id), from `work_item_verifying` events (group `command-checks` on the partition
event streams) and from a sweep at start and every so often (a crash, a trimmed stream). The
check runner answers the ledger directly with a RecordVerdict whose id is the request's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import structlog

from shared.consumer import Delivered, required
from shared.domain.command_checks import CheckRequest, pending_command_checks
from shared.domain.records import WorkItem
from shared.store.client import AnyRedis
from shared.store.readmodel import ReadModel
from shared.store.verifying import verifying_items
from shared.wire.codec import CodecError
from shared.wire.events import LedgerEvents, WorkItemVerifying
from shared.wire.names import Names

log = structlog.get_logger("longrun.scheduler.command_checks")

REQUESTS_MAXLEN = 100_000
ASK_AGAIN_AFTER_S = 600
"""Past a check's own timeout: a request asked this long ago and still without a verdict (its
entry trimmed before any runner read it) is asked again by the sweep."""


def decode_command_checks(fields: Mapping[Any, Any]) -> list[CheckRequest]:
    """The command checks a `ledger_events` entry starts (most entries start none)."""
    try:
        doc = orjson.loads(required(fields, "m"))
        if doc.get("type") != LedgerEvents.message_type:
            raise CodecError(f"{doc.get('type')!r} is not {LedgerEvents.message_type!r}")
        found = []
        for event in doc["body"]["events"]:
            if event.get("type") == WorkItemVerifying.message_type:
                found += pending_command_checks(WorkItem.model_validate(event["data"]["work_item"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CodecError(f"invalid ledger_events: {exc!r}") from None
    return found


class CommandAsker:
    """Puts each awaited command check on the check-requests stream, once."""

    def __init__(self, redis: AnyRedis, names: Names) -> None:
        self.redis = redis
        self.names = names
        self.reads = ReadModel(redis, names)
        self.asked = 0

    async def handle(self, batch: Sequence[Delivered[list[CheckRequest]]]) -> None:
        for one in batch:
            for request in one.value:
                await self.ask(request)

    async def ask(self, request: CheckRequest) -> bool:
        """XADD the request unless it was asked already (within its TTL)."""
        ttl = int(request.timeout_s) + ASK_AGAIN_AFTER_S
        fresh = await self.redis.set(
            self.names.check_asked(request.command_id), b"1", nx=True, ex=ttl
        )
        if not fresh:
            return False
        await self.redis.xadd(
            self.names.check_requests,
            {"m": request.model_dump_json()},
            maxlen=REQUESTS_MAXLEN,
            approximate=True,
        )
        self.asked += 1
        log.info(
            "command_check_asked",
            agent_id=request.agent_id,
            work_item_id=request.work_item_id,
            attempt=request.attempt,
            check_index=request.check_index,
        )
        return True

    async def sweep(self) -> int:
        """Ask for every verifying item's awaited command checks not asked yet."""
        count = 0
        for agent_id in await self.reads.agent_ids():
            for item in await verifying_items(self.reads, agent_id):
                for request in pending_command_checks(item):
                    count += await self.ask(request)
        return count
