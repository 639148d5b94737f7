"""The six file tools an agent has in its home: names, input schemas, ListFiles, ApplyPatch
(SearchFiles lives in `shared/file_search.py`), and one entry point that runs any of them and
answers with the tool envelope."""

from __future__ import annotations

import time
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
from shared.file_search import (
    SEARCH_TIMEOUT_MS,
    Scan,
    SearchFilesInput,
    directory,
    search_files,
    walk,
)

LIST_MAX_ENTRIES = 1000
PATCH_MAX_FILE_BYTES = 5_000_000


class ListFilesInput(FileToolInput):
    """List the entries of a directory in your home (`recursive` walks below it)."""

    path: FilePath = "."
    recursive: bool = False


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


def _kind(entry: Path) -> str:
    if entry.is_symlink():
        return "symlink"
    return "dir" if entry.is_dir() else "file"


def list_files(agent_home: Path, agent_id: str, args: ListFilesInput) -> dict[str, Any]:
    """ListFiles: `{path, entries: [{path, type, bytes?}], truncated}`, paths home-relative."""
    home = home_dir(agent_home, agent_id)
    top = directory(agent_home, agent_id, args.path)
    entries: list[dict[str, Any]] = []
    scan, truncated = Scan(), False
    for entry in walk(top, args.recursive, scan):
        if len(entries) == LIST_MAX_ENTRIES:
            truncated = True
            break
        kind = _kind(entry)
        row: dict[str, Any] = {"path": entry.relative_to(home).as_posix(), "type": kind}
        if kind == "file":
            row["bytes"] = entry.lstat().st_size
        entries.append(row)
    relative = top.relative_to(home).as_posix()
    return {"path": relative, "entries": entries, "truncated": truncated or scan.cut}


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
    ApplyPatchInput: apply_patch,
}


def run_file_tool(
    agent_home: Path,
    agent_id: str,
    name: FileToolName,
    raw: object,
    *,
    search_timeout_ms: int = SEARCH_TIMEOUT_MS,
    deadline: float | None = None,
) -> ToolEnvelope:
    """Run one file tool call and answer with the tool envelope (errors included). Blocking:
    callers on an event loop go through `shared/file_runner.py`. SearchFiles stops at
    `deadline` (time.monotonic; default: `search_timeout_ms` from now)."""
    try:
        args = parse_file_tool_input(name, raw)
        if isinstance(args, SearchFilesInput):
            start = time.monotonic()
            until = start + search_timeout_ms / 1000 if deadline is None else deadline
            result = search_files(
                agent_home, agent_id, args, deadline=until, limit_ms=search_timeout_ms
            )
        else:
            result = _RUN[type(args)](agent_home, agent_id, args)
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
