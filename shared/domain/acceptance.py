"""Acceptance checks on a WorkItem and the record of their verification (docs/contract.md,
acceptance): what a check is, who set it, how it is decided, and the pure steps of the gate.

A check kind is one model in `AcceptanceCheck` plus one entry in `DECIDED_BY`: `ledger` kinds
are decided inside the CompleteWorkItem write, the others wait for a verdict command from the
operator, the webhook runner or a reviewer."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, TypeAdapter

from shared.domain.base import NonEmptyStr, Record, UtcDatetime


class CheckKind(StrEnum):
    TODOS_DONE = "todos_done"
    OPERATOR_APPROVAL = "operator_approval"
    WEBHOOK = "webhook"
    REVIEWER_AGENT = "reviewer_agent"
    COMMAND = "command"


class SetBy(StrEnum):
    """Who added a check: the agent may change only its own (`agent`) checks; a delegated
    WorkItem's checks are its delegator's."""

    OPERATOR = "operator"
    AGENT = "agent"
    DELEGATOR = "delegator"


class VerdictSource(StrEnum):
    """Who decided a check: the ledger itself, the operator, a webhook, a reviewer agent."""

    LEDGER = "ledger"
    OPERATOR = "operator"
    WEBHOOK = "webhook"
    REVIEWER = "reviewer"
    COMMAND = "command"
    """The turn executor's check runner: the check's command in the sandbox."""


DEFAULT_MAX_VERIFY_ATTEMPTS = 3
"""LONGRUN_MAX_VERIFY_ATTEMPTS: failed attempts after which only the operator moves the item."""
DEFAULT_WEBHOOK_TIMEOUT_S = 30.0
MAX_WEBHOOK_TIMEOUT_S = 120.0
"""Bounded so a webhook call always ends well inside the runner's reclaim window."""
WebhookUrl = Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=2000)]


class TodosDoneCheck(Record):
    """Every todo completed: decided at once, when CompleteWorkItem is called."""

    kind: Literal["todos_done"] = "todos_done"
    set_by: SetBy = SetBy.AGENT


CheckDeadline = Annotated[int, Field(ge=1, le=366 * 24 * 3600)]
DEFAULT_CHECK_DEADLINE_S = 86_400
"""LONGRUN_CHECK_DEADLINE_S: an awaited verdict's default deadline, from the attempt's start."""


class OperatorApprovalCheck(Record):
    """The operator approves or rejects (the verdict route, `longrun approve` / `reject`)."""

    kind: Literal["operator_approval"] = "operator_approval"
    set_by: SetBy = SetBy.AGENT
    deadline_s: CheckDeadline | None = None
    """Seconds from the start of each verification attempt: with no verdict by then the check
    fails with reason `deadline` (None: LONGRUN_CHECK_DEADLINE_S, one day by default)."""


class WebhookCheck(Record):
    """longrun POSTs the report to `url`, signed; a 2xx `{passed, reason}` is the verdict."""

    kind: Literal["webhook"] = "webhook"
    url: WebhookUrl
    timeout_s: Annotated[float, Field(gt=0, le=MAX_WEBHOOK_TIMEOUT_S)] = DEFAULT_WEBHOOK_TIMEOUT_S
    set_by: SetBy = SetBy.AGENT


class ReviewerAgentCheck(Record):
    """Another agent reviews the report: a review item is delegated to it, and its SubmitVerdict
    decides the check."""

    kind: Literal["reviewer_agent"] = "reviewer_agent"
    agent_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    set_by: SetBy = SetBy.AGENT
    deadline_s: CheckDeadline | None = None
    """As operator_approval's: the reviewer's verdict is due this many seconds after the
    attempt began (None: LONGRUN_CHECK_DEADLINE_S)."""


DEFAULT_COMMAND_TIMEOUT_S = 300.0
MAX_COMMAND_CHECK_S = 3600.0
"""A check's own bound; the executor's LONGRUN_COMMAND_MAX_S may be lower (the check then fails,
naming it)."""
MAX_CHECK_COMMAND_CHARS = 65_536
CHECK_SENTINEL = "__LONGRUN_CHECK_OK__"


class CommandCheck(Record):
    """`run` (a shell command line) in the sandbox over the agent's home: passes only with exit
    0 and, for `expect: sentinel`, a stdout line `__LONGRUN_CHECK_OK__`."""

    kind: Literal["command"] = "command"
    run: Annotated[
        str,
        StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_CHECK_COMMAND_CHARS),
    ]
    timeout_s: Annotated[float, Field(gt=0, le=MAX_COMMAND_CHECK_S)] = DEFAULT_COMMAND_TIMEOUT_S
    expect: Literal["exit0", "sentinel"] = "exit0"
    set_by: SetBy = SetBy.AGENT


AcceptanceCheck = Annotated[
    TodosDoneCheck | OperatorApprovalCheck | WebhookCheck | ReviewerAgentCheck | CommandCheck,
    Field(discriminator="kind"),
]

CHECK_ADAPTER: TypeAdapter[AcceptanceCheck] = TypeAdapter(AcceptanceCheck)

DECIDED_BY: dict[CheckKind, VerdictSource] = {
    CheckKind.TODOS_DONE: VerdictSource.LEDGER,
    CheckKind.OPERATOR_APPROVAL: VerdictSource.OPERATOR,
    CheckKind.WEBHOOK: VerdictSource.WEBHOOK,
    CheckKind.REVIEWER_AGENT: VerdictSource.REVIEWER,
    CheckKind.COMMAND: VerdictSource.COMMAND,
}
"""Who may decide each kind: a verdict from anyone else does not count for it."""

AVAILABLE_KINDS = frozenset(CheckKind)
"""Kinds a WorkItem may carry (every kind: `reviewer_agent` runs as a review delegation)."""


class VerificationStatus(StrEnum):
    VERIFYING = "verifying"
    FAILED = "failed"
    PASSED = "passed"


class CheckVerdict(Record):
    """One check's verdict in one attempt; `passed` None while it is still awaited."""

    kind: CheckKind
    passed: bool | None = None
    reason: str | None = None
    decided_by: VerdictSource | None = None
    decided_at: UtcDatetime | None = None


class Verification(Record):
    """The latest attempt to complete a gated WorkItem, one verdict per check, in check order."""

    status: VerificationStatus
    attempt: Annotated[int, Field(ge=1)]
    checks: tuple[CheckVerdict, ...]
    report_candidate: NonEmptyStr | None = None
    """The report CompleteWorkItem carried: promoted only once every check passes."""
    turn_id: str | None = None
    started_at: UtcDatetime
    finished_at: UtcDatetime | None = None
    failed_attempts: Annotated[int, Field(ge=0)] = 0
    """Attempts failed since the item was created or the operator last moved it."""
    held_for_operator: bool = False
    """LONGRUN_MAX_VERIFY_ATTEMPTS attempts failed: the item is blocked, and only an operator
    verdict, the operator's UpdateWorkItem or a cancel by the operator moves it."""

    @property
    def is_verifying(self) -> bool:
        return self.status is VerificationStatus.VERIFYING

    def pending(self) -> list[int]:
        """Indexes of the checks still awaited."""
        return [i for i, v in enumerate(self.checks) if v.passed is None]

    def failures(self) -> list[str]:
        return [f"{v.kind}: {v.reason or 'failed'}" for v in self.checks if v.passed is False]


def kind_of(check: AcceptanceCheck) -> CheckKind:
    return CheckKind(check.kind)


def unavailable_kinds(checks: Iterable[AcceptanceCheck]) -> list[str]:
    return sorted({c.kind for c in checks if kind_of(c) not in AVAILABLE_KINDS})


def _content(check: AcceptanceCheck) -> dict[str, object]:
    return check.model_dump(mode="json", exclude={"set_by"})


def merged_checks(
    existing: Sequence[AcceptanceCheck], new: Sequence[AcceptanceCheck], by: SetBy
) -> tuple[tuple[AcceptanceCheck, ...], list[AcceptanceCheck]]:
    """The list `new` makes when `by` sends it, and the operator's or delegator's checks it
    would remove or edit.

    The list sent is the whole list. An entry equal to an existing check (whoever set it) keeps
    that check; any other entry is set by `by`. The agent cannot drop or change a check it did
    not set: each one must be in its list unchanged, so what it really replaces is its own part.
    """
    pool = list(existing)
    out: list[AcceptanceCheck] = []
    for check in new:
        match = next((c for c in pool if _content(c) == _content(check)), None)
        if match is not None:
            pool.remove(match)
            out.append(match)
        else:
            out.append(check.model_copy(update={"set_by": by}))
    lost = [c for c in pool if c.set_by is not SetBy.AGENT] if by is SetBy.AGENT else []
    return tuple(out), lost


def todos_verdict(open_todos: Sequence[str]) -> tuple[bool, str]:
    if not open_todos:
        return True, "every todo is completed"
    listed = "; ".join(open_todos[:5])
    more = f" (and {len(open_todos) - 5} more)" if len(open_todos) > 5 else ""
    return False, f"{len(open_todos)} todos not completed: {listed}{more}"


def awaited(checks: Sequence[AcceptanceCheck], verification: Verification | None) -> list[str]:
    """What a verifying item waits for, in words: `webhook https://...`, `operator_approval`."""
    if verification is None or not verification.is_verifying:
        return []
    out = []
    for i in verification.pending():
        check = checks[i] if i < len(checks) else None
        if isinstance(check, WebhookCheck):
            out.append(f"webhook {check.url}")
        elif isinstance(check, ReviewerAgentCheck):
            out.append(f"reviewer_agent {check.agent_id}")
        elif isinstance(check, CommandCheck):
            out.append(f"command {check.run[:200]}")
        else:
            out.append(str(verification.checks[i].kind))
    return out


def verdict_command_id(work_item_id: str, attempt: int, index: int) -> str:
    """One id per (item, attempt, check): a repeated webhook call's verdict is a duplicate."""
    return f"verdict:{work_item_id}:a{attempt}:c{index}"


VerdictSourceName = Literal["operator", "webhook", "reviewer", "command"]
