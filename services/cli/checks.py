"""How a WorkItem's acceptance checks and verification read on the board and in `work show`."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]


def _flat(text: object) -> str:
    return " ".join(str(text or "").split())


def check_lines(view: Json) -> list[str]:
    """Each acceptance check with who set it and its verdict in the latest attempt."""
    verification = view.get("verification") or {}
    verdicts = verification.get("checks") or []
    lines = []
    for index, check in enumerate(view.get("acceptance") or []):
        target = check.get("url") or check.get("agent_id") or _flat(check.get("run"))
        named = f"{check.get('kind')} {target}" if target else str(check.get("kind"))
        head = f"{named} (set by {check.get('set_by')})"
        verdict = verdicts[index] if index < len(verdicts) else {}
        passed = verdict.get("passed")
        said = {True: "passed", False: "failed", None: "awaited"}[passed]
        if passed is None and verification.get("status") != "verifying":
            said = "not run"
        reason = _flat(verdict.get("reason"))
        lines.append(f"{head}: {said}{' — ' + reason if reason and passed is not None else ''}")
    return lines


def verification_line(view: Json) -> str | None:
    verification = view.get("verification")
    if not isinstance(verification, dict):
        return None
    return f"{verification.get('status')} (attempt {verification.get('attempt')})"
