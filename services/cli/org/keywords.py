"""The org keywords of the board: longrun's own words, and an operator's `#+TODO:` words mapped
onto them by position (display on export, and back again on apply). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

OPEN_KEYWORDS = ("TODO", "NEXT", "DOING", "WAITING", "BLOCKED")
"""The open side, in the order a custom `#+TODO:` line's words are mapped onto."""
FINISHED_KEYWORDS = ("DONE", "CANCELLED")
"""The finished side: the two outcomes of a completed WorkItem."""
LONGRUN_KEYWORDS = (*OPEN_KEYWORDS, *FINISHED_KEYWORDS)

# Emacs lets a keyword carry a fast-access key and logging flags: `WAIT(w@/!)`.
_EMACS_SUFFIX = re.compile(r"\([^()]*\)$")
_WORD = re.compile(r"^[^\s*|:()]+$")


class KeywordError(ValueError):
    """A keyword set longrun cannot map (too many words, a word used twice, a bad word)."""


@dataclass(frozen=True, slots=True)
class KeywordSet:
    """The operator's word for each longrun keyword, by position: `shown[i]` displays
    `LONGRUN_KEYWORDS[i]`."""

    shown: tuple[str, ...] = LONGRUN_KEYWORDS

    @classmethod
    def parse(cls, spec: str) -> KeywordSet:
        """`"ASSIGNED RESEARCH WRITING | PUBLISHED KILLED"` (a `#+TODO:` line's value): the
        open words map onto TODO NEXT DOING WAITING BLOCKED, the finished words onto DONE
        CANCELLED; states left without a word keep longrun's. Without `|`, the last word is
        the finished one (org's rule)."""
        words = [_EMACS_SUFFIX.sub("", word) for word in spec.split()]
        if "|" in words:
            bar = words.index("|")
            open_words, finished = words[:bar], words[bar + 1 :]
        else:
            open_words, finished = words[:-1], words[-1:]
        if "|" in finished:
            raise KeywordError("more than one `|` in the keyword set")
        shown = _fill(open_words, OPEN_KEYWORDS, "open")
        return cls(shown + _fill(finished, FINISHED_KEYWORDS, "finished"))

    def __post_init__(self) -> None:
        bad = [word for word in self.shown if not _WORD.match(word)]
        if bad:
            raise KeywordError(f"{bad[0]!r} cannot be an org keyword")
        repeated = sorted({word for word in self.shown if self.shown.count(word) > 1})
        if repeated:
            raise KeywordError(
                f"{repeated[0]} would name two states ({self.line()}); give each state its own word"
            )

    def display(self, keyword: str) -> str:
        """The operator's word for one of longrun's keywords."""
        return self.shown[LONGRUN_KEYWORDS.index(keyword)]

    def longrun(self, word: str) -> str | None:
        """longrun's keyword for the operator's word; None when the word is not in the set."""
        if word not in self.shown:
            return None
        return LONGRUN_KEYWORDS[self.shown.index(word)]

    def line(self) -> str:
        """The value of the `#+TODO:` line that declares this set."""
        split = len(OPEN_KEYWORDS)
        return f"{' '.join(self.shown[:split])} | {' '.join(self.shown[split:])}"


def _fill(words: list[str], keywords: tuple[str, ...], side: str) -> tuple[str, ...]:
    if len(words) > len(keywords):
        raise KeywordError(
            f"{len(words)} {side} words for {len(keywords)} {side} states "
            f"({' '.join(keywords)}); drop {len(words) - len(keywords)}"
        )
    return (*words, *keywords[len(words) :])


DEFAULT_KEYWORDS = KeywordSet()
