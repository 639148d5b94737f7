"""`:DONE-WHEN:` and `#+begin_src sh :check` in the board file (pure): a headline's command
check as written, the check an item carries, and the UpdateWorkItem acceptance list that makes
the file's command the item's command check (the other checks kept as they are)."""

from __future__ import annotations

import re
from typing import Any

from services.cli.org.parse import Headline

Json = dict[str, Any]

_SRC_CHECK = re.compile(r"^[ \t]*#\+begin_src[ \t]+(?:sh|bash|shell)\b.*:check\b", re.IGNORECASE)
_SRC_END = re.compile(r"^[ \t]*#\+end_src\b", re.IGNORECASE)
CHECK_INPUT_FIELDS = ("kind", "url", "timeout_s", "agent_id", "deadline_s", "run", "expect")
"""What a stored check gives back as tool input (`set_by` is the ledger's to decide)."""


def done_when(headline: Headline) -> str | None:
    """The headline's command check: its `:DONE-WHEN:` property, else its first `#+begin_src
    sh :check` block's lines (indentation common to them removed); None when it has neither."""
    written = headline.properties.get("DONE-WHEN", "").strip()
    if written:
        return written
    block: list[str] | None = None
    for _, text in headline.body:
        if block is None:
            if _SRC_CHECK.match(text):
                block = []
        elif _SRC_END.match(text):
            return _dedent(block) or None
        else:
            block.append(text)
    return None


def _dedent(lines: list[str]) -> str:
    indents = [len(x) - len(x.lstrip()) for x in lines if x.strip()]
    cut = min(indents, default=0)
    return "\n".join(x[cut:] for x in lines).strip()


def command_run(view: Json) -> str | None:
    """The `run` of the item's first command check."""
    for check in view.get("acceptance") or []:
        if check.get("kind") == "command":
            return str(check.get("run") or "") or None
    return None


def with_command(view: Json, run: str) -> list[Json]:
    """The item's checks with `run` as its one command check: the first command check replaced
    in place (its timeout and expectation kept), others dropped, or `run` added at the end."""
    out: list[Json] = []
    replaced = False
    for check in view.get("acceptance") or []:
        entry = {k: check[k] for k in CHECK_INPUT_FIELDS if check.get(k) is not None}
        if entry.get("kind") == "command":
            if replaced:
                continue
            entry["run"], replaced = run, True
        out.append(entry)
    if not replaced:
        out.append({"kind": "command", "run": run})
    return out
