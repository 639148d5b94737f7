"""Unified diffs as ApplyPatch reads them: parsing into file patches and applying hunks to text,
all or nothing (a hunk that does not match raises before anything is changed)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from shared.domain.errors import DomainError, ErrorKind

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"
DEV_NULL = "/dev/null"


@dataclass
class Hunk:
    """One `@@` block: the lines it expects (context and removals) and what replaces them."""

    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    old_eof_newline: bool = True
    new_eof_newline: bool = True


@dataclass
class FilePatch:
    """The hunks for one file; `old_path` None creates it, `new_path` None deletes it."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


def patch_error(message: str, **details: object) -> DomainError:
    return DomainError(
        ErrorKind.INVALID_TOOL_INPUT,
        message,
        details=dict(details) or None,
        recovery_hint="ReadFile the files, then send a unified diff whose context lines match "
        "them exactly (--- a/path, +++ b/path, @@ -l,n +l,n @@ hunks).",
    )


def _header_path(line: str) -> str | None:
    raw = line[4:].split("\t", 1)[0].strip()
    if raw == DEV_NULL:
        return None
    if raw.startswith(("a/", "b/")):
        raw = raw[2:]
    if not raw:
        raise patch_error(f"a file header names no path: {line!r}")
    return raw


def _hunk_line(hunk: Hunk, line: str, previous: str) -> None:
    if line == _NO_NEWLINE:
        if previous in ("-", " "):
            hunk.old_eof_newline = False
        if previous in ("+", " "):
            hunk.new_eof_newline = False
        return
    tag, text = (line[0], line[1:]) if line else (" ", "")
    if tag not in " +-":
        raise patch_error(f"a hunk line must start with ' ', '+' or '-': {line!r}")
    if tag != "+":
        hunk.old.append(text)
    if tag != "-":
        hunk.new.append(text)


def parse_patch(patch: str) -> list[FilePatch]:
    """The file patches of a unified diff; lines before the first `---` (git headers) are
    ignored. Raises invalid_tool_input on anything it cannot read."""
    files: list[FilePatch] = []
    lines = patch.splitlines()
    index, previous = 0, ""
    while index < len(lines):
        line = lines[index]
        if (
            line.startswith("--- ")
            and index + 1 < len(lines)
            and lines[index + 1].startswith("+++ ")
        ):
            files.append(FilePatch(_header_path(line), _header_path(lines[index + 1])))
            index += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not files:
                raise patch_error("a hunk comes before any --- / +++ file header")
            files[-1].hunks.append(Hunk(old_start=int(match.group(1))))
        elif files and files[-1].hunks and not line.startswith(("diff ", "index ")):
            _hunk_line(files[-1].hunks[-1], line, previous)
        previous = line[:1]
        index += 1
    if not files or any(not f.hunks for f in files):
        raise patch_error("the patch has no file with hunks (expected a unified diff)")
    return files


def _locate(lines: list[str], hunk: Hunk, start: int) -> int:
    """Where the hunk's old lines sit: at the stated line if they match there, else their one
    place after the previous hunk; none or several places is an error."""
    size = len(hunk.old)
    stated = max(hunk.old_start - 1, 0) if size else hunk.old_start
    if stated >= start and lines[stated : stated + size] == hunk.old:
        return stated
    places = [at for at in range(start, len(lines) - size + 1) if lines[at : at + size] == hunk.old]
    if len(places) != 1:
        problem = "does not match the file" if not places else "matches in several places"
        raise patch_error(
            f"hunk @@ -{hunk.old_start} {problem}",
            old_start=hunk.old_start,
            matches=len(places),
        )
    return places[0]


def apply_hunks(text: str, hunks: list[Hunk]) -> str:
    """`text` with every hunk applied in order; raises invalid_tool_input if one fails."""
    lines = text.splitlines()
    had_newline = text.endswith("\n") or not text
    out: list[str] = []
    cursor = 0
    for hunk in hunks:
        at = _locate(lines, hunk, cursor)
        out += lines[cursor:at] + hunk.new
        cursor = at + len(hunk.old)
        if cursor >= len(lines):
            had_newline = hunk.new_eof_newline
    out += lines[cursor:]
    if not out:
        return ""
    return "\n".join(out) + ("\n" if had_newline else "")
