"""docs/architecture.md's "Where does X live" table against the tree: every product module is
named there (by its path, or the tail of it its row uses: `rules/acceptance.py`, `webhooks.py`),
and every file or folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"`([A-Za-z0-9_./-]+\.(?:py|lua|css|js)|[A-Za-z0-9_/]+/)`")


def where_table() -> str:
    page = (ROOT / "docs" / "architecture.md").read_text()
    start = page.index("## Where does X live")
    return page[start : page.index("\n## ", start + 1)]


def product_modules() -> list[Path]:
    return [
        path.relative_to(ROOT)
        for folder in ("services", "shared", "longrun")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
    ]


def test_every_product_module_is_named_in_the_table() -> None:
    table = where_table()
    unnamed = [
        str(path)
        for path in product_modules()
        if not any(f"`{Path(*path.parts[i:])}`" in table for i in range(len(path.parts)))
    ]
    assert unnamed == []


def test_every_file_or_folder_the_table_names_exists() -> None:
    tracked = {
        path.relative_to(ROOT)
        for folder in ("services", "shared", "longrun", "examples", "tests")
        for path in (ROOT / folder).rglob("*")
        if "__pycache__" not in path.parts
    }
    missing = []
    for name in sorted(set(NAMED.findall(where_table()))):
        wanted = Path(name.rstrip("/"))
        if not any(path.parts[-len(wanted.parts) :] == wanted.parts for path in tracked):
            missing.append(name)
    assert missing == []
