"""`:DONE-WHEN:` and `sh :check` blocks read from a board file, and the check list that makes
one the item's command check."""

from __future__ import annotations

from services.cli.org.done_when import command_run, done_when, with_command
from services.cli.org.parse import Headline, parse_org


def headline(text: str) -> Headline:
    doc = parse_org(text, {"TODO", "NEXT", "DOING", "DONE", "CANCELLED", "WAITING", "BLOCKED"})
    return doc.headlines[-1]


def test_the_property_wins_and_a_block_is_read_dedented() -> None:
    both = headline(
        "** TODO Ship\n:PROPERTIES:\n:DONE-WHEN: pytest -q\n:END:\n"
        "#+begin_src sh :check\n  make test\n#+end_src\n"
    )
    assert done_when(both) == "pytest -q"
    block = headline(
        "** TODO Ship\nSome notes.\n#+BEGIN_SRC bash :check\n    cd app\n      make test\n"
        "#+END_SRC\n"
    )
    assert done_when(block) == "cd app\n  make test"
    plain = headline("** TODO Ship\n#+begin_src sh\n  echo not a check\n#+end_src\n")
    assert done_when(plain) is None
    assert done_when(headline("** TODO Ship\n#+begin_src sh :check\n#+end_src\n")) is None


def test_the_file_command_replaces_the_command_check_and_keeps_the_others() -> None:
    view = {
        "acceptance": [
            {"kind": "todos_done", "set_by": "agent"},
            {
                "kind": "command",
                "run": "old",
                "timeout_s": 60,
                "expect": "exit0",
                "set_by": "agent",
            },
            {"kind": "command", "run": "older", "set_by": "agent"},
            {
                "kind": "webhook",
                "url": "https://c.example/x",
                "timeout_s": 30,
                "set_by": "operator",
            },
        ]
    }
    assert command_run(view) == "old"
    assert with_command(view, "pytest -q") == [
        {"kind": "todos_done"},
        {"kind": "command", "run": "pytest -q", "timeout_s": 60, "expect": "exit0"},
        {"kind": "webhook", "url": "https://c.example/x", "timeout_s": 30},
    ]
    assert with_command({"acceptance": []}, "make") == [{"kind": "command", "run": "make"}]
    assert command_run({"acceptance": []}) is None
