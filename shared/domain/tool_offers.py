"""Which tools an agent's spec asks for that cannot be offered, and why (`tools_unavailable` on
the agent view): today RunCommand, when no turn executor has a working sandbox."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.domain.specs import AgentSpec

RUN_COMMAND = "RunCommand"


def tools_unavailable(
    spec: AgentSpec, sandboxes: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, str]]:
    """`[{tool, reason}]` from the spec and each executor's sandbox report (process name ->
    {backend, available, reason, at}); a turn may run on any executor, so one without a
    sandbox is named."""
    if not spec.tools.commands:
        return []
    if not sandboxes:
        return [{"tool": RUN_COMMAND, "reason": "no turn executor has reported a sandbox"}]
    broken = sorted((name, doc) for name, doc in sandboxes.items() if not doc.get("available"))
    if not broken:
        return []
    name, doc = broken[0]
    reason = f"sandbox unavailable on executor {name}: {doc.get('reason') or 'unknown'}"
    return [{"tool": RUN_COMMAND, "reason": reason}]
