"""Walking and searching an agent's home with bounded work: a walk reads at most
`SCAN_MAX_ENTRIES` directory entries, and SearchFiles matches with the `regex` engine under a
deadline (a pattern that backtracks for ever answers `pattern_too_slow` instead of holding a
thread, docs/tools.md). Runs in a worker thread (`shared/file_runner.py`), never on a loop."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import regex
from pydantic import Field

from shared.agent_home import FilePath, FileToolInput, home_dir, resolve_in_home
from shared.domain.errors import DomainError, ErrorKind

SEARCH_MAX_RESULTS = 500
SEARCH_MAX_FILE_BYTES = 2_000_000
"""SearchFiles skips larger files (named in `skipped_large`), so one log cannot stall a turn."""
SEARCH_LINE_CHARS = 400
SEARCH_TIMEOUT_MS = 2_000
"""How long one SearchFiles call may take (LONGRUN_SEARCH_TIMEOUT_MS)."""
SCAN_MAX_ENTRIES = 20_000
"""Directory entries one ListFiles or SearchFiles call reads at most: a huge tree is cut
(`truncated`), not walked whole."""


class SearchFilesInput(FileToolInput):
    """Search the text files under `path` for lines matching the regular expression `pattern`."""

    pattern: Annotated[str, Field(min_length=1, max_length=1000)]
    path: FilePath = "."
    max_results: Annotated[int, Field(ge=1, le=SEARCH_MAX_RESULTS)] = 50


@dataclass
class Scan:
    """What a walk may still read; `cut` once it stopped short of the whole tree."""

    left: int = SCAN_MAX_ENTRIES
    cut: bool = False


def directory(agent_home: Path, agent_id: str, path: str) -> Path:
    target = resolve_in_home(agent_home, agent_id, path)
    if not target.is_dir():
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"{path!r} is not a directory in your home",
            details={"path": path},
        )
    return target


def _entries(folder: Path, scan: Scan) -> list[os.DirEntry[str]]:
    """A directory's entries in name order, at most what the scan has left."""
    found: list[os.DirEntry[str]] = []
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                if scan.left == 0:
                    scan.cut = True
                    break
                scan.left -= 1
                found.append(entry)
    except OSError:
        return []
    return sorted(found, key=lambda entry: entry.name)


def walk(top: Path, recursive: bool, scan: Scan) -> Iterator[Path]:
    """Entries under `top` in name order, each directory's entries before those of its
    subdirectories (as os.walk lists them); symlinks are listed, never followed."""
    pending = [top]
    while pending:
        entries = _entries(pending.pop(), scan)
        for entry in entries:
            yield Path(entry.path)
        if recursive:
            below = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
            pending += reversed(below)


def too_slow(
    args: SearchFilesInput, limit_ms: int, searched: int | None = None, *, waited: bool = False
) -> DomainError:
    """`pattern_too_slow`; `waited`: the search never started, the agent's previous one (a
    pattern past its limit) still running out its limit in its thread."""
    done = f" ({searched} files searched)" if searched is not None else ""
    message = (
        f"SearchFiles did not start within {limit_ms} ms: your previous search is still "
        "running out its limit"
        if waited
        else f"SearchFiles did not finish within {limit_ms} ms{done}: the pattern "
        f"{args.pattern!r} takes too long to match"
    )
    return DomainError(
        ErrorKind.PATTERN_TOO_SLOW,
        message,
        details={"pattern": args.pattern, "path": args.path, "limit_ms": limit_ms},
        recovery_hint="Simplify the pattern (nested quantifiers such as (a+)+ or (a|a)* "
        "backtrack without end) or search a narrower path.",
    )


def _compile(pattern: str) -> regex.Pattern[str]:
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"pattern is not a valid regular expression: {exc}",
            details={"pattern": pattern},
        ) from None


def _search_one(
    target: Path, pattern: regex.Pattern[str], room: int, deadline: float
) -> list[tuple[int, str]]:
    """Matching lines of one file; raises TimeoutError once past `deadline` (monotonic)."""
    try:
        data = target.read_bytes()
    except OSError:
        return []
    if b"\x00" in data[:8192]:
        return []  # binary
    found: list[tuple[int, str]] = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        # The engine's own limit stops one line's match; the GIL is released while it runs.
        if pattern.search(line, timeout=left, concurrent=True):
            found.append((number, line[:SEARCH_LINE_CHARS]))
            if len(found) == room:
                break
    return found


def search_files(
    agent_home: Path, agent_id: str, args: SearchFilesInput, *, deadline: float, limit_ms: int
) -> dict[str, Any]:
    """SearchFiles: `{matches: [{path, line, text}], truncated, skipped_large}`; regular files
    only (symlinks are not followed), binaries skipped, each line cut to 400 characters. Past
    `deadline` (time.monotonic) it raises `pattern_too_slow`."""
    pattern = _compile(args.pattern)
    home = home_dir(agent_home, agent_id)
    matches: list[dict[str, Any]] = []
    skipped: list[str] = []
    scan, searched, truncated = Scan(), 0, False
    for entry in walk(directory(agent_home, agent_id, args.path), True, scan):
        if entry.is_symlink() or not entry.is_file():
            continue
        relative = entry.relative_to(home).as_posix()
        if entry.stat().st_size > SEARCH_MAX_FILE_BYTES:
            skipped.append(relative)
            continue
        room = args.max_results - len(matches)
        try:
            found = _search_one(entry, pattern, room + 1, deadline)
        except TimeoutError:
            raise too_slow(args, limit_ms, searched) from None
        searched += 1
        for number, text in found:
            if len(matches) == args.max_results:
                truncated = True
                break
            matches.append({"path": relative, "line": number, "text": text})
        if truncated:
            break
    truncated = truncated or scan.cut
    return {"matches": matches, "truncated": truncated, "skipped_large": skipped}
