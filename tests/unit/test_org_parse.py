"""The org reader: what the board export writes, and what a person makes of it in Emacs or a
plain editor (CRLF and CR line ends, a BOM, trailing whitespace, indentation, blank lines, tags,
priorities, cookies, `:KEY+:` properties), each with its line number."""

from __future__ import annotations

from services.cli.board import AgentBoard
from services.cli.org.keywords import DEFAULT_KEYWORDS
from services.cli.org.parse import Headline, parse_org, plain_title, read_title, settings
from services.cli.org.render import render_org
from shared.domain.readouts import work_item_view
from tests.builders import make_agent, make_todo, make_work_item, work_item_id

WORDS = DEFAULT_KEYWORDS.shown


def one(text: str) -> Headline:
    (headline,) = parse_org(text, WORDS).headlines
    return headline


def test_reads_back_what_the_export_writes() -> None:
    first, second = work_item_id(1), work_item_id(2)
    todos = (make_todo("outline", "completed"), make_todo("draft"))
    items = [
        make_work_item(id=first, objective="Write the  report", todo_list=todos),
        make_work_item(id=second, objective="Check :the: sources [#A]"),
    ]
    views = [work_item_view(i, (), first, include_todo_list=True).to_json() for i in items]
    agent = make_agent(current_work_item_id=first).model_dump(mode="json")
    doc = parse_org(render_org([AgentBoard(agent, views)]), WORDS)
    section, doing, todo = doc.headlines
    assert (section.level, section.text, section.properties["CURRENT"]) == (
        1,
        "agent agent-1",
        first,
    )
    assert (doing.level, doing.keyword, doing.title, doing.tags) == (
        2,
        "DOING",
        "Write the report",
        ("current",),
    )
    assert doing.properties["ID"] == first
    assert (doing.properties["KEYWORD"], doing.properties["REVISION"]) == ("DOING", "1")
    assert [text for _, text in doing.body] == ["- [X] outline", "- [ ] draft"]
    assert todo.keyword == "NEXT"
    assert todo.title == read_title("Check :the: sources [#A]")
    assert [s.key for s in doc.settings] == ["TITLE", "TODO"]


def test_crlf_cr_bom_and_trailing_whitespace_read_like_lf() -> None:
    lf = "* agent a\n** NEXT Ship it  [1/2]   :x:\n:PROPERTIES:\n:ID: wi_1\n:END:\nbody\n"
    for text in (
        lf,
        lf.replace("\n", "\r\n"),
        lf.replace("\n", "\r"),
        "\ufeff" + lf.replace("\n", "  \t\n"),
    ):
        doc = parse_org(text, WORDS)
        headline = doc.headlines[1]
        assert (headline.line, headline.keyword, headline.title, headline.tags) == (
            2,
            "NEXT",
            "Ship it",
            ("x",),
        )
        assert headline.properties == {"ID": "wi_1"}
        assert [text for _, text in headline.body] == ["body"]


def test_indented_drawer_after_planning_and_blank_lines_is_read() -> None:
    headline = one(
        "** TODO Plan\n"
        "   CLOSED: [2026-11-27 Fri 10:00] SCHEDULED: <2026-11-28 Sat>\n"
        "\n"
        "   :properties:\n"
        "   :id:   wi_2   \n"
        "   :Note: first\n"
        "   :NOTE+: second\n"
        "   :Empty:\n"
        "   :end:\n"
        "\n"
        "   Some words.\n"
        "\n"
    )
    assert headline.properties == {"ID": "wi_2", "NOTE": "first second", "EMPTY": ""}
    assert headline.body == ((11, "   Some words."),)
    assert headline.problems == ()


def test_keywords_are_only_the_files_words_and_case_matters() -> None:
    assert one("** todo lower case").keyword is None
    assert one("** TODOS plural").title == "TODOS plural"
    assert one("** TODO").keyword == "TODO"
    custom = parse_org("** WRITING Draft", ("WRITING",)).headlines[0]
    assert (custom.keyword, custom.title) == ("WRITING", "Draft")
    assert one("**\tDOING\tTabbed  title").title == "Tabbed title"


def test_priority_tags_and_cookies_are_not_the_title() -> None:
    headline = one("** NEXT [#B] Review [2/5] the draft [40%]   :review:urgent@home:")
    assert (headline.title, headline.tags) == ("Review the draft", ("review", "urgent@home"))
    assert plain_title("  a  [1/2]  b [%] ") == "a b"
    assert one("** NEXT A title:with:colons").title == "A title:with:colons"


def test_what_org_does_not_call_a_headline_is_body() -> None:
    doc = parse_org("*bold* text\n  ** indented\n* real\n#+begin_quote\n  * quoted\n", WORDS)
    (real,) = doc.headlines
    assert (real.line, real.text) == (3, "real")
    assert [line for line, _ in real.body] == [4, 5]
    assert [h.level for h in parse_org("***\n* \n", WORDS).headlines] == [3, 1]


def test_a_malformed_drawer_is_a_problem_on_its_line() -> None:
    # The next headline ends the section, and the drawer with it.
    cut, after = parse_org("** TODO x\n:PROPERTIES:\n:ID: wi_1\n** TODO y\n", WORDS).headlines
    assert [(p.line, p.message) for p in cut.problems] == [
        (2, ":PROPERTIES: drawer without its :END: line")
    ]
    assert (after.title, after.problems, after.properties) == ("y", (), {})
    junk = one("** TODO x\n:PROPERTIES:\nID wi_1\n:END:\n")
    assert [(p.line, "not a property line" in p.message) for p in junk.problems] == [(3, True)]


def test_settings_are_read_anywhere_and_keys_are_case_insensitive() -> None:
    found = settings("* a\n#+todo: A B | C\ntext\n#+TITLE:  board  \n")
    assert [(s.line, s.key, s.value) for s in found] == [
        (2, "TODO", "A B | C"),
        (4, "TITLE", "board"),
    ]
