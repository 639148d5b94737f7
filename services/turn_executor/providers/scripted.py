"""The `scripted` provider: a deterministic, offline stand-in for a model that reads the projected
prompt and works the WorkItem loop (record a request, plan, work one todo per turn, wait for a
callback when asked, complete with a report; with an MCP tool that takes `text`, call it about
each todo it works). `script_file` replays given rounds instead."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

from services.turn_executor.providers import (
    ChatMessage,
    ProviderRound,
    ToolCall,
    ToolSpec,
)
from services.turn_executor.providers.conversation import Seen, SeenItem, read_conversation
from shared.domain.delegation import REVIEW_OBJECTIVE

_WAIT_WORDS = re.compile(r"\b(wait for|callback|approval)\b", re.IGNORECASE)
_CLAUSES = re.compile(r"[.!?](?=\s|$)|[;\n]|,\s*(?:and\s+)?then\s+|\s+and then\s+", re.IGNORECASE)
_CONNECTOR = re.compile(r"^(?:then|and|also|finally|first|next|please)\b[\s,]*", re.IGNORECASE)
WAIT_TODO_PREFIX = "Wait for "
MCP_SEPARATOR = "__"
"""How an MCP tool's name joins its server's (`<server>__<tool>`)."""
PROGRESS_MARKER = "\n## Progress"
"""Where progress notes go; tool inputs are trimmed, so the plan ends right after it."""


# ---------------------------------------------------------------- the built-in policy


def objective_of(request: str) -> str:
    first = re.split(r"(?<=[.!?])\s+|\n", request.strip(), maxsplit=1)[0]
    return first.strip().rstrip(".!?").strip()[:120] or "Handle the operator request"


def todos_of(request: str) -> list[str]:
    """Two to four todos from the request's clauses; a wait request adds a `Wait for` step."""
    steps = []
    for clause in _CLAUSES.split(request):
        step = _CONNECTOR.sub("", clause.strip()).strip(" ,:-")
        if len(step.split()) >= 2 and not _WAIT_WORDS.search(step):
            steps.append(step[0].upper() + step[1:120])
    objective = objective_of(request)
    if len(steps) < 2:
        steps = [f"Work out the approach for: {objective}", f"Carry out: {objective}"]
    if not _WAIT_WORDS.search(request):
        return steps[:4]
    thing = "approval callback" if re.search(r"approv", request, re.IGNORECASE) else "callback"
    steps = steps[:3]
    return [*steps[:-1], f"{WAIT_TODO_PREFIX}the {thing}", steps[-1]]


def plan_of(request: str, todos: list[str]) -> str:
    quoted = "\n".join(f"> {line}" for line in request.strip().splitlines())
    steps = "\n".join(f"{n}. {todo}" for n, todo in enumerate(todos, start=1))
    return f"# {objective_of(request)}\n\nOperator request:\n{quoted}\n\nApproach:\n{steps}\n" + (
        PROGRESS_MARKER
    )


def _call(index: int, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"call_{index}", name=name, arguments=json.dumps(arguments))


def _numbered(seen: Seen, answer: ProviderRound) -> ProviderRound:
    """Call ids must be unique across the conversation, so they carry the round number."""
    calls = tuple(
        ToolCall(id=f"call_{seen.rounds + 1}_{n}", name=call.name, arguments=call.arguments)
        for n, call in enumerate(answer.tool_calls)
    )
    return ProviderRound(text=answer.text, tool_calls=calls, finish_reason=answer.finish_reason)


def _todo_list(todos: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"text": text, "state": state} for state, text in todos]


def _say(text: str, *calls: ToolCall) -> ProviderRound:
    return ProviderRound(
        text=text, tool_calls=calls, finish_reason="tool_calls" if calls else "stop"
    )


def _record(requests: list[str]) -> ProviderRound:
    calls = []
    for n, request in enumerate(requests):
        todos = todos_of(request)
        todo_list = [{"text": todo, "state": "pending"} for todo in todos]
        args = {"objective": objective_of(request), "plan_status": "ready"}
        calls.append(
            _call(n, "CreateWorkItem", **args, plan=plan_of(request, todos), todo_list=todo_list)
        )
    return _say("I'm recording this request as a WorkItem with a plan and todos.", *calls)


def _finish(item: SeenItem) -> ProviderRound:
    done = [(state, text) for state, text in item.todos]
    steps = "; ".join(text for _, text in done) or "the objective"
    report = f'Completed "{item.objective}". Done: {steps}.'
    all_done = [("completed", text) for _, text in done]
    update = _call(0, "UpdateWorkItem", work_item_id=item.id, todo_list=_todo_list(all_done))
    complete = _call(1, "CompleteWorkItem", work_item_id=item.id)
    return _say(report, update, complete) if done else _say(report, complete)


def external_tool(tools: Sequence[ToolSpec]) -> str | None:
    """The first MCP tool offered (`<server>__<tool>`) that takes a `text` string, if any."""
    for spec in tools:
        function = spec.get("function") or {}
        name = str(function.get("name", ""))
        properties = (function.get("parameters") or {}).get("properties") or {}
        if MCP_SEPARATOR in name and (properties.get("text") or {}).get("type") == "string":
            return name
    return None


def _work(item: SeenItem, external: str | None = None) -> ProviderRound:
    """One todo per turn: wait if it is the wait step, finish if it is the last, else do it
    (calling the `external` tool about the step, when the agent has one)."""
    open_steps = [i for i, (state, _) in enumerate(item.todos) if state != "completed"]
    if len(open_steps) <= 1 and not (open_steps and _is_wait(item.todos[open_steps[0]][1])):
        return _finish(item)
    now = next((i for i in open_steps if item.todos[i][0] == "in_progress"), open_steps[0])
    step = item.todos[now][1]
    if _is_wait(step):
        reason = f"Waiting for the {step.removeprefix(WAIT_TODO_PREFIX).removeprefix('the ')}"
        wait = _call(0, "WaitFor", reason=f"{reason}: {item.objective}"[:500], wake="external")
        return _say(f"{reason} before going on.", wait)
    after = next((i for i in open_steps if i != now), None)
    todos = [
        ("completed" if i == now else "in_progress" if i == after else state, text)
        for i, (state, text) in enumerate(item.todos)
    ]
    calls = [_call(1, "UpdateWorkItem", work_item_id=item.id, todo_list=_todo_list(todos))]
    if item.plan_path and item.has_progress_section:
        note = f"{PROGRESS_MARKER}\n- done: {step}"
        edit = _call(0, "EditFile", path=item.plan_path, old_text=PROGRESS_MARKER, new_text=note)
        calls.insert(0, edit)
    if external is not None:
        calls.append(_call(2, external, text=step))
    return _say(f"Done: {step}.", *calls)


def _is_wait(step: str) -> bool:
    return step.startswith(WAIT_TODO_PREFIX)


def _first_round(seen: Seen, external: str | None = None) -> ProviderRound:
    new = [r for r in seen.requests if objective_of(r) not in seen.objectives]
    current = seen.current
    if new:
        return _record(new)
    if current is not None and current.runnable:
        return _work(current, external)
    review = current.id if current is not None and current.new_triggers else None
    review = review or next(iter(seen.triggered), None)
    if review is not None:
        reason = "A callback arrived for this WorkItem; reviewing it."
        pick = _call(0, "PickWorkItem", work_item_id=review, reason=reason, clear_blocker=True)
        heard = f" It says: {seen.evidence[-1][:200]}" if seen.evidence else ""
        return _say(f"The awaited callback arrived.{heard}", pick)
    if (current is None or not current.runnable) and seen.queued:
        return _say(
            "Picking up the next queued WorkItem.",
            _call(0, "PickWorkItem", work_item_id=seen.queued[0]),
        )
    return _say("Nothing is runnable right now; I'll wait for new input.")


def _after_create(seen: Seen, item: dict[str, Any]) -> ProviderRound:
    if seen.current is not None and seen.current.runnable:
        return _say(f"Queued {item['objective']!r} behind the current WorkItem.")
    todos = [(t["state"], t["text"]) for t in item.get("todo_list", [])]
    todos = [("in_progress" if i == 0 else s, t) for i, (s, t) in enumerate(todos)]
    pick = _call(0, "PickWorkItem", work_item_id=item["id"])
    update = _call(1, "UpdateWorkItem", work_item_id=item["id"], todo_list=_todo_list(todos))
    return _say(f"Picked up {item['objective']!r}; its first todo is in progress.", pick, update)


def _after_review(item: dict[str, Any]) -> ProviderRound:
    todos = [(t["state"], t["text"]) for t in item.get("todo_list", [])]
    waiting = next((i for i, (s, t) in enumerate(todos) if _is_wait(t) and s != "completed"), None)
    if waiting is None:
        return _say("Reviewed the callback; the WorkItem is runnable again.")
    after = waiting + 1 if waiting + 1 < len(todos) else None
    marked = [
        ("completed" if i == waiting else "in_progress" if i == after else state, text)
        for i, (state, text) in enumerate(todos)
    ]
    update = _call(0, "UpdateWorkItem", work_item_id=item["id"], todo_list=_todo_list(marked))
    return _say("The wait is over; marking it done and moving on.", update)


def _follow_up(seen: Seen) -> ProviderRound:
    """After a round of tool calls: finish what the first round started, else wrap up."""
    ok = [
        (name, args, env) for name, args, env in seen.last_round if env.get("status") == "success"
    ]
    created = [env["result"]["work_item"] for name, _, env in ok if name == "CreateWorkItem"]
    if created:
        return _after_create(seen, created[0])
    reviewed = [
        env["result"]["current_work_item"] for _, args, env in ok if args.get("clear_blocker")
    ]
    if reviewed:
        return _after_review(reviewed[0])
    failed = [
        env.get("error") or {} for _, _, env in seen.last_round if env.get("status") != "success"
    ]
    if failed:
        return _say(f"A tool call failed ({failed[0].get('kind')}: {failed[0].get('message')}).")
    return _say("Progress is saved; I'll continue on the next turn.")


def _verdict(seen: Seen, tools: Sequence[ToolSpec]) -> ProviderRound | None:
    """A review item in hand (SubmitVerdict is offered only then): pass it."""
    current = seen.current
    offered = {str((spec.get("function") or {}).get("name")) for spec in tools}
    if current is None or not current.runnable or "SubmitVerdict" not in offered:
        return None
    if not current.objective.startswith(REVIEW_OBJECTIVE):
        return None
    reason = "The report answers the objective."
    verdict = _call(0, "SubmitVerdict", work_item_id=current.id, passed=True, reason=reason)
    return _say("Reviewed the report; it passes.", verdict)


def policy_round(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> ProviderRound:
    """The built-in policy's next round, a pure function of the conversation and the tools."""
    seen = read_conversation(messages)
    if seen.rounds:
        return _numbered(seen, _follow_up(seen))
    verdict = _verdict(seen, tools)
    if verdict is not None:
        return _numbered(seen, verdict)
    return _numbered(seen, _first_round(seen, external_tool(tools)))


class ScriptedProvider:
    def __init__(self, *, latency_ms: int = 0) -> None:
        self.latency_s = latency_ms / 1000
        self.last_system_prompt: str | None = None
        """What the latest round was told about the agent (its instructions included), kept
        so a test sees what reached the model."""

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderRound:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        system = [m["content"] for m in messages if m.get("role") == "system"]
        self.last_system_prompt = str(system[0]) if system else None
        return policy_round(messages, tools)

    async def close(self) -> None:
        return None
