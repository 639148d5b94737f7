"""The six file tools an agent has in its home: names, input schemas, ListFiles, SearchFiles,
ApplyPatch, and one entry point that runs any of them and answers with the tool envelope."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, ValidationError

from shared.agent_home import (
    EditFileInput,
    FilePath,
    FileToolInput,
    ReadFileInput,
    WriteFileInput,
    edit_file,
    home_dir,
    read_bytes,
    read_file,
    resolve_in_home,
    write_atomically,
    write_file,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.tools import ToolEnvelope
from shared.domain.unified_diff import apply_hunks, parse_patch, patch_error

LIST_MAX_ENTRIES = 1000
SEARCH_MAX_RESULTS = 500
SEARCH_MAX_FILE_BYTES = 2_000_000
"""SearchFiles skips larger files (named in `skipped_large`), so one log cannot stall a turn."""
SEARCH_LINE_CHARS = 400
PATCH_MAX_FILE_BYTES = 5_000_000


class ListFilesInput(FileToolInput):
    """List the entries of a directory in your home (`recursive` walks below it)."""

    path: FilePath = "."
    recursive: bool = False


class SearchFilesInput(FileToolInput):
    """Search the text files under `path` for lines matching the regular expression `pattern`."""

    pattern: Annotated[str, Field(min_length=1, max_length=1000)]
    path: FilePath = "."
    max_results: Annotated[int, Field(ge=1, le=SEARCH_MAX_RESULTS)] = 50


class ApplyPatchInput(FileToolInput):
    """Apply a unified diff to files in your home: every hunk applies or nothing changes."""

    patch: Annotated[
        str,
        StringConstraints(min_length=1),
        Field(
            description="--- a/path, +++ b/path, then @@ -l,n +l,n @@ hunks; /dev/null as the "
            "old path creates a file, as the new path deletes it"
        ),
    ]


class FileToolName(StrEnum):
    READ_FILE = "ReadFile"
    WRITE_FILE = "WriteFile"
    EDIT_FILE = "EditFile"
    LIST_FILES = "ListFiles"
    SEARCH_FILES = "SearchFiles"
    APPLY_PATCH = "ApplyPatch"


FILE_TOOL_INPUTS: dict[FileToolName, type[FileToolInput]] = {
    FileToolName.READ_FILE: ReadFileInput,
    FileToolName.WRITE_FILE: WriteFileInput,
    FileToolName.EDIT_FILE: EditFileInput,
    FileToolName.LIST_FILES: ListFilesInput,
    FileToolName.SEARCH_FILES: SearchFilesInput,
    FileToolName.APPLY_PATCH: ApplyPatchInput,
}
MUTATING = frozenset({FileToolName.WRITE_FILE, FileToolName.EDIT_FILE, FileToolName.APPLY_PATCH})


def file_tool_schema(name: FileToolName) -> dict[str, Any]:
    """JSON schema of a file tool's input, generated from its model."""
    return FILE_TOOL_INPUTS[name].model_json_schema()


def _directory(agent_home: Path, agent_id: str, path: str) -> Path:
    target = resolve_in_home(agent_home, agent_id, path)
    if not target.is_dir():
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"{path!r} is not a directory in your home",
            details={"path": path},
        )
    return target


def _walk(top: Path, recursive: bool) -> Iterator[Path]:
    """Entries under `top` in name order; symlinks are listed, never followed."""
    for root, dirs, files in os.walk(top, followlinks=False):
        dirs.sort()
        for name in sorted([*dirs, *files]):
            yield Path(root) / name
        if not recursive:
            return


def _kind(entry: Path) -> str:
    if entry.is_symlink():
        return "symlink"
    return "dir" if entry.is_dir() else "file"


def list_files(agent_home: Path, agent_id: str, args: ListFilesInput) -> dict[str, Any]:
    """ListFiles: `{path, entries: [{path, type, bytes?}], truncated}`, paths home-relative."""
    home = home_dir(agent_home, agent_id)
    top = _directory(agent_home, agent_id, args.path)
    entries: list[dict[str, Any]] = []
    truncated = False
    for entry in _walk(top, args.recursive):
        if len(entries) == LIST_MAX_ENTRIES:
            truncated = True
            break
        kind = _kind(entry)
        row: dict[str, Any] = {"path": entry.relative_to(home).as_posix(), "type": kind}
        if kind == "file":
            row["bytes"] = entry.lstat().st_size
        entries.append(row)
    relative = top.relative_to(home).as_posix()
    return {"path": relative, "entries": entries, "truncated": truncated}


def _search_one(target: Path, pattern: re.Pattern[str], room: int) -> list[tuple[int, str]]:
    try:
        data = target.read_bytes()
    except OSError:
        return []
    if b"\x00" in data[:8192]:
        return []  # binary
    found: list[tuple[int, str]] = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if pattern.search(line):
            found.append((number, line[:SEARCH_LINE_CHARS]))
            if len(found) == room:
                break
    return found


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"pattern is not a valid regular expression: {exc}",
            details={"pattern": pattern},
        ) from None


def search_files(agent_home: Path, agent_id: str, args: SearchFilesInput) -> dict[str, Any]:
    """SearchFiles: `{matches: [{path, line, text}], truncated, skipped_large}`; regular files
    only (symlinks are not followed), binaries skipped, each line cut to 400 characters."""
    pattern = _compile(args.pattern)
    home = home_dir(agent_home, agent_id)
    matches: list[dict[str, Any]] = []
    skipped: list[str] = []
    truncated = False
    for entry in _walk(_directory(agent_home, agent_id, args.path), recursive=True):
        if entry.is_symlink() or not entry.is_file():
            continue
        relative = entry.relative_to(home).as_posix()
        if entry.stat().st_size > SEARCH_MAX_FILE_BYTES:
            skipped.append(relative)
            continue
        room = args.max_results - len(matches)
        for number, text in _search_one(entry, pattern, room + 1):
            if len(matches) == args.max_results:
                truncated = True
                break
            matches.append({"path": relative, "line": number, "text": text})
        if truncated:
            break
    return {"matches": matches, "truncated": truncated, "skipped_large": skipped}


def _patched(agent_home: Path, agent_id: str, old: str | None, new: str | None, hunks: Any) -> str:
    shown = old or new or ""
    target = resolve_in_home(agent_home, agent_id, shown)
    if old is None:
        if target.exists():
            raise patch_error(f"{shown!r} already exists; the patch creates it", path=shown)
        return apply_hunks("", hunks)
    if target.is_file() and target.stat().st_size > PATCH_MAX_FILE_BYTES:
        raise patch_error(f"{shown!r} is too large to patch; use WriteFile", path=shown)
    try:
        text = read_bytes(target, shown).decode("utf-8")
    except UnicodeDecodeError:
        raise patch_error(f"{shown!r} is not UTF-8 text", path=shown) from None
    try:
        return apply_hunks(text, hunks)
    except DomainError as error:
        raise patch_error(f"{shown}: {error.message}", path=shown) from None


def apply_patch(agent_home: Path, agent_id: str, args: ApplyPatchInput) -> dict[str, Any]:
    """ApplyPatch: every file's new text is computed first; only then is anything written."""
    home = home_dir(agent_home, agent_id)
    planned: list[tuple[Path, str | None]] = []
    for file in parse_patch(args.patch):
        text = _patched(agent_home, agent_id, file.old_path, file.new_path, file.hunks)
        if file.new_path is not None and file.old_path not in (None, file.new_path):
            raise patch_error("renames are not supported; patch the file in place", path=file.path)
        target = resolve_in_home(agent_home, agent_id, file.path)
        planned.append((target, None if file.new_path is None else text))
    changed = []
    for target, content in planned:
        if content is None:
            target.unlink()
        else:
            write_atomically(target, content.encode("utf-8"), target.name)
        changed.append({"path": str(target), "relative_path": target.relative_to(home).as_posix()})
    return {"files": changed}


def parse_file_tool_input(name: FileToolName, raw: object) -> FileToolInput:
    """Validate raw arguments; raises DomainError(invalid_tool_input) naming the bad fields."""
    try:
        return FILE_TOOL_INPUTS[name].model_validate(raw)
    except ValidationError as exc:
        problems = [
            {"field": ".".join(str(p) for p in err["loc"]) or "(input)", "problem": err["msg"]}
            for err in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        fields = ", ".join(p["field"] for p in problems)
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"{name}: invalid input ({fields})",
            details={"errors": problems},
        ) from None


_RUN: dict[type[FileToolInput], Any] = {
    ReadFileInput: read_file,
    WriteFileInput: write_file,
    EditFileInput: edit_file,
    ListFilesInput: list_files,
    SearchFilesInput: search_files,
    ApplyPatchInput: apply_patch,
}


def run_file_tool(agent_home: Path, agent_id: str, name: FileToolName, raw: object) -> ToolEnvelope:
    """Run one file tool call and answer with the tool envelope (errors included)."""
    try:
        args = parse_file_tool_input(name, raw)
        result: dict[str, Any] = _RUN[type(args)](agent_home, agent_id, args)
    except DomainError as error:
        return ToolEnvelope.failure(name.value, error)
    return ToolEnvelope.success(name.value, result)


def changed_paths(name: FileToolName, envelope: ToolEnvelope) -> list[Path]:
    """The files a successful mutating call wrote, so plan files among them can be refreshed."""
    result = envelope.result or {}
    if name not in MUTATING or envelope.status != "success":
        return []
    rows = result.get("files", [result])
    return [Path(row["path"]) for row in rows if isinstance(row.get("path"), str)]
