"""RunCommand calls in a turn: offered only when the agent's spec turns `tools.commands` on and
a sandbox works; each run recorded like an MCP call, `tool_call_started` (fenced) before the
command starts and `tool_call_finished` after, so a turn that dies in between leaves an outcome
the next turn is told is unknown, and longrun never runs it again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import structlog

from services.turn_executor.external_calls import (
    ARGUMENTS_SHOWN,
    COMMAND_SERVER,
    canonical_arguments,
)
from services.turn_executor.run_command import (
    RUN_COMMAND,
    outcome_of,
    parse_run_command,
    run_command_spec,
    unavailable,
)
from services.turn_executor.sandbox import Sandbox
from services.turn_executor.turn import Turn
from shared.agent_home import home_dir
from shared.domain.errors import DomainError
from shared.domain.tools import ToolEnvelope
from shared.wire import commands as c

log = structlog.get_logger("longrun.executor.commands")

Record = Callable[[c.Command], Awaitable[None]]
COMMAND_CONCURRENCY = 4
"""Commands one executor process runs at once; more wait their turn (the machine's cores are
shared with every other turn)."""


class CommandCalls:
    """Runs a turn's RunCommand calls in `sandbox` over the agent's home."""

    def __init__(
        self,
        sandbox: Sandbox,
        agent_home: Path,
        *,
        max_timeout_s: int,
        concurrency: int = COMMAND_CONCURRENCY,
    ) -> None:
        self.sandbox = sandbox
        self.agent_home = agent_home
        self.max_timeout_s = max_timeout_s
        self._slots = asyncio.Semaphore(concurrency)

    def why_not(self, commands_on: bool) -> str | None:
        """Why RunCommand is not offered to an agent (None: it is)."""
        if not commands_on:
            return "the agent's spec does not turn tools.commands on"
        return None if self.sandbox.reason is None else f"no sandbox: {self.sandbox.reason}"

    def readiness(self) -> str:
        """The executor's /readyz line about commands (it stays ready either way)."""
        reason = self.sandbox.reason
        return (
            f"sandbox: {self.sandbox.backend}"
            if reason is None
            else (f"sandbox: unavailable ({reason})")
        )

    def status(self, now: datetime) -> bytes:
        """What this process tells ingress about its sandbox (`Names.sandbox_status`)."""
        reason = self.sandbox.reason
        return orjson.dumps(
            {
                "backend": self.sandbox.backend,
                "available": reason is None,
                "reason": reason,
                "at": now.isoformat(),
            }
        )

    def specs(self, turn: Turn) -> list[dict[str, Any]]:
        return [] if self.why_not(turn.spec.tools.commands) else [run_command_spec()]

    async def call(
        self, turn: Turn, args: dict[str, Any], command_id: str, record: Record
    ) -> ToolEnvelope:
        why = self.why_not(turn.spec.tools.commands)
        if why is not None:
            return ToolEnvelope.failure(RUN_COMMAND, unavailable(why))
        home = home_dir(self.agent_home, turn.agent_id)
        home.mkdir(parents=True, exist_ok=True)
        try:
            parsed = parse_run_command(
                args,
                max_timeout_s=self.max_timeout_s,
                agent_home=self.agent_home,
                agent_id=turn.agent_id,
            )
        except DomainError as refused:
            return ToolEnvelope.failure(RUN_COMMAND, refused)
        call_id = f"call_{command_id}"
        arguments, digest = canonical_arguments(args)
        await record(
            c.RecordToolCallStart(
                command_id=f"{command_id}:started",
                agent_id=turn.agent_id,
                turn_id=turn.turn_id,
                fencing_token=turn.token,
                call_id=call_id,
                server=COMMAND_SERVER,
                tool=RUN_COMMAND,
                args_sha256=digest,
                arguments=arguments[:ARGUMENTS_SHOWN],
            )
        )
        async with self._slots:
            try:
                timeout_s = parsed.timeout_s or self.max_timeout_s
                result = await self.sandbox.run(
                    home, parsed.program(), parsed.cwd, parsed.env, timeout_s
                )
            except Exception as exc:  # the sandbox failing to start is an answer, not a crash
                log.warning("command_failed_to_start", agent_id=turn.agent_id, error=str(exc))
                await record(self._finished(turn, command_id, "error", 0, truncated=False))
                return ToolEnvelope.failure(RUN_COMMAND, unavailable(f"the sandbox failed: {exc}"))
        chars = len(result.stdout_tail) + len(result.stderr_tail)
        outcome = outcome_of(result)
        await record(self._finished(turn, command_id, outcome, chars, truncated=result.truncated))
        return ToolEnvelope.success(RUN_COMMAND, result.answer())

    @staticmethod
    def _finished(
        turn: Turn, command_id: str, outcome: c.CallOutcome, chars: int, *, truncated: bool
    ) -> c.RecordToolCallFinish:
        return c.RecordToolCallFinish(
            command_id=f"{command_id}:finished",
            agent_id=turn.agent_id,
            turn_id=turn.turn_id,
            fencing_token=turn.token,
            call_id=f"call_{command_id}",
            outcome=outcome,
            result_chars=chars,
            truncated=truncated,
        )
