"""The RunCommand tool: its input (checked field by field, with the deployment's timeout
ceiling and the working directory confined to the agent's home), its schema as the model sees
it, and its answer from the sandbox."""

from __future__ import annotations

import functools
import os
import posixpath
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from services.turn_executor.sandbox import WORKSPACE, CommandResult
from shared.agent_home import home_dir
from shared.domain.errors import DomainError, ErrorKind

RUN_COMMAND = "RunCommand"
MAX_COMMAND_BYTES = 65_536
"""A command line (argv joined, or `command`) at most: more is data, and belongs in a file."""
MAX_ENV_BYTES = 65_536
RUN_COMMAND_ARGUMENT_BYTES = 4 * 1024 * 1024
"""RunCommand's arguments are read up to this size so an oversized field is named, not just
the call's size."""
DEFAULT_TIMEOUT_S = 60
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_ENV = frozenset({"PATH"})
"""The sandbox sets PATH to the system's tools; a command cannot swap them for its own."""


class RunCommandInput(BaseModel):
    """Run a command in a sandbox over your home, mounted at /workspace (the only writable
    place; no network; CPU, memory, process and time limits). Give `argv` (a list, run as is)
    or `command` (run by /bin/sh -c). `cwd` is relative to /workspace. Answers exit_code,
    stdout_tail, stderr_tail, duration_ms, timed_out and truncated. longrun never repeats a
    command: if a turn is interrupted while one runs, its outcome is unknown."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str] | None = Field(default=None, min_length=1, max_length=4096)
    command: str | None = Field(default=None, min_length=1)
    cwd: str = "."
    timeout_s: int | None = Field(default=None, ge=1)
    """Wall-clock seconds before the command is killed (default 60, or the deployment's
    ceiling if lower)."""
    env: dict[str, str] = Field(default_factory=dict, max_length=256)

    @field_validator("argv")
    @classmethod
    def _argv(cls, argv: list[str] | None) -> list[str] | None:
        if argv is not None:
            if not argv[0]:
                raise ValueError("argv[0] (the program) cannot be empty")
            _bounded(sum(len(a.encode()) + 1 for a in argv), "argv")
            _no_nul(argv)
        return argv

    @field_validator("command")
    @classmethod
    def _command(cls, command: str | None) -> str | None:
        if command is not None:
            if not command.strip():
                raise ValueError("command cannot be blank")
            _bounded(len(command.encode()), "command")
            _no_nul([command])
        return command

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name in RESERVED_ENV or name.startswith("LD_"):
                raise ValueError(f"{name} cannot be set: the sandbox decides it")
        _bounded(sum(len(k) + len(v.encode()) + 2 for k, v in env.items()), "env", MAX_ENV_BYTES)
        _no_nul(list(env.values()))
        return env

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, cwd: str) -> str:
        _no_nul([cwd])
        path = posixpath.normpath(cwd.strip() or ".")
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            path = posixpath.relpath(path, WORKSPACE)
        if path.startswith("/") or path == ".." or path.startswith("../"):
            raise ValueError(f"{cwd!r} is outside /workspace (your home)")
        return path

    @model_validator(mode="after")
    def _one_program(self) -> RunCommandInput:
        if (self.argv is None) == (self.command is None):
            raise ValueError("give exactly one of argv and command")
        return self

    def program(self) -> list[str]:
        return list(self.argv) if self.argv is not None else ["/bin/sh", "-c", str(self.command)]


def _bounded(size: int, name: str, limit: int = MAX_COMMAND_BYTES) -> None:
    if size > limit:
        raise ValueError(f"{name} has {size} bytes; at most {limit}")


def _no_nul(values: list[str]) -> None:
    if any("\x00" in value for value in values):
        raise ValueError("NUL characters cannot be passed to a program")


def _invalid(message: str, problems: list[dict[str, str]]) -> DomainError:
    return DomainError(ErrorKind.INVALID_TOOL_INPUT, message, details={"errors": problems})


def parse_run_command(
    raw: object, *, max_timeout_s: int, agent_home: Path, agent_id: str
) -> RunCommandInput:
    """Validate a call; raises DomainError(invalid_tool_input) naming the bad fields."""
    try:
        args = RunCommandInput.model_validate(raw)
    except ValidationError as exc:
        problems = [
            {"field": ".".join(str(p) for p in err["loc"]) or "(input)", "problem": err["msg"]}
            for err in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        fields = ", ".join(p["field"] for p in problems)
        raise _invalid(f"{RUN_COMMAND}: invalid input ({fields})", problems) from None
    if args.timeout_s is None:
        args = args.model_copy(update={"timeout_s": min(DEFAULT_TIMEOUT_S, max_timeout_s)})
    elif args.timeout_s > max_timeout_s:
        problem = f"at most {max_timeout_s} seconds (LONGRUN_COMMAND_MAX_S)"
        raise _invalid(
            f"{RUN_COMMAND}: invalid input (timeout_s)",
            [{"field": "timeout_s", "problem": problem}],
        )
    home = home_dir(agent_home, agent_id)
    target = Path(os.path.realpath(home / args.cwd))
    if not target.is_relative_to(home) or not target.is_dir():
        problem = "not a directory inside /workspace (your home)"
        raise _invalid(
            f"{RUN_COMMAND}: invalid input (cwd)", [{"field": "cwd", "problem": problem}]
        )
    return args


@functools.cache
def run_command_spec() -> dict[str, Any]:
    """The tool as the model's tool list carries it."""
    schema = RunCommandInput.model_json_schema()
    description = str(schema.pop("description", ""))
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return {
        "type": "function",
        "function": {"name": RUN_COMMAND, "description": description, "parameters": schema},
    }


def unavailable(reason: str) -> DomainError:
    return DomainError(
        ErrorKind.UNKNOWN_TOOL,
        f"{RUN_COMMAND} is not one of your tools: {reason}",
        recovery_hint="Work with the file tools; the operator can enable commands.",
    )


def outcome_of(result: CommandResult) -> Literal["ok", "error", "timeout"]:
    """The recorded outcome: `timeout`, `ok` for exit 0, else `error`."""
    if result.timed_out:
        return "timeout"
    return "ok" if result.exit_code == 0 else "error"
