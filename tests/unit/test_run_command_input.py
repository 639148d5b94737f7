"""RunCommand's input rules, field by field: each bad input is refused as invalid_tool_input
naming its field (what the turn answers the model), a good one is normalized."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.turn_executor.run_command import RunCommandInput, parse_run_command
from shared.domain.errors import DomainError, ErrorKind

AGENT = "ada"


@pytest.fixture
def agent_home(tmp_path: Path) -> Path:
    (tmp_path / AGENT / "src").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / AGENT / "out").symlink_to(tmp_path / "other")
    return tmp_path


def refused_fields(raw: object, agent_home: Path) -> list[str]:
    with pytest.raises(DomainError) as caught:
        parse_run_command(raw, max_timeout_s=600, agent_home=agent_home, agent_id=AGENT)
    assert caught.value.kind is ErrorKind.INVALID_TOOL_INPUT
    assert caught.value.details is not None
    return [problem["field"] for problem in caught.value.details["errors"]]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"argv": []}, "argv"),
        ({"argv": [""]}, "argv"),
        ({"command": "x" * (1024 * 1024)}, "command"),
        ({"command": "   "}, "command"),
        ({"argv": ["ls", "a\x00b"]}, "argv"),
        ({"argv": ["ls"], "env": {"PATH": "/workspace/bin:/usr/bin"}}, "env"),
        ({"argv": ["ls"], "env": {"LD_PRELOAD": "/workspace/x.so"}}, "env"),
        ({"argv": ["ls"], "env": {"A=B": "c"}}, "env"),
        ({"argv": ["ls"], "cwd": "../other"}, "cwd"),
        ({"argv": ["ls"], "cwd": "src/../../other"}, "cwd"),
        ({"argv": ["ls"], "cwd": "/etc"}, "cwd"),
        ({"argv": ["ls"], "cwd": "out"}, "cwd"),
        ({"argv": ["ls"], "cwd": "missing"}, "cwd"),
        ({"argv": ["ls"], "timeout_s": 601}, "timeout_s"),
        ({"argv": ["ls"], "timeout_s": 0}, "timeout_s"),
        ({"argv": ["ls"], "shell": True}, "shell"),
        ({}, "(input)"),
        ({"argv": ["ls"], "command": "ls"}, "(input)"),
    ],
)
def test_bad_input_names_its_field(raw: object, field: str, agent_home: Path) -> None:
    assert refused_fields(raw, agent_home) == [field]


def test_good_input_is_normalized(agent_home: Path) -> None:
    args = parse_run_command(
        {"command": "pytest -q", "cwd": "/workspace/src/", "env": {"CI": "1"}},
        max_timeout_s=30,
        agent_home=agent_home,
        agent_id=AGENT,
    )
    assert args.program() == ["/bin/sh", "-c", "pytest -q"]
    assert (args.cwd, args.timeout_s, args.env) == ("src", 30, {"CI": "1"})
    assert RunCommandInput(argv=["ls"]).program() == ["ls"]
