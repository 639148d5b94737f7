"""The agent's file tools stay inside its home; plan files are described by hash and preview."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from shared.agent_home import (
    EditFileInput,
    ReadFileInput,
    WriteFileInput,
    edit_file,
    ensure_plan_file,
    home_dir,
    plan_descriptor,
    plan_relative_path,
    plan_work_item_id,
    read_file,
    resolve_in_home,
    write_file,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import PLAN_PREVIEW_CHARS
from shared.file_tools import FileToolName, parse_file_tool_input, run_file_tool
from tests.builders import AGENT_ID, T0, at, work_item_id


@pytest.fixture
def agent_home(tmp_path: Path) -> Path:
    root = tmp_path / "homes"
    (root / AGENT_ID).mkdir(parents=True)
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("top secret\n")
    return secret


def run(agent_home: Path, name: FileToolName, **args: Any) -> dict[str, Any]:
    envelope = run_file_tool(agent_home, AGENT_ID, name, args)
    return envelope.model_dump(mode="json")


def error_kind(agent_home: Path, name: FileToolName, **args: Any) -> str:
    answer = run(agent_home, name, **args)
    assert answer["status"] == "error"
    return str(answer["error"]["kind"])


def test_write_then_read_inside_the_home(agent_home: Path) -> None:
    written = write_file(agent_home, AGENT_ID, WriteFileInput(path="notes/a.txt", content="x\ny\n"))
    assert written["created"] is True
    assert written["relative_path"] == "notes/a.txt"
    assert written["bytes"] == 4
    read = read_file(agent_home, AGENT_ID, ReadFileInput(path="notes/a.txt"))
    assert read["content"] == "x\ny\n"
    assert read["total_lines"] == 2
    assert read["truncated"] is False


def test_absolute_path_inside_the_home_is_allowed(agent_home: Path) -> None:
    target = agent_home / AGENT_ID / "abs.txt"
    answer = run(agent_home, FileToolName.WRITE_FILE, path=str(target), content="hi")
    assert answer["status"] == "success"
    assert target.read_text() == "hi"


def test_read_window_by_offset_and_limit(agent_home: Path) -> None:
    (agent_home / AGENT_ID / "lines.txt").write_text("".join(f"{i}\n" for i in range(10)))
    read = read_file(agent_home, AGENT_ID, ReadFileInput(path="lines.txt", offset=3, limit=2))
    assert read["content"] == "3\n4\n"
    assert read["returned_lines"] == 2
    assert read["total_lines"] == 10
    assert read["truncated"] is True


def test_edit_replaces_the_single_occurrence(agent_home: Path) -> None:
    (agent_home / AGENT_ID / "plan.md").write_text("Step one.\nStep two.\n")
    edit_file(agent_home, AGENT_ID, EditFileInput(path="plan.md", old_text="two", new_text="2"))
    assert (agent_home / AGENT_ID / "plan.md").read_text() == "Step one.\nStep 2.\n"


def test_edit_with_old_text_not_found_is_invalid_tool_input(agent_home: Path) -> None:
    (agent_home / AGENT_ID / "plan.md").write_text("Step one.\n")
    kind = error_kind(
        agent_home, FileToolName.EDIT_FILE, path="plan.md", old_text="three", new_text="3"
    )
    assert kind == ErrorKind.INVALID_TOOL_INPUT
    assert (agent_home / AGENT_ID / "plan.md").read_text() == "Step one.\n"


def test_edit_with_ambiguous_old_text_is_invalid_tool_input(agent_home: Path) -> None:
    (agent_home / AGENT_ID / "plan.md").write_text("Step.\nStep.\n")
    kind = error_kind(
        agent_home, FileToolName.EDIT_FILE, path="plan.md", old_text="Step", new_text="S"
    )
    assert kind == ErrorKind.INVALID_TOOL_INPUT


def test_edit_keeps_content_whitespace_verbatim(agent_home: Path) -> None:
    (agent_home / AGENT_ID / "code.py").write_text("def f():\n    return 1\n")
    answer = run(
        agent_home,
        FileToolName.EDIT_FILE,
        path="code.py",
        old_text="    return 1\n",
        new_text="    return 2\n",
    )
    assert answer["status"] == "success"
    assert (agent_home / AGENT_ID / "code.py").read_text() == "def f():\n    return 2\n"


def test_reading_a_missing_file_is_invalid_tool_input(agent_home: Path) -> None:
    assert error_kind(agent_home, FileToolName.READ_FILE, path="nope.txt") == "invalid_tool_input"


def test_writing_under_a_file_is_invalid_tool_input(agent_home: Path) -> None:
    (agent_home / AGENT_ID / "a.txt").write_text("file")
    kind = error_kind(agent_home, FileToolName.WRITE_FILE, path="a.txt/b.txt", content="x")
    assert kind == ErrorKind.INVALID_TOOL_INPUT
    kind = error_kind(agent_home, FileToolName.WRITE_FILE, path=".", content="x")
    assert kind == ErrorKind.INVALID_TOOL_INPUT


def test_unknown_fields_are_rejected(agent_home: Path) -> None:
    with pytest.raises(DomainError) as caught:
        parse_file_tool_input(FileToolName.READ_FILE, {"path": "a", "encoding": "latin-1"})
    assert caught.value.kind is ErrorKind.INVALID_TOOL_INPUT
    assert caught.value.details == {
        "errors": [{"field": "encoding", "problem": "Extra inputs are not permitted"}]
    }


@pytest.mark.parametrize(
    "path", ["../escape.txt", "notes/../../escape.txt", f"../{AGENT_ID}-2/x.txt", ".."]
)
def test_dotdot_escapes_are_access_denied(agent_home: Path, path: str) -> None:
    assert error_kind(agent_home, FileToolName.WRITE_FILE, path=path, content="x") == (
        "access_denied"
    )
    assert not (agent_home / "escape.txt").exists()


def test_absolute_path_outside_the_home_is_access_denied(agent_home: Path, outside: Path) -> None:
    secret = str(outside / "secret.txt")
    assert error_kind(agent_home, FileToolName.READ_FILE, path=secret) == "access_denied"
    kind = error_kind(agent_home, FileToolName.WRITE_FILE, path=secret, content="pwned")
    assert kind == "access_denied"
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_file_symlink_escaping_the_home_is_access_denied(agent_home: Path, outside: Path) -> None:
    (agent_home / AGENT_ID / "link.txt").symlink_to(outside / "secret.txt")
    assert error_kind(agent_home, FileToolName.READ_FILE, path="link.txt") == "access_denied"
    kind = error_kind(agent_home, FileToolName.WRITE_FILE, path="link.txt", content="pwned")
    assert kind == "access_denied"
    kind = error_kind(
        agent_home, FileToolName.EDIT_FILE, path="link.txt", old_text="top", new_text="x"
    )
    assert kind == "access_denied"
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_directory_symlink_escaping_the_home_is_access_denied(
    agent_home: Path, outside: Path
) -> None:
    (agent_home / AGENT_ID / "linkdir").symlink_to(outside, target_is_directory=True)
    kind = error_kind(agent_home, FileToolName.READ_FILE, path="linkdir/secret.txt")
    assert kind == "access_denied"
    kind = error_kind(agent_home, FileToolName.WRITE_FILE, path="linkdir/new.txt", content="x")
    assert kind == "access_denied"
    assert not (outside / "new.txt").exists()


def test_symlink_inside_the_home_is_followed(agent_home: Path) -> None:
    home = agent_home / AGENT_ID
    (home / "real.txt").write_text("inside\n")
    (home / "alias.txt").symlink_to(home / "real.txt")
    read = read_file(agent_home, AGENT_ID, ReadFileInput(path="alias.txt"))
    assert read["content"] == "inside\n"
    assert read["relative_path"] == "real.txt"


def test_home_reached_through_a_symlink_still_confines(tmp_path: Path, outside: Path) -> None:
    real_root = tmp_path / "real-root"
    (real_root / AGENT_ID).mkdir(parents=True)
    linked_root = tmp_path / "linked-root"
    linked_root.symlink_to(real_root, target_is_directory=True)
    assert (
        resolve_in_home(linked_root, AGENT_ID, "a.txt") == home_dir(real_root, AGENT_ID) / "a.txt"
    )
    with pytest.raises(DomainError) as caught:
        resolve_in_home(linked_root, AGENT_ID, str(outside / "secret.txt"))
    assert caught.value.kind is ErrorKind.ACCESS_DENIED


def test_writes_leave_no_temporary_files(agent_home: Path) -> None:
    write_file(agent_home, AGENT_ID, WriteFileInput(path="a.txt", content="one"))
    write_file(agent_home, AGENT_ID, WriteFileInput(path="a.txt", content="two"))
    assert sorted(p.name for p in (agent_home / AGENT_ID).iterdir()) == ["a.txt"]
    assert (agent_home / AGENT_ID / "a.txt").read_text() == "two"


def test_plan_descriptor_hashes_bytes_and_cuts_the_preview(agent_home: Path) -> None:
    item_id = work_item_id(7)
    body = "é" + "plan line\n" * 200  # 2001 characters, 2002 bytes
    ensure_plan_file(agent_home, AGENT_ID, item_id, body, T0)
    plan = plan_descriptor(agent_home, AGENT_ID, item_id, at(minutes=1))
    data = body.encode("utf-8")
    assert plan.sha256 == hashlib.sha256(data).hexdigest()
    assert plan.bytes == len(data) == 2002
    assert plan.preview == body[:PLAN_PREVIEW_CHARS]
    assert len(plan.preview) == 1600
    assert plan.preview_complete is False
    assert plan.updated_at == at(minutes=1)
    assert plan.relative_path == f"work-items/{item_id}/plan.md"
    assert plan.path == str(home_dir(agent_home, AGENT_ID) / plan.relative_path)


def test_plan_of_exactly_the_preview_size_is_complete(agent_home: Path) -> None:
    plan = ensure_plan_file(agent_home, AGENT_ID, work_item_id(), "p" * 1600, T0)
    assert plan.preview_complete is True
    assert plan.preview == "p" * 1600


def test_ensure_plan_file_seeds_once_and_keeps_agent_edits(agent_home: Path) -> None:
    item_id = work_item_id()
    first = ensure_plan_file(agent_home, AGENT_ID, item_id, "Seed plan.\n", T0)
    assert Path(first.path).read_text() == "Seed plan.\n"
    Path(first.path).write_text("Edited by the agent.\n")
    again = ensure_plan_file(agent_home, AGENT_ID, item_id, "Seed plan.\n", T0)
    assert again.preview == "Edited by the agent.\n"


def test_empty_plan_seed_is_an_empty_file(agent_home: Path) -> None:
    plan = ensure_plan_file(agent_home, AGENT_ID, work_item_id(), None, T0)
    assert (plan.bytes, plan.preview, plan.preview_complete) == (0, "", True)
    assert plan.sha256 == hashlib.sha256(b"").hexdigest()


def test_plan_paths_need_a_work_item_id() -> None:
    with pytest.raises(ValueError, match="not a WorkItem id"):
        plan_relative_path("../../etc")


def test_a_written_plan_file_names_its_work_item(agent_home: Path) -> None:
    item_id = work_item_id(3)
    written = write_file(
        agent_home, AGENT_ID, WriteFileInput(path=plan_relative_path(item_id), content="x")
    )
    assert plan_work_item_id(agent_home, AGENT_ID, Path(written["path"])) == item_id
    other = write_file(agent_home, AGENT_ID, WriteFileInput(path="notes.md", content="x"))
    assert plan_work_item_id(agent_home, AGENT_ID, Path(other["path"])) is None
