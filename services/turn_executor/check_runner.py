"""`command` acceptance checks, the executor's side: the check runner reads the scheduler's
requests (group `check-runners` on the check-requests stream), runs each check's command with
`/bin/sh -c` in the same sandbox as RunCommand over the agent's home, and answers the ledger
with a RecordVerdict whose id is the request's (one verdict per item, attempt and check).

Fail-closed in every fault: no sandbox, a timeout, a timeout over LONGRUN_COMMAND_MAX_S, a
sandbox that fails to start, and a request delivered again after its runner died (the entry
reclaimed: the command may have run halfway) are failed checks naming the reason, never a pass
without a run; the agent's next CompleteWorkItem is a new attempt that runs it afresh."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from services.turn_executor.sandbox import Sandbox
from shared.agent_home import home_dir
from shared.consumer import Delivered, Fields, StreamConsumer, required
from shared.domain.command_checks import CheckRequest, command_verdict
from shared.ledger_client import LedgerClient
from shared.metrics import Metrics
from shared.store.client import AnyRedis
from shared.wire.codec import CodecError
from shared.wire.commands import RecordVerdict
from shared.wire.names import Group, Names

log = structlog.get_logger("longrun.executor.checks")

CRASHED = "the check runner stopped while running this check (its outcome is unknown)"


def decode_request(fields: Mapping[Any, Any]) -> CheckRequest:
    try:
        return CheckRequest.model_validate_json(required(fields, "m"))
    except ValueError as exc:
        raise CodecError(f"invalid check request: {exc}") from None


class CheckRunner:
    """Runs command checks in `sandbox` and sends their verdicts."""

    def __init__(
        self,
        sandbox: Sandbox,
        agent_home: Path,
        ledger: LedgerClient,
        *,
        max_timeout_s: int,
    ) -> None:
        self.sandbox = sandbox
        self.agent_home = agent_home
        self.ledger = ledger
        self.max_timeout_s = max_timeout_s
        self.ran = 0

    async def handle(self, batch: Sequence[Delivered[CheckRequest]]) -> None:
        for one in batch:
            passed, reason = await self.judge(one.value)
            await self.answer(one.value, passed=passed, reason=reason)

    async def judge(self, request: CheckRequest) -> tuple[bool, str]:
        if self.sandbox.reason is not None:
            return False, f"no sandbox to run the command check: {self.sandbox.reason}"
        if request.timeout_s > self.max_timeout_s:
            return False, (
                f"the check's timeout_s {request.timeout_s:g} is over this deployment's "
                f"LONGRUN_COMMAND_MAX_S ({self.max_timeout_s})"
            )
        home = home_dir(self.agent_home, request.agent_id)
        home.mkdir(parents=True, exist_ok=True)
        self.ran += 1
        try:
            result = await self.sandbox.run(
                home, ["/bin/sh", "-c", request.run], ".", {}, request.timeout_s
            )
        except Exception as exc:  # a sandbox that fails to start fails the check
            log.warning("command_check_failed_to_start", error=str(exc))
            return False, f"the sandbox failed to run the check: {exc}"
        return command_verdict(
            request,
            exit_code=result.exit_code,
            stdout=result.stdout_tail,
            stderr=result.stderr_tail,
            timed_out=result.timed_out,
        )

    async def answer(self, request: CheckRequest, *, passed: bool, reason: str) -> None:
        log.info(
            "command_check_judged",
            agent_id=request.agent_id,
            work_item_id=request.work_item_id,
            attempt=request.attempt,
            passed=passed,
        )
        await self.ledger.publish(
            RecordVerdict(
                command_id=request.command_id,
                agent_id=request.agent_id,
                work_item_id=request.work_item_id,
                attempt=request.attempt,
                check_index=request.check_index,
                source="command",
                passed=passed,
                reason=reason[:4000],
            )
        )


class CheckConsumer(StreamConsumer[CheckRequest]):
    """The check-requests group's policy, with one change: an entry reclaimed from a runner that
    died is not run again but failed (fail-closed; the verdict id makes it the only verdict)."""

    def __init__(self, runner: CheckRunner, redis: AnyRedis, names: Names, metrics: Metrics):
        super().__init__(
            redis,
            names,
            metrics,
            group=Group.CHECK_RUNNERS,
            decode=decode_request,
            handle=runner.handle,
        )
        self.runner = runner

    async def reclaimed(
        self, stream: str, entry_id: str, fields: Fields, deliveries: int, *, consumer: str
    ) -> None:
        try:
            request = decode_request(fields)
        except CodecError:
            await super().reclaimed(stream, entry_id, fields, deliveries, consumer=consumer)
            return
        log.warning("command_check_reclaimed", entry_id=entry_id, deliveries=deliveries)
        await self.runner.answer(request, passed=False, reason=CRASHED)


RECLAIM_MARGIN_S = 15
"""Past the longest check: its kill and its verdict's write fit well inside."""
CHECK_BATCHES = 2
"""Checks one executor process runs at once (each its own batch of one)."""


def register_checks(
    broker: Any, consumer: CheckConsumer, *, consumer_name: str, max_timeout_s: int
) -> list[Any]:
    """Batch subscribers and a reclaimer on the check-requests stream. An entry is reclaimed
    only once it has been idle longer than any check may run, so a check still running is
    never taken for a dead one."""
    return consumer.subscribe(
        broker,
        consumer.names.check_requests,
        consumer=consumer_name,
        size=1,
        idle_ms=(max_timeout_s + RECLAIM_MARGIN_S) * 1000,
        batches=CHECK_BATCHES,
    )
