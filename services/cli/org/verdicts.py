"""The `* verdicts` block of a board org file: lines `pick up: <headline>`, `put down:
<headline>` and `cancel: <headline>`, each matched to exactly one WorkItem headline of the file
by its text; an unmatched or ambiguous line is refused, never guessed. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.cli.org.keywords import KeywordSet
from services.cli.org.moves import Action, EditResult, Simulation, Status
from services.cli.org.parse import Headline, plain_title
from services.cli.org.placing import (
    Placed,
    export_problem,
    exported_marks,
    owner_problem,
    unknown_item,
)

_VERDICT = re.compile(r"^(?:[-+*][ \t]+)?(pick up|put down|cancel)[ \t]*:[ \t]*(.*)$", re.I)
_ACTIONS = {"pick up": Action.PICK, "put down": Action.PUT_DOWN, "cancel": Action.CANCEL}


def is_verdicts(headline: Headline) -> bool:
    return headline.level == 1 and headline.text.lower() == "verdicts"


def judge_verdicts(
    block: Headline, placed: Sequence[Placed], keywords: KeywordSet, board: Simulation
) -> list[EditResult]:
    """One result per verdict line of the block (blank lines and `#` comments skipped)."""
    items = [spot for spot in placed if "ID" in spot.headline.properties]
    results = []
    for line, raw in block.body:
        text = raw.strip()
        if text and not text.startswith("#"):
            results.append(_verdict(line, text, items, keywords, board))
    return results


def matching(target: str, items: Sequence[Placed], keywords: KeywordSet) -> list[Placed]:
    """The WorkItem headlines whose text is exactly `target`; a target written with the
    headline's keyword in front (`NEXT Write the report`) matches as well."""
    found = [spot for spot in items if spot.headline.text == target]
    first, _, rest = target.partition(" ")
    if not found and keywords.longrun(first) is not None:
        found = [spot for spot in items if spot.headline.text == rest.strip()]
    return found


def _verdict(
    line: int, text: str, items: Sequence[Placed], keywords: KeywordSet, board: Simulation
) -> EditResult:
    match = _VERDICT.match(text)
    if match is None:
        return _refused(
            line,
            text,
            "not a verdict: write `pick up: <headline>`, `put down: <headline>` "
            "or `cancel: <headline>`",
        )
    target = plain_title(match[2])
    found = matching(target, items, keywords)
    if len(found) != 1:
        where = ", ".join(f"line {spot.headline.line}" for spot in found)
        why = f"ambiguous: {len(found)} headlines read it ({where})" if found else "unmatched"
        return _refused(line, text, f"{why}: no single WorkItem headline reads {target!r}")
    spot = found[0]
    work_item_id = spot.headline.properties["ID"]
    view = board.live.items.get(work_item_id)
    if view is None:
        return _refused(line, text, unknown_item(work_item_id, spot, board.live))
    exported, revision = exported_marks(spot.headline)
    refusal = owner_problem(spot, view) or export_problem(spot.headline, exported, revision)
    if refusal is not None or revision is None:
        return _refused(line, text, refusal or "")
    verb = match[1].lower()
    return board.settle(line, f"{work_item_id} {verb}: {target}", _ACTIONS[verb], view, revision)


def _refused(line: int, subject: str, detail: str) -> EditResult:
    return EditResult(line, subject, Status.REFUSED, detail)
