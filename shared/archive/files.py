"""Durable file writes for the archive: a file appears whole or not at all, and once its name
is there it survives a crash (temp file, fsync, rename, fsync of the directory)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader, or a restart after a crash at any point, sees
    the old file, no file, or the whole new one, never a part. Creates the directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with temp.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        temp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    """fsync a directory, so the names created or removed in it are durable too."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temps(directory: Path, *, before: float) -> int:
    """Temp files a crash left behind (never renamed into place; no reader looks at them),
    last written before `before` (seconds since the epoch): not another writer's file in flight."""
    removed = 0
    if not directory.is_dir():
        return 0
    for temp in directory.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if temp.stat().st_mtime < before:
                temp.unlink()
                removed += 1
    return removed


class ArchiveUnavailable(Exception):
    """A file the archive should hold cannot be read (missing volume, deleted file): the read
    fails and says which, rather than answering without the archived part."""
