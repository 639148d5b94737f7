"""A small org-mode reader for the board file: in-buffer settings, headlines (level, keyword,
priority, title, tags), planning lines, property drawers and body text, each with its line
number. Pure: text in, a document out. It reads what `longrun board --format org` writes and
what a person makes of it in Emacs or a plain editor (CRLF or CR line ends, a BOM, trailing
whitespace, indented drawers and properties, blank lines, `:KEY+:` properties)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

# Org's own headline rule: stars at column 0, then whitespace (or nothing at all).
_HEADLINE = re.compile(r"^(\*+)(?:[ \t]+(.*?))?[ \t]*$")
_PRIORITY = re.compile(r"^\[#[A-Za-z0-9]\][ \t]*")
_TAGS = re.compile(r"^(.*?)(?:[ \t]+|^)(:(?:[\w@#%]+:)+)$")
_SETTING = re.compile(r"^#\+(\w+):[ \t]*(.*?)[ \t]*$")
_PLANNING = re.compile(r"^[ \t]*(?:CLOSED|SCHEDULED|DEADLINE):")
_DRAWER_START = re.compile(r"^[ \t]*:PROPERTIES:[ \t]*$", re.IGNORECASE)
_DRAWER_END = re.compile(r"^[ \t]*:END:[ \t]*$", re.IGNORECASE)
_PROPERTY = re.compile(r"^[ \t]*:([^\s:]+?)(\+)?:(?:[ \t]+(.*?))?[ \t]*$")
_COOKIE = re.compile(r"\[\d*(?:/\d*|%)\]")


@dataclass(frozen=True, slots=True)
class Problem:
    """Something in the file that is not well-formed org, at its (1-based) line."""

    line: int
    message: str


@dataclass(frozen=True, slots=True)
class Headline:
    line: int
    level: int
    keyword: str | None
    """The keyword as written, when it is one of the file's keywords (org's rule)."""
    title: str
    """The headline's text without keyword, priority, tags and statistics cookies, runs of
    whitespace made one space (`plain_title`)."""
    tags: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    """Property drawer entries, keys upper-cased (org keys are case-insensitive)."""
    body: tuple[tuple[int, str], ...] = ()
    """The section's other lines (not planning, not the drawer) with their line numbers,
    right-stripped, blank lines at either end dropped."""
    problems: tuple[Problem, ...] = ()
    """What is malformed in this headline's section (a drawer without `:END:`, ...)."""

    @property
    def text(self) -> str:
        return self.title


@dataclass(frozen=True, slots=True)
class Setting:
    line: int
    key: str
    """Upper-cased: `#+todo:` and `#+TODO:` are the same setting."""
    value: str


@dataclass(frozen=True, slots=True)
class OrgDocument:
    settings: tuple[Setting, ...]
    headlines: tuple[Headline, ...]


def split_lines(text: str) -> list[str]:
    """Org's lines: LF, CRLF and lone CR all end one; a leading BOM is not text."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    return text.split("\n")


def settings(text: str) -> tuple[Setting, ...]:
    """Every `#+KEY: value` line, wherever it is (org reads them anywhere in the buffer)."""
    found = []
    for number, line in enumerate(split_lines(text), start=1):
        match = _SETTING.match(line)
        if match:
            found.append(Setting(number, match[1].upper(), match[2]))
    return tuple(found)


def plain_title(text: str) -> str:
    """A title as compared with an objective: statistics cookies (`[1/3]`, `[50%]`) dropped
    and runs of whitespace made one space."""
    return " ".join(_COOKIE.sub(" ", text).split())


def read_title(text: str) -> str:
    """How a headline written with `text` after its keyword reads back (priority and tags
    dropped, `plain_title`): what an exported objective is compared with."""
    return _headline_text(text, ())[1]


def parse_org(text: str, keywords: Collection[str]) -> OrgDocument:
    """The document; `keywords` are the words org would treat as TODO keywords here."""
    lines = split_lines(text)
    starts = [(i, m) for i, line in enumerate(lines) if (m := _HEADLINE.match(line))]
    headlines = []
    for index, (start, match) in enumerate(starts):
        end = starts[index + 1][0] if index + 1 < len(starts) else len(lines)
        headlines.append(_section(lines, match, start, end, keywords))
    return OrgDocument(settings(text), tuple(headlines))


def _section(
    lines: Sequence[str], match: re.Match[str], start: int, end: int, keywords: Collection[str]
) -> Headline:
    keyword, title, tags = _headline_text(match[2] or "", keywords)
    body = list(range(start + 1, end))
    properties, drawer, problems = _drawer(lines, body)
    rest = [
        (i + 1, lines[i].rstrip())
        for i in body
        if i not in drawer and not _PLANNING.match(lines[i])
    ]
    return Headline(
        line=start + 1,
        level=len(match[1]),
        keyword=keyword,
        title=title,
        tags=tags,
        properties=properties,
        body=tuple(_trim_blank(rest)),
        problems=tuple(problems),
    )


def _headline_text(text: str, keywords: Collection[str]) -> tuple[str | None, str, tuple[str, ...]]:
    keyword = None
    first, _, tail = text.replace("\t", " ").partition(" ")
    if first in keywords:
        keyword, text = first, tail.lstrip()
    text = _PRIORITY.sub("", text)
    tags: tuple[str, ...] = ()
    tagged = _TAGS.match(text)
    if tagged:
        text, tags = tagged[1], tuple(t for t in tagged[2].split(":") if t)
    return keyword, plain_title(text), tags


def _drawer(
    lines: Sequence[str], body: Sequence[int]
) -> tuple[dict[str, str], set[int], list[Problem]]:
    """The section's first property drawer: its entries, its line indexes, its problems."""
    opening = next((i for i in body if _DRAWER_START.match(lines[i])), None)
    if opening is None:
        return {}, set(), []
    properties: dict[str, str] = {}
    problems: list[Problem] = []
    for i in body:
        if i <= opening:
            continue
        if _DRAWER_END.match(lines[i]):
            return properties, set(range(opening, i + 1)), problems
        entry = _PROPERTY.match(lines[i])
        if entry is None:
            problems.append(Problem(i + 1, f"not a property line: {lines[i].strip()!r}"))
            continue
        key, value = entry[1].upper(), entry[3] or ""
        properties[key] = f"{properties[key]} {value}" if entry[2] and key in properties else value
    problems.append(Problem(opening + 1, ":PROPERTIES: drawer without its :END: line"))
    return properties, set(body[body.index(opening) :]), problems


def _trim_blank(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    while lines and not lines[0][1]:
        lines.pop(0)
    while lines and not lines[-1][1]:
        lines.pop()
    return lines
