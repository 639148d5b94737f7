"""Reading the projected prompt back: what a stand-in model sees in a conversation (the current
WorkItem, candidates, requests, evidence) and what this turn's earlier rounds did. It parses the
text `projection.py` renders, so the two change together."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.turn_executor.providers import ChatMessage

_AGENT = re.compile(r"^You are (\S+), a long-lived agent")
_ITEM_LINE = re.compile(r"^- (wi_[0-9A-Z]{26}): (.*)$")
_TODO_LINE = re.compile(r"^- \[(pending|in_progress|completed)\] (.*)$")


@dataclass
class SeenItem:
    """What the prompt shows about one WorkItem."""

    id: str
    objective: str = ""
    runnable: bool = False
    todos: list[tuple[str, str]] = field(default_factory=list)
    plan_path: str | None = None
    has_progress_section: bool = False
    new_triggers: bool = False


@dataclass
class Seen:
    """What the policy reads from the conversation so far."""

    agent_id: str = ""
    current: SeenItem | None = None
    objectives: set[str] = field(default_factory=set)
    triggered: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    rounds: int = 0
    last_round: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)


def _current_line(item: SeenItem, line: str, part: str) -> str:
    key, _, value = line.partition(": ")
    if key == "id":
        item.id = value
    elif key == "objective":
        item.objective = value
    elif key == "readiness":
        item.runnable = value == "runnable"
    elif key == "plan path":
        item.plan_path = value
    elif line == "> ## Progress":
        item.has_progress_section = True
    elif line.startswith("active waits"):
        return "waits"
    elif (todo := _TODO_LINE.match(line)) and part == "todos":
        item.todos.append((todo.group(1), todo.group(2)))
    elif part == "waits" and re.search(r", \d+ new", line):
        item.new_triggers = True
    return "todos" if line.startswith("todo_list") else part


def _read_summary(seen: Seen, text: str) -> None:
    section, part = "", ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].split(" (", 1)[0]
            if section == "Current WorkItem":
                seen.current = SeenItem(id="")
            continue
        if section == "Current WorkItem" and seen.current is not None and line:
            part = _current_line(seen.current, line, part)
            continue
        match = _ITEM_LINE.match(line)
        if match is None:
            continue
        item_id, objective = match.group(1), match.group(2).split(" | ", 1)[0]
        seen.objectives.add(objective)
        if section == "triggered_blocked" and re.search(r", \d+ new", line):
            seen.triggered.append(item_id)
        elif section == "queued_runnable":
            seen.queued.append(item_id)
    if seen.current is not None:
        seen.objectives.add(seen.current.objective)


def _read_history(seen: Seen, history: Sequence[ChatMessage]) -> None:
    """Each assistant round and the tool answers that follow it, paired by call id."""
    rounds: list[tuple[ChatMessage, dict[Any, Any]]] = []
    for message in history:
        if message["role"] == "assistant":
            rounds.append((message, {}))
        elif message["role"] == "tool" and rounds:
            rounds[-1][1][message.get("tool_call_id")] = message.get("content")
    for message, answers in rounds:
        seen.rounds += 1
        seen.last_round = []
        for call in message.get("tool_calls") or []:
            function = call["function"]
            args = _json_object(function.get("arguments"))
            envelope = _json_object(answers.get(call.get("id")))
            seen.last_round.append((function["name"], args, envelope))
            item = (envelope.get("result") or {}).get("work_item") or {}
            if function["name"] == "CreateWorkItem" and "id" in item:
                seen.created.append(item["id"])


def _json_object(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def read_conversation(messages: Sequence[ChatMessage]) -> Seen:
    """Parse the projected prompt (see projection.py) and this turn's rounds so far."""
    seen = Seen()
    first_answer = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    prompt = messages[:first_answer] if first_answer is not None else messages
    for message in prompt:
        content = str(message.get("content") or "")
        if message["role"] == "system" and (agent := _AGENT.match(content)):
            seen.agent_id = agent.group(1)
        elif content.startswith("# WorkItems of "):
            _read_summary(seen, content)
        elif content.startswith("Operator message ("):
            seen.requests.append(content.split("\n", 1)[-1].strip())
        elif content.startswith("External evidence"):
            seen.evidence.append(content.split("\n", 1)[-1].strip())
    _read_history(seen, messages[first_answer:] if first_answer is not None else [])
    return seen
