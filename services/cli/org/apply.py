"""`longrun board apply FILE.org`: reads the file and the live board of the agents it names,
plans the edits, sends each planned move as one operator command over the HTTP API, and reports
one line per WorkItem headline, new headline and verdict line: applied, unchanged or refused."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from services.cli.client import ApiError, LongrunClient
from services.cli.org.edits import plan_edits
from services.cli.org.keywords import DEFAULT_KEYWORDS, KeywordError, KeywordSet
from services.cli.org.moves import Action, EditResult, Json, LiveBoard, Move, Status
from services.cli.org.parse import OrgDocument, Setting, parse_org, settings
from services.cli.org.placing import place, section_agent

TODO_SETTINGS = ("TODO", "SEQ_TODO", "TYP_TODO")
_UNKNOWN_KINDS = ("work_item_not_found", "agent_not_found", "invalid_request")


class OrgFileError(Exception):
    """The file as a whole cannot be applied (its keyword set); nothing is applied."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def keyword_set(found: Iterable[Setting], given: str | None) -> KeywordSet:
    """The keywords to read the file with: its `#+TODO:` line, else `--keywords`, else
    longrun's own; both given must agree."""
    lines = [s for s in found if s.key in TODO_SETTINGS]
    if len(lines) > 1:
        raise OrgFileError(lines[1].line, "a second #+TODO: line: longrun maps one keyword set")
    try:
        chosen = KeywordSet.parse(given) if given is not None else None
        in_file = KeywordSet.parse(lines[0].value) if lines else None
    except KeywordError as exc:
        raise OrgFileError(lines[0].line if lines else 0, str(exc)) from None
    if chosen is not None and in_file is not None and chosen != in_file:
        raise OrgFileError(lines[0].line, f"#+TODO: {in_file.line()} differs from --keywords")
    return in_file or chosen or DEFAULT_KEYWORDS


def read_document(text: str, given: str | None) -> tuple[OrgDocument, KeywordSet]:
    keywords = keyword_set(settings(text), given)
    return parse_org(text, keywords.shown), keywords


def read_live(client: LongrunClient, doc: OrgDocument) -> LiveBoard:
    """The agents the file's sections name, their WorkItems, and what the edits need besides:
    items filed under an agent that are not in its list, and the operator messages already
    sent to agents that get a new headline."""
    agents: dict[str, Json] = {}
    items: dict[str, Json] = {}
    for agent_id in dict.fromkeys(section_agent(h) for h in doc.headlines if h.level == 1):
        agent = client.find_agent(agent_id) if agent_id else None
        if agent_id and agent is not None:
            agents[agent_id] = agent
            items.update((v["id"], v) for v in client.list_work_items(agent_id)["work_items"])
    denied: set[str] = set()
    asking: set[str] = set()
    for spot in place(doc, LiveBoard(agents, items)):
        work_item_id = spot.headline.properties.get("ID")
        if spot.headline.level > 1 and spot.agent_id in agents and not work_item_id:
            asking.add(spot.agent_id)
        if work_item_id and work_item_id not in items and spot.agent_id in agents:
            owner = spot.headline.properties.get("AGENT_ID") if spot.nested else None
            _look_up(client, owner or spot.agent_id, work_item_id, items, denied)
    asked = {agent_id: _operator_messages(client, agent_id) for agent_id in asking}
    return LiveBoard(agents, items, frozenset(denied), asked)


def _look_up(
    client: LongrunClient,
    agent_id: str,
    work_item_id: str,
    items: dict[str, Json],
    denied: set[str],
) -> None:
    try:
        items[work_item_id] = client.get_work_item(agent_id, work_item_id)["work_item"]
    except ApiError as exc:
        if exc.kind == "work_item_access_denied":
            denied.add(work_item_id)
        elif exc.kind not in _UNKNOWN_KINDS:
            raise


def _operator_messages(client: LongrunClient, agent_id: str) -> frozenset[str]:
    events = client.history_all(agent_id)
    return frozenset(
        str(e["data"].get("text")) for e in events if e["type"] == "operator_message_received"
    )


def send_move(client: LongrunClient, move: Move) -> None:
    """One operator command for one move."""
    agent_id, work_item_id = move.agent_id, move.work_item_id or ""
    if move.action is Action.PICK:
        client.pick_work_item(agent_id, work_item_id, move.text)
    elif move.action is Action.PUT_DOWN:
        client.put_down_work_item(agent_id, work_item_id, move.text)
    elif move.action is Action.CANCEL:
        client.cancel_work_item(agent_id, work_item_id, move.text)
    elif move.action is Action.SET_CHECK:
        client.set_acceptance(agent_id, work_item_id, list(move.acceptance))
    else:
        client.send_message(agent_id, move.text)


def apply_results(
    client: LongrunClient, results: Iterable[EditResult], *, dry_run: bool
) -> Iterable[EditResult]:
    """Each result, its move sent first unless this is a dry run; a move the API refuses
    (the board moved between reading and sending) becomes a refusal."""
    for result in results:
        yield result if dry_run else _sent(client, result)


def _sent(client: LongrunClient, result: EditResult) -> EditResult:
    if result.move is None:
        return result
    try:
        send_move(client, result.move)
    except ApiError as exc:
        return replace(result, status=Status.REFUSED, detail=f"refused by longrun: {exc}")
    return result


def run_board_apply(
    client: LongrunClient,
    name: str,
    text: str,
    *,
    keywords: str | None,
    dry_run: bool,
    echo: Callable[[str], None],
) -> int:
    """Apply the file; the exit code: 0 when nothing was refused, else 1."""
    try:
        doc, chosen = read_document(text, keywords)
    except OrgFileError as exc:
        echo(f"{name}:{exc.line}: {exc} (nothing applied)")
        return 1
    planned = plan_edits(doc, chosen, read_live(client, doc))
    counts = dict.fromkeys(Status, 0)
    for result in apply_results(client, planned, dry_run=dry_run):
        counts[result.status] += 1
        echo(format_result(name, result, dry_run=dry_run))
    tally = " · ".join(f"{counts[s]} {_label(s, dry_run)}" for s in Status)
    echo(f"{tally}{' (dry run: nothing sent)' if dry_run else ''}")
    return 1 if counts[Status.REFUSED] else 0


def _label(status: Status, dry_run: bool) -> str:
    return "to apply" if dry_run and status is Status.APPLIED else status.value


def format_result(name: str, result: EditResult, *, dry_run: bool = False) -> str:
    return (
        f"{_label(result.status, dry_run):<9} {name}:{result.line}  "
        f"{result.subject} — {result.detail}"
    )
