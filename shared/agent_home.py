"""The agent home on disk: path confinement, the basic file tools (ReadFile, WriteFile, EditFile)
and plan files. Shared by the executor (file tools, plan refresh) and every tool-call sender
(plan creation)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
)

from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import PLAN_PREVIEW_CHARS, WORK_ITEM_ID_PATTERN, PlanArtifact

READ_LIMIT_DEFAULT = 2000
READ_LIMIT_MAX = 10_000
READ_MAX_CHARS = 200_000
"""A read answers at most this many characters, so one huge line cannot flood the context."""
READ_MAX_FILE_BYTES = 20_000_000
"""ReadFile refuses larger files: a read holds the whole file in memory."""
EDIT_MAX_FILE_BYTES = 5_000_000
"""EditFile refuses larger files: each edit reads and rewrites the whole file."""

PLAN_FILE_NAME = "plan.md"
_PLAN_RELATIVE = re.compile(r"^work-items/(wi_[0-9A-HJKMNP-TV-Z]{26})/plan\.md$")


def _no_nul(path: str) -> str:
    if "\x00" in path:
        raise ValueError("a path cannot contain NUL characters")
    return path


# Only `path` is trimmed: file content and edit anchors are matched byte for byte.
FilePath = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1), AfterValidator(_no_nul)
]


class FileToolInput(BaseModel):
    """Base of the file tools' inputs: rejects unknown fields, immutable, content kept verbatim."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ReadFileInput(FileToolInput):
    """Read a text file in your home directory; `offset` skips lines, `limit` caps them."""

    path: FilePath
    offset: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int, Field(ge=1, le=READ_LIMIT_MAX)] = READ_LIMIT_DEFAULT


class WriteFileInput(FileToolInput):
    """Create or replace a file in your home directory with `content` (parents are created)."""

    path: FilePath
    content: str


class EditFileInput(FileToolInput):
    """Replace the single occurrence of `old_text` with `new_text` in a file in your home."""

    path: FilePath
    old_text: Annotated[str, Field(min_length=1)]
    new_text: str


@functools.lru_cache(maxsize=8192)
def home_dir(agent_home: Path, agent_id: str) -> Path:
    """The agent's home, fully resolved (symlinks included) so containment checks compare
    like with like.

    Cached: realpath costs an lstat per path component, several times per file tool call. No
    agent can move or re-link its own home (the file tools act only inside it), so a stale
    entry could only follow an operator re-linking a home while the process runs, and then
    paths resolved through the new link fall outside the cached home: refused, never let out.
    """
    return Path(os.path.realpath(agent_home / agent_id))


def share_home(agent_home: Path, parent: str, child: str) -> None:
    """Make the child's home the parent's (`workspace_mode: shared`): a relative symlink, so
    the child's paths resolve inside the parent's home and containment checks (which resolve
    links) keep the child there. An existing link to the parent is kept; any other existing
    home is refused."""
    (agent_home / parent).mkdir(parents=True, exist_ok=True)
    link = agent_home / child
    if link.is_symlink() and os.readlink(link) == parent:
        return
    try:
        link.symlink_to(parent, target_is_directory=True)
    except FileExistsError:
        raise DomainError(
            ErrorKind.ACCESS_DENIED,
            f"a home for {child!r} exists; a shared workspace needs a new agent id",
            details={"agent_id": child},
        ) from None


def resolve_in_home(agent_home: Path, agent_id: str, path: str) -> Path:
    """Resolve `path` (relative to the home, or absolute) and refuse anything outside the home.

    Containment is checked after resolving symlinks, so a link that points out is refused.
    """
    home = home_dir(agent_home, agent_id)
    given = Path(path)
    candidate = given if given.is_absolute() else agent_home / agent_id / given
    resolved = Path(os.path.realpath(candidate))
    if resolved != home and not resolved.is_relative_to(home):
        raise DomainError(
            ErrorKind.ACCESS_DENIED,
            f"{path!r} is outside the agent's home",
            details={"path": path, "home": str(home)},
        )
    return resolved


def invalid_path(message: str, path: str) -> DomainError:
    return DomainError(ErrorKind.INVALID_TOOL_INPUT, message, details={"path": path})


def read_bytes(target: Path, shown: str, max_bytes: int | None = None) -> bytes:
    """The file's bytes; invalid_tool_input when it is missing, a directory, unreadable or
    larger than `max_bytes` (checked before reading)."""
    try:
        size = target.stat().st_size if max_bytes is not None else 0
        if max_bytes is not None and size > max_bytes:
            raise DomainError(
                ErrorKind.INVALID_TOOL_INPUT,
                f"{shown!r} is {size} bytes, more than this tool reads ({max_bytes})",
                details={"path": shown, "bytes": size, "max_bytes": max_bytes},
                recovery_hint="The file is too large for the file tools; work with smaller files.",
            )
        return target.read_bytes()
    except FileNotFoundError:
        raise invalid_path(f"{shown!r} does not exist", shown) from None
    except IsADirectoryError:
        raise invalid_path(f"{shown!r} is a directory, not a file", shown) from None
    except OSError as exc:
        raise invalid_path(f"{shown!r} cannot be read: {exc.strerror or exc}", shown) from None


def write_atomically(target: Path, data: bytes, shown: str) -> None:
    """Write to a temporary file beside the target, then rename: readers never see half."""
    if target.is_dir():
        raise invalid_path(f"{shown!r} is a directory, not a file", shown)
    try:
        if not target.parent.is_dir():  # one stat, not mkdir's FileExistsError, in the usual case
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise invalid_path(f"{shown!r} cannot be written: {exc.strerror or exc}", shown) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def located(agent_home: Path, agent_id: str, target: Path) -> dict[str, Any]:
    home = home_dir(agent_home, agent_id)
    return {"path": str(target), "relative_path": target.relative_to(home).as_posix()}


def read_file(agent_home: Path, agent_id: str, args: ReadFileInput) -> dict[str, Any]:
    """ReadFile: the requested line window of a file, decoded as UTF-8 (bad bytes replaced)."""
    target = resolve_in_home(agent_home, agent_id, args.path)
    data = read_bytes(target, args.path, READ_MAX_FILE_BYTES)
    lines = data.decode("utf-8", errors="replace").splitlines(True)
    window = lines[args.offset : args.offset + args.limit]
    content = "".join(window)
    truncated = args.offset + len(window) < len(lines) or len(content) > READ_MAX_CHARS
    return {
        **located(agent_home, agent_id, target),
        "content": content[:READ_MAX_CHARS],
        "offset": args.offset,
        "returned_lines": len(window),
        "total_lines": len(lines),
        "truncated": truncated,
    }


def write_file(agent_home: Path, agent_id: str, args: WriteFileInput) -> dict[str, Any]:
    """WriteFile: create or replace the file atomically."""
    target = resolve_in_home(agent_home, agent_id, args.path)
    created = not target.exists()
    data = args.content.encode("utf-8")
    write_atomically(target, data, args.path)
    return {**located(agent_home, agent_id, target), "bytes": len(data), "created": created}


def edit_file(agent_home: Path, agent_id: str, args: EditFileInput) -> dict[str, Any]:
    """EditFile: replace exactly one occurrence of `old_text`; none or several is an error."""
    target = resolve_in_home(agent_home, agent_id, args.path)
    try:
        text = read_bytes(target, args.path, EDIT_MAX_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_path(
            f"{args.path!r} is not UTF-8 text; EditFile edits text", args.path
        ) from None
    found = text.count(args.old_text)
    if found != 1:
        problem = "was not found" if found == 0 else f"occurs {found} times; add context"
        raise DomainError(
            ErrorKind.INVALID_TOOL_INPUT,
            f"old_text {problem} in {args.path!r}",
            details={"path": args.path, "occurrences": found},
            recovery_hint="ReadFile the file and copy old_text exactly, with enough context "
            "to match once.",
        )
    data = text.replace(args.old_text, args.new_text, 1).encode("utf-8")
    write_atomically(target, data, args.path)
    return {**located(agent_home, agent_id, target), "bytes": len(data)}


def plan_relative_path(work_item_id: str) -> str:
    if re.fullmatch(WORK_ITEM_ID_PATTERN, work_item_id) is None:
        raise ValueError(f"not a WorkItem id: {work_item_id!r}")
    return f"work-items/{work_item_id}/{PLAN_FILE_NAME}"


def plan_work_item_id(agent_home: Path, agent_id: str, resolved: Path) -> str | None:
    """The WorkItem whose plan file `resolved` is (a path from a file tool result), if any."""
    home = home_dir(agent_home, agent_id)
    if not resolved.is_relative_to(home):
        return None
    match = _PLAN_RELATIVE.fullmatch(resolved.relative_to(home).as_posix())
    return match.group(1) if match else None


def describe_plan(path: Path, relative_path: str, data: bytes, now: datetime) -> PlanArtifact:
    """The descriptor of plan bytes: hash and size of the bytes, preview of the decoded text."""
    text = data.decode("utf-8", errors="replace")
    return PlanArtifact(
        path=str(path),
        relative_path=relative_path,
        sha256=hashlib.sha256(data).hexdigest(),
        bytes=len(data),
        updated_at=now,
        preview=text[:PLAN_PREVIEW_CHARS],
        preview_complete=len(text) <= PLAN_PREVIEW_CHARS,
    )


def plan_descriptor(
    agent_home: Path, agent_id: str, work_item_id: str, now: datetime
) -> PlanArtifact:
    """Describe a WorkItem's plan file as it is now; raises FileNotFoundError if it is missing."""
    relative = plan_relative_path(work_item_id)
    target = resolve_in_home(agent_home, agent_id, relative)
    return describe_plan(target, relative, target.read_bytes(), now)


def ensure_plan_file(
    agent_home: Path, agent_id: str, work_item_id: str, plan: str | None, now: datetime
) -> PlanArtifact:
    """Create `work-items/<id>/plan.md` seeded with `plan` (empty if None) and describe it.

    An existing file is kept as it is, so a redelivered create never clobbers agent edits.
    """
    relative = plan_relative_path(work_item_id)
    target = resolve_in_home(agent_home, agent_id, relative)
    if not target.exists():
        write_atomically(target, (plan or "").encode("utf-8"), relative)
    return plan_descriptor(agent_home, agent_id, work_item_id, now)
