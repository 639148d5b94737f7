"""Archived WorkItem files: one per finished WorkItem (`<agent>/items/<id>.json`: the stored
item, when it finished, its briefs and delivery summaries) and one manifest per batch that left
Redis together (`<agent>/items/batches/<last finished ms>-<sha>.json`). Which batches are
committed is the ledger's to say (the agent's `item_batches` list in Redis); the files of a
batch never committed are a crash's leftovers, which reads never see: they read a WorkItem's
file only when Redis no longer holds it, and the manifests only of committed batches."""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import orjson

from shared.archive.files import ArchiveUnavailable, sync_dir
from shared.domain.archive import (
    BATCHES_DIR,
    ITEMS_DIR,
    ItemBatch,
    ItemBatchManifest,
    item_path,
)
from shared.domain.records import BriefRecord, DeliverySummaryRecord, WorkItem


@dataclass(frozen=True, slots=True)
class ArchivedItem:
    """A WorkItem read back from its file."""

    work_item: WorkItem
    finished_ms: int
    briefs: tuple[BriefRecord, ...]
    delivery_summaries: tuple[DeliverySummaryRecord, ...]


def parse_item_file(raw: bytes) -> ArchivedItem:
    doc = orjson.loads(raw)
    briefs = sorted(
        (BriefRecord.model_validate(b) for b in doc["briefs"]), key=lambda b: b.created_at
    )
    return ArchivedItem(
        work_item=WorkItem.model_validate(doc["work_item"]),
        finished_ms=int(doc["finished_ms"]),
        briefs=tuple(briefs),
        delivery_summaries=tuple(
            DeliverySummaryRecord.model_validate(s) for s in doc["delivery_summaries"]
        ),
    )


class ItemFiles:
    """The archived WorkItem files under one archive root (blocking file I/O: call from a
    thread)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, agent_id: str, name: str) -> Path:
        return self.root / agent_id / name

    def write(self, agent_id: str, batch: ItemBatch) -> None:
        """Every WorkItem's file, then the manifest, each whole and durable before the
        manifest's name appears: temp files fsynced, renamed into place, the directories
        fsynced (one fsync of each directory for the whole batch)."""
        files = [(item_path(i), data) for i, data in batch.files]
        _write_durably(self.root / agent_id, files)
        _write_durably(self.root / agent_id, [(batch.manifest.name, batch.manifest.data())])

    def read_item(self, agent_id: str, work_item_id: str) -> ArchivedItem | None:
        """The archived WorkItem, or None if the archive holds no such file."""
        if "/" in work_item_id or work_item_id.startswith("."):
            return None
        try:
            raw = self.path(agent_id, item_path(work_item_id)).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ArchiveUnavailable(
                f"archived WorkItem {work_item_id!r} of {agent_id!r} cannot be read: {exc.strerror}"
            ) from None
        return parse_item_file(raw)

    def read_manifest(self, agent_id: str, batch: str) -> ItemBatchManifest:
        try:
            raw = self.path(agent_id, batch).read_bytes()
        except OSError as exc:
            raise ArchiveUnavailable(
                f"archived WorkItems of {agent_id!r} cannot be listed: {batch} cannot be read "
                f"({exc.strerror})"
            ) from None
        return ItemBatchManifest.model_validate_json(raw)

    def batch_names(self, agent_id: str) -> list[tuple[str, float]]:
        """Every batch manifest there is, committed or not, with when it was last written."""
        directory = self.root / agent_id / BATCHES_DIR
        if not directory.is_dir():
            return []
        found = []
        for path in directory.glob("*.json"):
            with contextlib.suppress(FileNotFoundError):
                found.append((f"{BATCHES_DIR}/{path.name}", path.stat().st_mtime))
        return sorted(found)

    def item_mtime(self, agent_id: str, work_item_id: str) -> float | None:
        try:
            return self.path(agent_id, item_path(work_item_id)).stat().st_mtime
        except FileNotFoundError:
            return None

    def remove(self, agent_id: str, names: list[str]) -> None:
        """Delete files no commit names (a crash's or a lost race's leftovers)."""
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                self.path(agent_id, name).unlink()
        for directory in (ITEMS_DIR, BATCHES_DIR):
            if (self.root / agent_id / directory).is_dir():
                sync_dir(self.root / agent_id / directory)


def _write_durably(base: Path, files: list[tuple[str, bytes]]) -> None:
    """Write each (relative name, bytes) under `base` so that a crash at any point leaves each
    name with its old file, no file, or the whole new one."""
    temps: list[tuple[Path, Path]] = []
    try:
        for name, data in files:
            path = base / name
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
            temps.append((temp, path))
            with temp.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        for temp, path in temps:
            temp.replace(path)
    except BaseException:
        for temp, _ in temps:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        raise
    for directory in sorted({path.parent for _, path in temps}):
        sync_dir(directory)
