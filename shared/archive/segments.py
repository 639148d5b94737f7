"""History segment files: an agent's archived events as JSON Lines, each with its manifest
beside it (`<agent>/history/<first>-<last>.jsonl` and `.manifest.json`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from shared.archive.files import ArchiveUnavailable, sync_dir, write_atomic
from shared.domain.archive import (
    HISTORY_DIR,
    SegmentManifest,
    manifest_name,
    manifest_of,
    segment_bytes,
    segment_lines,
)


class SegmentFiles:
    """The segment files under one archive root (blocking file I/O: call from a thread)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, agent_id: str, segment: str) -> Path:
        return self.root / agent_id / segment

    def write(self, agent_id: str, docs: Sequence[bytes]) -> SegmentManifest:
        """Write the segment of `docs` (stored history events, consecutive), then its manifest,
        each durably; returns the manifest. Writing a segment again writes the same bytes."""
        manifest = manifest_of(agent_id, docs)
        path = self.path(agent_id, manifest.segment)
        write_atomic(path, segment_bytes(docs))
        write_atomic(
            self.path(agent_id, manifest_name(manifest.segment)),
            manifest.model_dump_json(indent=2).encode() + b"\n",
        )
        return manifest

    def read(self, agent_id: str, manifest: SegmentManifest) -> list[bytes]:
        """The stored events of a committed segment, as its file holds them."""
        return segment_lines(self.read_raw(agent_id, manifest))

    def read_raw(self, agent_id: str, manifest: SegmentManifest) -> bytes:
        """A committed segment's file, whole."""
        path = self.path(agent_id, manifest.segment)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ArchiveUnavailable(
                f"archived history of {agent_id!r} (events {manifest.first_seq}.."
                f"{manifest.last_seq}) cannot be read from {manifest.segment}: {exc.strerror}"
            ) from None

    def names(self, agent_id: str) -> list[str]:
        """The segment files there are, committed or not, in seq order."""
        directory = self.root / agent_id / HISTORY_DIR
        if not directory.is_dir():
            return []
        return sorted(f"{HISTORY_DIR}/{p.name}" for p in directory.glob("*.jsonl"))

    def remove(self, agent_id: str, segment: str) -> None:
        """Delete a segment no commit names (an orphan a crash or a lost race left)."""
        for name in (segment, manifest_name(segment)):
            with contextlib.suppress(FileNotFoundError):
                self.path(agent_id, name).unlink()
        sync_dir(self.root / agent_id / HISTORY_DIR)
