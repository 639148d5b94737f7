"""The operator's edits in a board org file, read against the live board: each WorkItem
headline whose keyword moved becomes a pick, a put down or a cancel; a new headline under an
agent becomes a request to that agent; the rest is unchanged or refused with its line. Pure."""

from __future__ import annotations

from services.cli.org.done_when import command_run, done_when, with_command
from services.cli.org.keywords import FINISHED_KEYWORDS, KeywordSet
from services.cli.org.moves import Action, EditResult, LiveBoard, Move, Simulation, Status
from services.cli.org.parse import Headline, OrgDocument, read_title
from services.cli.org.placing import (
    Placed,
    export_problem,
    exported_marks,
    owner_problem,
    place,
    unknown_item,
)
from services.cli.org.verdicts import is_verdicts, judge_verdicts


def plan_edits(doc: OrgDocument, keywords: KeywordSet, live: LiveBoard) -> list[EditResult]:
    """One result per WorkItem headline, new headline and verdict line, in file order."""
    placed = place(doc, live)
    exported_current = {
        p.agent_id: p.headline.properties.get("CURRENT")
        for p in placed
        if p.headline.level == 1 and p.agent_id
    }
    board = Simulation(live)
    results: list[EditResult] = []
    for spot in placed:
        headline = spot.headline
        if headline.level == 1:
            if is_verdicts(headline):
                results += judge_verdicts(headline, placed, keywords, board)
            elif spot.agent_id and not spot.known_agent:
                results.append(_refused(headline, f"agent {spot.agent_id}", "no such agent"))
        elif spot.agent_id is not None or "ID" in headline.properties:
            judged = judge_headline(spot, keywords, board, exported_current)
            results.append(judged)
            check = judge_check(spot, board) if judged.status is not Status.REFUSED else None
            if check is not None:
                results.append(check)
    return results


def judge_check(spot: Placed, board: Simulation) -> EditResult | None:
    """An item headline's `:DONE-WHEN:` (or `sh :check` block) as the item's command check:
    unchanged when the item has that command already, else an operator UpdateWorkItem that
    sets it (refused on a finished item or a stale export). Absent, nothing is removed."""
    headline = spot.headline
    run = done_when(headline)
    view = board.live.items.get(headline.properties.get("ID", ""))
    if run is None or view is None:
        return None
    subject = f"{view['id']} done when: {' '.join(run.split())[:80]}"
    if command_run(view) == run:
        return _result(headline, subject, Status.UNCHANGED, "already its command check")
    _, revision = exported_marks(headline)
    if view.get("state") != "open":
        return _refused(headline, subject, f"{view['id']} is finished; its checks are final")
    if revision != view.get("revision"):
        return _refused(headline, subject, "stale: the item changed since this file was exported")
    checks = tuple(with_command(view, run))
    move = Move(Action.SET_CHECK, str(view["agent_id"]), str(view["id"]), run, checks)
    return EditResult(headline.line, subject, Status.APPLIED, "command check set", move)


def judge_headline(
    spot: Placed, keywords: KeywordSet, board: Simulation, exported_current: dict[str, str | None]
) -> EditResult:
    headline = spot.headline
    subject = f"{headline.properties.get('ID', 'new')} {headline.text}".strip()
    if headline.problems:
        return _refused(headline, subject, headline.problems[0].message)
    if spot.agent_id is None:
        return _refused(headline, subject, "not under an `* agent ID` headline")
    if not spot.known_agent:
        return _refused(headline, subject, f"under agent {spot.agent_id}, which does not exist")
    if "ID" not in headline.properties:
        return _new_headline(spot, spot.agent_id, subject, keywords, board)
    return _item_headline(spot, subject, keywords, board, exported_current)


def _item_headline(
    spot: Placed,
    subject: str,
    keywords: KeywordSet,
    board: Simulation,
    exported_current: dict[str, str | None],
) -> EditResult:
    headline = spot.headline
    work_item_id = headline.properties["ID"]
    view = board.live.items.get(work_item_id)
    if view is None:
        return _refused(headline, subject, unknown_item(work_item_id, spot, board.live))
    exported, revision = exported_marks(headline)
    refusal = owner_problem(spot, view) or export_problem(headline, exported, revision)
    if refusal is not None or exported is None or revision is None:
        return _refused(headline, subject, refusal or "")
    typed = keywords.longrun(headline.keyword) if headline.keyword else None
    edited_title = headline.text != read_title(str(view.get("objective") or ""))
    moved = revision != view.get("revision")
    if typed == exported and not (edited_title and not moved):
        note = f"; it changed since export (revision {revision} → {view.get('revision')})"
        return _result(headline, subject, Status.UNCHANGED, "not edited" + (note if moved else ""))
    if edited_title:
        return _refused(headline, subject, _title_refusal(moved))
    was_current = exported == "DOING" or exported_current.get(str(view["agent_id"])) == view["id"]
    action = keyword_action(exported, typed, was_current, keywords)
    if not isinstance(action, Action):
        return _refused(headline, subject, action)
    return board.settle(headline.line, subject, action, view, revision)


def _title_refusal(moved: bool) -> str:
    if moved:
        return "stale: the objective changed since this file was exported; export it again"
    return (
        "objective edited: an objective is the agent's to change; "
        "send the agent a message (`longrun send`) instead"
    )


_MOVES = {"NEXT": Action.PICK, "DOING": Action.PICK, "CANCELLED": Action.CANCEL}


def keyword_action(
    exported: str, typed: str | None, was_current: bool, keywords: KeywordSet
) -> Action | str:
    """The command a keyword move stands for, or why it stands for none."""
    if typed == "TODO" and was_current and exported not in FINISHED_KEYWORDS:
        return Action.PUT_DOWN
    if typed in _MOVES and exported not in FINISHED_KEYWORDS:
        return _MOVES[typed]
    return _keyword_refusal(exported, typed, keywords)


def _keyword_refusal(exported: str, typed: str | None, keywords: KeywordSet) -> str:
    word = keywords.display
    if typed is None:
        return f"the keyword was removed; put back {word(exported)} or type another one"
    if typed == "DONE":
        return (
            f"{word('DONE')} is earned, not typed: the agent completes an item (CompleteWorkItem, "
            f"through its acceptance checks); type {word('CANCELLED')} to drop it"
        )
    if exported in FINISHED_KEYWORDS:
        return f"the item is finished ({word(exported)}); a finished item cannot be reopened"
    if typed == "TODO":
        return f"only the current item can be put down to {word('TODO')}; longrun orders the rest"
    return f"{word(typed)} follows the item's waits and blocker: longrun sets it, it is not typed"


def _new_headline(
    spot: Placed, agent_id: str, subject: str, keywords: KeywordSet, board: Simulation
) -> EditResult:
    headline = spot.headline
    typed = keywords.longrun(headline.keyword) if headline.keyword else None
    if not headline.text:
        return _refused(headline, subject, "an empty headline")
    if typed in FINISHED_KEYWORDS:
        return _refused(headline, subject, "a new headline cannot start finished")
    return board.ask(headline.line, subject, agent_id, ask_text(headline, spot.parent))


def ask_text(headline: Headline, parent: Headline | None) -> str:
    """The operator message for a new headline: longrun never creates the WorkItem itself, the
    agent decides whether to take it on."""
    lines = [
        "The operator added this to your board in the org file: please take it on "
        f"(create a WorkItem for it if you accept it): {headline.text}"
    ]
    if parent is not None:
        ref = parent.properties.get("ID")
        lines.append(f"It sits under: {parent.text}" + (f" ({ref})" if ref else ""))
    body = [text.strip() for _, text in headline.body if text.strip()]
    if body:
        lines += ["", *body]
    run = done_when(headline)
    if run is not None:
        lines += [
            "",
            "It is done when this command passes in your home (add it to the WorkItem as a "
            f"`command` acceptance check): {run}",
        ]
    return "\n".join(lines)


def _result(headline: Headline, subject: str, status: Status, detail: str) -> EditResult:
    return EditResult(headline.line, subject, status, detail)


def _refused(headline: Headline, subject: str, detail: str) -> EditResult:
    return EditResult(headline.line, subject, Status.REFUSED, detail)
