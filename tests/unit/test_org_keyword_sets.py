"""Custom `#+TODO:` keyword sets: the operator's words map onto longrun's keywords by position
for display, and back again for apply; a set longrun cannot map is refused with why; the file's
`#+TODO:` line and `--keywords` must agree."""

from __future__ import annotations

import httpx
import pytest

from services.cli.board import AgentBoard
from services.cli.client import LongrunClient
from services.cli.org.apply import OrgFileError, keyword_set, run_board_apply
from services.cli.org.keywords import LONGRUN_KEYWORDS, KeywordError, KeywordSet
from services.cli.org.parse import settings
from services.cli.org.render import render_org
from shared.domain.readouts import work_item_view
from tests.builders import make_agent, make_work_item, work_item_id

EDITORIAL = "ASSIGNED RESEARCH WRITING | PUBLISHED KILLED"


def test_words_map_by_position_and_missing_states_keep_longruns_words() -> None:
    words = KeywordSet.parse(EDITORIAL)
    assert [words.display(k) for k in LONGRUN_KEYWORDS] == [
        "ASSIGNED",
        "RESEARCH",
        "WRITING",
        "WAITING",
        "BLOCKED",
        "PUBLISHED",
        "KILLED",
    ]
    assert [words.longrun(w) for w in ("ASSIGNED", "KILLED", "WAITING", "TODO")] == [
        "TODO",
        "CANCELLED",
        "WAITING",
        None,
    ]
    assert words.line() == "ASSIGNED RESEARCH WRITING WAITING BLOCKED | PUBLISHED KILLED"
    assert KeywordSet.parse(words.line()) == words


def test_emacs_spelling_reads_the_same() -> None:
    assert KeywordSet.parse("A(a) B(b@/!) | C(c!) D") == KeywordSet.parse("A B | C D")
    # Without a bar, org takes the last word as the finished one.
    assert KeywordSet.parse("A B C").shown[:3] == ("A", "B", "DOING")
    assert KeywordSet.parse("A B C").display("DONE") == "C"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("A B C D E F | X", "6 open words for 5 open states"),
        ("A | X Y Z", "3 finished words for 2 finished states"),
        ("A B | A", "A would name two states"),
        ("NEXT | DONE", "NEXT would name two states"),
        ("A | B | C", "more than one `|`"),
        ("A:B | C", "cannot be an org keyword"),
    ],
)
def test_sets_longrun_cannot_map_are_refused(spec: str, says: str) -> None:
    with pytest.raises(KeywordError, match=says):
        KeywordSet.parse(spec)


def test_export_displays_the_operators_words() -> None:
    first = work_item_id(1)
    view = work_item_view(make_work_item(id=first), (), first, include_todo_list=True).to_json()
    agent = make_agent(current_work_item_id=first).model_dump(mode="json")
    text = render_org([AgentBoard(agent, [view])], KeywordSet.parse(EDITORIAL))
    assert "#+TODO: ASSIGNED RESEARCH WRITING WAITING BLOCKED | PUBLISHED KILLED\n" in text
    assert "\n** WRITING " in text
    assert "\n:KEYWORD: DOING\n" in text  # longrun's own word, for apply
    assert "(to RESEARCH or WRITING: pick;" in text
    assert "PUBLISHED is earned by the agent, never typed" in text


def test_apply_reads_the_files_line_and_refuses_a_disagreeing_option() -> None:
    text = f"#+TITLE: b\n#+TODO: {EDITORIAL}\n"
    assert keyword_set(settings(text), None) == KeywordSet.parse(EDITORIAL)
    assert keyword_set(settings(text), EDITORIAL) == KeywordSet.parse(EDITORIAL)
    assert keyword_set(settings("* x\n"), EDITORIAL) == KeywordSet.parse(EDITORIAL)
    assert keyword_set(settings("* x\n"), None) == KeywordSet()
    with pytest.raises(OrgFileError, match="differs from --keywords") as differs:
        keyword_set(settings(text), "A B | C D")
    assert differs.value.line == 2
    with pytest.raises(OrgFileError, match="second #\\+TODO") as twice:
        keyword_set(settings(text + "#+SEQ_TODO: A | B\n"), None)
    assert twice.value.line == 3
    with pytest.raises(OrgFileError, match="two states") as bad:
        keyword_set(settings("\n#+TODO: A | A\n"), None)
    assert bad.value.line == 2


def test_a_file_whose_keywords_cannot_be_mapped_is_refused_whole_before_any_request() -> None:
    def no_request(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing may be sent: {request.url}")

    said: list[str] = []
    with LongrunClient(
        "http://longrun.test", "t", transport=httpx.MockTransport(no_request)
    ) as client:
        code = run_board_apply(
            client,
            "board.org",
            "#+TODO: A | B\n* agent a\n#+TODO: C | D\n",
            keywords=None,
            dry_run=False,
            echo=said.append,
        )
    assert code == 1
    assert said == [
        "board.org:3: a second #+TODO: line: longrun maps one keyword set (nothing applied)"
    ]
