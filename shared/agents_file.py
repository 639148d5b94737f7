"""Reading an agents file for `longrun apply`: a YAML list of agents `{id, loop?, spec?}` and
presets `{kind: preset, name, spec}`, validated whole before anything is applied, every error
located as `FILE:LINE: message`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from shared.domain.presets import PresetName
from shared.domain.records import AgentId, AgentLoop
from shared.domain.spec_secrets import error_path
from shared.domain.specs import AgentSpec


class AgentEntry(BaseModel):
    """One agent of the file; left-out `loop` and `spec` leave an existing agent's alone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["agent"] = "agent"
    id: AgentId
    loop: AgentLoop | None = None
    spec: AgentSpec | None = None


class PresetEntry(BaseModel):
    """A preset of the file (`kind: preset`): a spec stored under a name for SpawnAgent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["preset"]
    name: PresetName
    spec: AgentSpec


Entry = AgentEntry | PresetEntry


class AgentsFileError(Exception):
    """The file cannot be applied; `str()` is `FILE:LINE: message`."""


def _line_of(root: yaml.Node, path: Sequence[str | int]) -> int:
    """The 1-based line of the node at `path`, or of its deepest ancestor in the file."""
    node = root
    for step in path:
        child = _child(node, step)
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1


def _child(node: yaml.Node, step: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.SequenceNode) and isinstance(step, int):
        return node.value[step] if 0 <= step < len(node.value) else None
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(step):
                # A refused key (unknown, or a secret) is best shown at the key itself.
                return value if isinstance(value, yaml.CollectionNode) else key
    return None


def _where(path: Sequence[str | int]) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else f".{step}"
    return text.lstrip(".")


def parse_agents_file(name: str, text: str) -> list[tuple[int, Entry]]:
    """The file's agents and presets with the line each starts on, or AgentsFileError naming
    the first bad line."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data: Any = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise AgentsFileError(f"{name}:{line}: not valid YAML: {exc.problem}") from None
    if root is None or not isinstance(data, list):
        raise AgentsFileError(f"{name}:1: expected a YAML list of agents ({{id, loop?, spec?}})")
    entries: list[Entry] = []
    for index, item in enumerate(data):
        model = _model_of(item)
        try:
            entries.append(model.model_validate(item))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            path = (index, *error_path(error))
            line = _line_of(root, path)
            raise AgentsFileError(f"{name}:{line}: agents{_where(path)}: {error['msg']}") from None
    _refuse_duplicates(name, root, entries)
    return [(_line_of(root, (index,)), entry) for index, entry in enumerate(entries)]


def _model_of(item: Any) -> type[AgentEntry] | type[PresetEntry]:
    """`kind: preset` is a preset; anything else is read as an agent (whose `kind` may only be
    `agent`, so a misspelt kind is an error naming the field)."""
    return PresetEntry if isinstance(item, dict) and item.get("kind") == "preset" else AgentEntry


def _refuse_duplicates(name: str, root: yaml.Node, entries: list[Entry]) -> None:
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(entries):
        key, field = (entry.id, "id") if isinstance(entry, AgentEntry) else (entry.name, "name")
        if (entry.kind, key) in seen:
            line = _line_of(root, (index, field))
            raise AgentsFileError(f"{name}:{line}: {entry.kind} {key!r} appears twice")
        seen.add((entry.kind, key))


def read_agents_file(path: Path) -> list[tuple[int, Entry]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentsFileError(f"{path}:1: cannot read the file: {exc}") from None
    return parse_agents_file(str(path), text)
