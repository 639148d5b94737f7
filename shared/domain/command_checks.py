"""`command` acceptance checks between the scheduler and the check runners (pure): the request
the scheduler puts on the check-requests stream for each awaited check of a verifying attempt,
and the verdict a run gives, fail-closed (only exit 0, with the sentinel line when asked, and
within the time, passes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from shared.domain.acceptance import CHECK_SENTINEL, CommandCheck, verdict_command_id
from shared.domain.base import NonEmptyStr, Record
from shared.domain.records import WorkItem

REASON_TAIL = 1500
"""Characters of the command's output a failed verdict quotes (its end: where errors are)."""


class CheckRequest(Record):
    """Run check `check_index` of attempt `attempt` of a verifying WorkItem."""

    agent_id: NonEmptyStr
    work_item_id: NonEmptyStr
    attempt: Annotated[int, Field(ge=1)]
    check_index: Annotated[int, Field(ge=0)]
    run: NonEmptyStr
    timeout_s: Annotated[float, Field(gt=0)]
    expect: Literal["exit0", "sentinel"] = "exit0"

    @property
    def command_id(self) -> str:
        """The verdict's command id: one verdict per (item, attempt, check), however often the
        request is delivered or answered."""
        return verdict_command_id(self.work_item_id, self.attempt, self.check_index)


def pending_command_checks(item: WorkItem) -> list[CheckRequest]:
    """The item's `command` checks awaiting a verdict in its current attempt."""
    ver = item.verification
    if not item.is_verifying or ver is None:
        return []
    out = []
    for index in ver.pending():
        check = item.acceptance[index] if index < len(item.acceptance) else None
        if isinstance(check, CommandCheck):
            out.append(
                CheckRequest(
                    agent_id=item.agent_id,
                    work_item_id=item.id,
                    attempt=ver.attempt,
                    check_index=index,
                    run=check.run,
                    timeout_s=check.timeout_s,
                    expect=check.expect,
                )
            )
    return out


def _tail(stdout: str, stderr: str) -> str:
    text = (stderr.strip() + "\n" + stdout.strip()).strip()
    return text[-REASON_TAIL:] if text else "(no output)"


def command_verdict(
    request: CheckRequest, *, exit_code: int, stdout: str, stderr: str, timed_out: bool
) -> tuple[bool, str]:
    """Passed only with exit 0 (and, for `expect: sentinel`, a stdout line that is exactly the
    sentinel); the reason names what failed and quotes the output's end."""
    if timed_out:
        return False, f"command timed out after {request.timeout_s:g} s: {_tail(stdout, stderr)}"
    if exit_code != 0:
        return False, f"command exited with {exit_code}: {_tail(stdout, stderr)}"
    if request.expect == "sentinel" and CHECK_SENTINEL not in stdout.splitlines():
        return False, f"command exited 0 without a {CHECK_SENTINEL} line: {_tail(stdout, stderr)}"
    return True, "command exited 0" + (
        f" with {CHECK_SENTINEL}" if request.expect == "sentinel" else ""
    )
