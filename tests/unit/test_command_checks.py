"""`command` acceptance checks, the pure parts: the check as a tool takes it, the requests a
verifying attempt makes, and the verdict a run gives (fail-closed)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.domain.acceptance import (
    CHECK_SENTINEL,
    CheckKind,
    CheckVerdict,
    CommandCheck,
    Verification,
    VerificationStatus,
    WebhookCheck,
    awaited,
)
from shared.domain.command_checks import CheckRequest, command_verdict, pending_command_checks
from shared.domain.records import WorkItem
from shared.domain.tools import AcceptanceCheckInput
from tests.builders import T0, make_work_item

REQUEST = CheckRequest(
    agent_id="ada", work_item_id="wi_1", attempt=2, check_index=1, run="pytest -q", timeout_s=30
)


def verifying(
    *checks: CommandCheck | WebhookCheck, decided: tuple[bool | None, ...] = ()
) -> WorkItem:
    verdicts = tuple(
        CheckVerdict(kind=CheckKind(c.kind), passed=decided[i] if i < len(decided) else None)
        for i, c in enumerate(checks)
    )
    ver = Verification(
        status=VerificationStatus.VERIFYING, attempt=3, checks=verdicts, started_at=T0
    )
    return make_work_item(acceptance=list(checks), verification=ver)


def test_a_tool_takes_a_command_check_with_its_defaults() -> None:
    check = AcceptanceCheckInput(kind=CheckKind.COMMAND, run="python -m pytest -q").to_check()
    assert check == CommandCheck(run="python -m pytest -q", timeout_s=300, expect="exit0")
    with pytest.raises(ValidationError, match="run"):
        AcceptanceCheckInput(kind=CheckKind.COMMAND)
    with pytest.raises(ValidationError, match="timeout_s"):
        AcceptanceCheckInput(kind=CheckKind.COMMAND, run="true", timeout_s=3601)


def test_each_awaited_command_check_of_the_attempt_is_one_request() -> None:
    web = WebhookCheck(url="https://checks.example/v1")
    first, second = CommandCheck(run="make test"), CommandCheck(run="true", expect="sentinel")
    item = verifying(first, web, second, decided=(True, None, None))
    (request,) = pending_command_checks(item)
    assert (request.attempt, request.check_index, request.run, request.expect) == (
        3,
        2,
        "true",
        "sentinel",
    )
    assert request.command_id == f"verdict:{item.id}:a3:c2"
    assert awaited(item.acceptance, item.verification) == [
        "webhook https://checks.example/v1",
        "command true",
    ]
    assert pending_command_checks(make_work_item(acceptance=[first])) == []


@pytest.mark.parametrize(
    "case",
    [
        (0, "ok\n", False, "exit0", True, "command exited 0"),
        (1, "1 failed\n", False, "exit0", False, "command exited with 1: 1 failed"),
        (-9, "", True, "exit0", False, "command timed out after 30 s"),
        (0, "ok\n", False, "sentinel", False, f"without a {CHECK_SENTINEL} line"),
        (0, f"x\n{CHECK_SENTINEL}\n", False, "sentinel", True, f"with {CHECK_SENTINEL}"),
        (0, f"say {CHECK_SENTINEL}\n", False, "sentinel", False, "without"),
        (2, f"{CHECK_SENTINEL}\n", False, "sentinel", False, "exited with 2"),
    ],
)
def test_only_exit_0_and_the_asked_sentinel_pass(
    case: tuple[int, str, bool, str, bool, str],
) -> None:
    exit_code, stdout, timed_out, expect, passed, says = case
    request = REQUEST.model_copy(update={"expect": expect})
    verdict = command_verdict(
        request, exit_code=exit_code, stdout=stdout, stderr="", timed_out=timed_out
    )
    assert verdict[0] is passed
    assert says in verdict[1]
