"""ListFiles, SearchFiles and ApplyPatch stay inside the agent's home, cap what they answer,
and ApplyPatch applies every hunk or none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.file_search import SEARCH_MAX_FILE_BYTES
from shared.file_tools import (
    LIST_MAX_ENTRIES,
    FileToolName,
    changed_paths,
    run_file_tool,
)
from tests.builders import AGENT_ID


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "homes"
    (root / AGENT_ID).mkdir(parents=True)
    return root


@pytest.fixture
def mine(home: Path) -> Path:
    return home / AGENT_ID


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("password=hunter2\n")
    return secret


def ok(home: Path, name: FileToolName, **args: Any) -> dict[str, Any]:
    answer = run_file_tool(home, AGENT_ID, name, args).model_dump(mode="json")
    assert answer["status"] == "success", answer
    return dict(answer["result"])


def refused(home: Path, name: FileToolName, **args: Any) -> dict[str, Any]:
    answer = run_file_tool(home, AGENT_ID, name, args).model_dump(mode="json")
    assert answer["status"] == "error", answer
    return dict(answer["error"])


def test_list_files_lists_one_level_or_all(home: Path, mine: Path) -> None:
    (mine / "src" / "deep").mkdir(parents=True)
    (mine / "src" / "deep" / "x.py").write_text("x = 1\n")
    (mine / "a.txt").write_text("abc")
    flat = ok(home, FileToolName.LIST_FILES)
    assert flat["entries"] == [
        {"path": "a.txt", "type": "file", "bytes": 3},
        {"path": "src", "type": "dir"},
    ]
    deep = ok(home, FileToolName.LIST_FILES, path="src", recursive=True)
    assert [e["path"] for e in deep["entries"]] == ["src/deep", "src/deep/x.py"]
    assert deep["path"] == "src"
    assert deep["truncated"] is False


def test_list_files_refuses_paths_and_links_out_of_the_home(
    home: Path, mine: Path, outside: Path
) -> None:
    assert refused(home, FileToolName.LIST_FILES, path=str(outside))["kind"] == "access_denied"
    assert refused(home, FileToolName.LIST_FILES, path="../..")["kind"] == "access_denied"
    (mine / "out").symlink_to(outside)
    assert refused(home, FileToolName.LIST_FILES, path="out")["kind"] == "access_denied"
    # Listed as a link, never walked into.
    listed = ok(home, FileToolName.LIST_FILES, recursive=True)["entries"]
    assert listed == [{"path": "out", "type": "symlink"}]


def test_list_files_caps_a_huge_directory(home: Path, mine: Path) -> None:
    for n in range(LIST_MAX_ENTRIES + 5):
        (mine / f"f{n:05d}").touch()
    listed = ok(home, FileToolName.LIST_FILES)
    assert len(listed["entries"]) == LIST_MAX_ENTRIES
    assert listed["truncated"] is True


def test_search_files_finds_lines_by_regex(home: Path, mine: Path) -> None:
    (mine / "src").mkdir()
    (mine / "src" / "a.py").write_text("def alpha():\n    return 1\ndef beta(): pass\n")
    (mine / "notes.md").write_text("nothing here\n")
    (mine / "blob.bin").write_bytes(b"def \x00 binary")
    found = ok(home, FileToolName.SEARCH_FILES, pattern=r"^def \w+\(")
    assert found["matches"] == [
        {"path": "src/a.py", "line": 1, "text": "def alpha():"},
        {"path": "src/a.py", "line": 3, "text": "def beta(): pass"},
    ]
    capped = ok(home, FileToolName.SEARCH_FILES, pattern="def", max_results=1)
    assert len(capped["matches"]) == 1
    assert capped["truncated"] is True


def test_search_files_rejects_a_bad_regex_and_stays_home(
    home: Path, mine: Path, outside: Path
) -> None:
    assert refused(home, FileToolName.SEARCH_FILES, pattern="(")["kind"] == "invalid_tool_input"
    error = refused(home, FileToolName.SEARCH_FILES, pattern="password", path=str(outside))
    assert error["kind"] == "access_denied"
    (mine / "linked.txt").symlink_to(outside / "secret.txt")
    (mine / "linkdir").symlink_to(outside)
    assert ok(home, FileToolName.SEARCH_FILES, pattern="password")["matches"] == []


def test_search_files_skips_huge_files(home: Path, mine: Path) -> None:
    (mine / "big.log").write_bytes(b"needle\n" + b"x" * SEARCH_MAX_FILE_BYTES)
    (mine / "small.txt").write_text("a needle\n")
    found = ok(home, FileToolName.SEARCH_FILES, pattern="needle")
    assert [m["path"] for m in found["matches"]] == ["small.txt"]
    assert found["skipped_large"] == ["big.log"]


PATCH = """\
--- a/src/a.py
+++ b/src/a.py
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
@@ -5,2 +5,3 @@
 five
 six
+seven
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,2 @@
+hello
+world
"""


def test_apply_patch_edits_and_creates_files(home: Path, mine: Path) -> None:
    (mine / "src").mkdir()
    (mine / "src" / "a.py").write_text("one\ntwo\nthree\nfour\nfive\nsix\n")
    result = ok(home, FileToolName.APPLY_PATCH, patch=PATCH)
    assert [f["relative_path"] for f in result["files"]] == ["src/a.py", "new.txt"]
    assert (mine / "src" / "a.py").read_text() == "one\nTWO\nthree\nfour\nfive\nsix\nseven\n"
    assert (mine / "new.txt").read_text() == "hello\nworld\n"


def test_apply_patch_is_all_or_nothing(home: Path, mine: Path) -> None:
    (mine / "src").mkdir()
    before = "one\ntwo\nthree\nfour\nFIVE\nsix\n"  # the second hunk's context no longer matches
    (mine / "src" / "a.py").write_text(before)
    error = refused(home, FileToolName.APPLY_PATCH, patch=PATCH)
    assert error["kind"] == "invalid_tool_input"
    assert "does not match" in error["message"]
    assert (mine / "src" / "a.py").read_text() == before
    assert not (mine / "new.txt").exists()


def test_apply_patch_deletes_a_file_and_keeps_a_missing_newline(home: Path, mine: Path) -> None:
    (mine / "gone.txt").write_text("bye\n")
    (mine / "tail.txt").write_text("a\nb")
    patch = (
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "--- a/tail.txt\n+++ b/tail.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n"
        "+c\n\\ No newline at end of file\n"
    )
    ok(home, FileToolName.APPLY_PATCH, patch=patch)
    assert not (mine / "gone.txt").exists()
    assert (mine / "tail.txt").read_text() == "a\nc"


def test_apply_patch_refuses_escapes_and_garbage(home: Path, mine: Path, outside: Path) -> None:
    escape = "--- a/../../outside/secret.txt\n+++ b/../../outside/secret.txt\n@@ -1 +1 @@\n-x\n+y\n"
    assert refused(home, FileToolName.APPLY_PATCH, patch=escape)["kind"] == "access_denied"
    (mine / "link.txt").symlink_to(outside / "secret.txt")
    through = "--- a/link.txt\n+++ b/link.txt\n@@ -1 +1 @@\n-password=hunter2\n+owned\n"
    assert refused(home, FileToolName.APPLY_PATCH, patch=through)["kind"] == "access_denied"
    assert (outside / "secret.txt").read_text() == "password=hunter2\n"
    garbage = refused(home, FileToolName.APPLY_PATCH, patch="just some text")
    assert garbage["kind"] == "invalid_tool_input"


def test_apply_patch_refuses_a_huge_file(home: Path, mine: Path) -> None:
    (mine / "huge.txt").write_bytes(b"x\n" * 3_000_000)
    patch = "--- a/huge.txt\n+++ b/huge.txt\n@@ -1 +1 @@\n-x\n+y\n"
    assert "too large" in refused(home, FileToolName.APPLY_PATCH, patch=patch)["message"]


def test_changed_paths_name_every_file_a_patch_wrote(home: Path, mine: Path) -> None:
    envelope = run_file_tool(
        home,
        AGENT_ID,
        FileToolName.APPLY_PATCH,
        {"patch": PATCH.split("--- /dev/null", maxsplit=1)[0]},
    )
    assert envelope.status == "error"  # src/a.py does not exist yet
    assert changed_paths(FileToolName.APPLY_PATCH, envelope) == []
    (mine / "n.txt").write_text("1\n")
    envelope = run_file_tool(
        home,
        AGENT_ID,
        FileToolName.APPLY_PATCH,
        {"patch": "--- a/n.txt\n+++ b/n.txt\n@@ -1 +1 @@\n-1\n+2\n"},
    )
    assert changed_paths(FileToolName.APPLY_PATCH, envelope) == [(mine / "n.txt").resolve()]
    read = run_file_tool(home, AGENT_ID, FileToolName.READ_FILE, {"path": "n.txt"})
    assert changed_paths(FileToolName.READ_FILE, read) == []
