"""No argument to a file tool can hold a thread or the event loop for long: SearchFiles answers
`pattern_too_slow` for patterns that backtrack without end (several shapes), a walk reads a
bounded number of directory entries, ReadFile and EditFile refuse huge files, a model's tool
call with huge arguments is refused, and `FileTools` runs every call off the loop, one search
at a time per agent."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from services.turn_executor.promotion import parse_arguments
from shared.agent_home import EDIT_MAX_FILE_BYTES, READ_MAX_FILE_BYTES
from shared.domain.errors import DomainError, ErrorKind
from shared.file_runner import FileTools
from shared.file_search import Scan, walk
from shared.file_tools import FileToolName, run_file_tool
from tests.builders import AGENT_ID

CATASTROPHIC = [
    # (pattern, line): each backtracks exponentially in the line's length with Python's re.
    (r"(a|a)+$", "a" * 40 + "!"),
    (r"(a|aa)+$", "a" * 60 + "!"),
    (r"^(\d|\d\d)+$", "1" * 60 + "x"),
    (r"(.*?,){30}X", "a," * 40),
    (r"(a+)\1+$", "a" * 5000 + "b"),
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "homes"
    (root / AGENT_ID).mkdir(parents=True)
    return root


def search(home: Path, pattern: str, *, limit_ms: int = 300) -> dict[str, object]:
    envelope = run_file_tool(
        home, AGENT_ID, FileToolName.SEARCH_FILES, {"pattern": pattern}, search_timeout_ms=limit_ms
    )
    return envelope.model_dump(mode="json")


@pytest.mark.parametrize(("pattern", "line"), CATASTROPHIC)
def test_a_pattern_that_backtracks_without_end_answers_pattern_too_slow(
    home: Path, pattern: str, line: str
) -> None:
    (home / AGENT_ID / "input.txt").write_text(f"fine\n{line}\n")
    answer = search(home, pattern)
    assert answer["status"] == "error"
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["kind"] == "pattern_too_slow"
    assert error["details"] == {"pattern": pattern, "path": ".", "limit_ms": 300}
    assert "300 ms" in error["message"]


def test_the_same_search_with_room_to_finish_matches(home: Path) -> None:
    (home / AGENT_ID / "input.txt").write_text("aaa\nbbb\n")
    answer = search(home, r"(a|a)+$", limit_ms=2000)
    assert answer["status"] == "success"
    assert answer["result"] == {
        "matches": [{"path": "input.txt", "line": 1, "text": "aaa"}],
        "truncated": False,
        "skipped_large": [],
    }


def test_a_walk_reads_a_bounded_number_of_entries(home: Path) -> None:
    mine = home / AGENT_ID
    for n in range(30):
        (mine / f"f{n:02d}").write_text("x")
    (mine / "sub").mkdir()
    (mine / "sub" / "deep.txt").write_text("x")
    scan = Scan(left=10)
    listed = list(walk(mine, True, scan))
    assert len(listed) == 10
    assert scan.cut
    everything = Scan()
    names = [p.name for p in walk(mine, True, everything)]
    assert not everything.cut
    assert names == [*sorted(n for n in names if n != "deep.txt"), "deep.txt"]


def test_read_and_edit_refuse_files_past_their_bound(home: Path) -> None:
    big = home / AGENT_ID / "big.log"
    with big.open("wb") as handle:  # sparse: the bound is checked before anything is read
        handle.truncate(READ_MAX_FILE_BYTES + 1)
    read = run_file_tool(home, AGENT_ID, FileToolName.READ_FILE, {"path": "big.log"})
    assert read.error is not None
    assert read.error.kind is ErrorKind.INVALID_TOOL_INPUT
    assert read.error.details == {
        "path": "big.log",
        "bytes": READ_MAX_FILE_BYTES + 1,
        "max_bytes": READ_MAX_FILE_BYTES,
    }
    with big.open("r+b") as handle:
        handle.truncate(EDIT_MAX_FILE_BYTES + 1)
    args = {"path": "big.log", "old_text": "a", "new_text": "b"}
    edit = run_file_tool(home, AGENT_ID, FileToolName.EDIT_FILE, args)
    assert edit.error is not None
    assert edit.error.details is not None
    assert edit.error.details["max_bytes"] == EDIT_MAX_FILE_BYTES
    assert big.stat().st_size == EDIT_MAX_FILE_BYTES + 1  # unchanged


def test_a_model_tool_call_with_huge_arguments_is_refused_before_parsing() -> None:
    raw = json.dumps({"path": "x.txt", "content": "é" * 1000}, ensure_ascii=False)
    assert parse_arguments("WriteFile", raw, max_bytes=4096)["path"] == "x.txt"
    with pytest.raises(DomainError) as refused:
        parse_arguments("WriteFile", raw, max_bytes=1500)
    assert refused.value.kind is ErrorKind.INVALID_TOOL_INPUT
    assert refused.value.details == {"bytes": len(raw.encode()), "max_bytes": 1500}


async def test_file_tools_run_off_the_loop_while_a_search_runs_out_its_limit(home: Path) -> None:
    """A catastrophic search of one agent takes its whole limit; meanwhile the loop ticks and
    another agent's reads answer; a second search of the same agent waits for the first."""
    other = "agent-other"
    (home / other).mkdir()
    (home / other / "notes.txt").write_text("hello\n")
    (home / AGENT_ID / "input.txt").write_text("a" * 40 + "!\n")
    files = FileTools(home, search_timeout_ms=1500)
    slow = {"pattern": r"(a|a)+$"}
    first = asyncio.create_task(files.run(AGENT_ID, FileToolName.SEARCH_FILES, slow))
    second = asyncio.create_task(files.run(AGENT_ID, FileToolName.SEARCH_FILES, slow))
    answered = 0
    while not first.done():
        started = time.monotonic()
        read = await files.run(other, FileToolName.READ_FILE, {"path": "notes.txt"})
        assert read.status == "success"
        assert time.monotonic() - started < 1.0, "a read waited on the search"
        answered += 1
        await asyncio.sleep(0.05)
    assert answered > 1
    for task in (first, second):
        envelope = await task
        assert envelope.error is not None
        assert envelope.error.kind is ErrorKind.PATTERN_TOO_SLOW
    files.close()
