"""An external agent loop: a model behind any OpenAI-compatible endpoint works an agent's
WorkItems through longrun's tools, woken by the agent's wake feed. No Redis, only HTTP.

    LONGRUN_URL=http://127.0.0.1:8080 LONGRUN_AGENT_TOKEN=ada~... \\
    OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-... MODEL=gpt-4.1-mini \\
    python examples/external_loop.py

Each tick of the feed starts one turn: the model is shown the tick and the agent's open
WorkItems, and calls tools (CreateWorkItem, PickWorkItem, WaitFor, CompleteWorkItem, ...) until
it answers without a tool call, or a tool that ends a turn (WaitFor, CompleteWorkItem,
DelegateWorkItem, SubmitVerdict) succeeds. The text the model writes beside CompleteWorkItem is
the completion report. Each tool call carries a command id derived from the tick and the
model's call id, so a turn retried after a crash of this loop applies nothing twice.

With `--state FILE` the id of the last tick worked is kept there, and a restarted loop resumes
after it (the feed keeps every tick after it that is still on the stream); the client itself
resumes after dropped connections and ingress restarts. Every tick worked is printed as one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from openai import OpenAI

from longrun.client import Agent, ToolError, Unavailable, WakeTick

TURN_ENDING = {"WaitFor", "CompleteWorkItem", "DelegateWorkItem", "SubmitVerdict"}
MAX_ROUNDS = 12
INSTRUCTIONS = (
    "You are an agent whose work lives in longrun WorkItems. You are woken by a tick that says "
    "why (input, continue_current, review_triggered, pick_queued, recheck_due) and which "
    "WorkItem it concerns. Use the tools: pick the WorkItem you work on, clear a blocker that "
    "a callback or answer resolved (PickWorkItem with clear_blocker and a reason), wait with "
    "WaitFor when you need something from outside, and complete a WorkItem with "
    "CompleteWorkItem, writing the report for the operator as your message text in the same "
    "reply. When there is nothing to do, answer without a tool call."
)


def tick_prompt(tick: WakeTick, open_items: list[dict[str, Any]]) -> str:
    woken = tick.model_dump(include={"kind", "work_item_id", "candidates", "tick_id"})
    return "Woken by tick: " + json.dumps(woken) + "\nOpen WorkItems: " + json.dumps(open_items)


def run_tool(
    agent: Agent, call: Any, text: str | None, tick: WakeTick
) -> tuple[dict[str, Any], bool]:
    """One tool call of the model through the client: (what the model is shown, ended turn)."""
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except json.JSONDecodeError as exc:
        error = {"kind": "invalid_tool_input", "message": f"arguments are not JSON: {exc}"}
        return {"status": "error", "error": error}, False
    name = call.function.name
    try:
        envelope = agent.call_tool(
            name,
            arguments,
            assistant_text=text if name == "CompleteWorkItem" else None,
            command_id=f"{tick.tick_id}:{call.id}",
        )
    except ToolError as err:
        shown = {"kind": err.kind, "message": err.message, "recovery_hint": err.recovery_hint}
        return {"status": "error", "error": shown}, False
    return envelope.model_dump(exclude_none=True), name in TURN_ENDING


def work(agent: Agent, model: OpenAI, model_name: str, tick: WakeTick) -> list[str]:
    """One turn for one tick; the names of the tools called."""
    items = agent.work_items("open")
    open_items = [item.model_dump(include={"id", "objective", "blocked_by", "is_current"})
                  for item in items.work_items]  # fmt: skip
    messages: list[Any] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": tick_prompt(tick, open_items)},
    ]
    tools = [tool.openai_tool() for tool in agent.tools()]
    called: list[str] = []
    for _ in range(MAX_ROUNDS):
        reply = model.chat.completions.create(model=model_name, messages=messages, tools=tools)
        message = reply.choices[0].message
        if not message.tool_calls:
            return called
        messages.append(message.model_dump(exclude_none=True))
        ended = False
        for call in message.tool_calls:
            shown, ends = run_tool(agent, call, message.content, tick)
            called.append(call.function.name)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(shown)})
            ended = ended or ends
        if ended:
            return called
    return called


def work_until_done(agent: Agent, model: OpenAI, model_name: str, tick: WakeTick) -> list[str]:
    """The turn, again while longrun cannot be reached (an ingress restarting, say): its tool
    calls' command ids make a repeated call apply once."""
    while True:
        try:
            return work(agent, model, model_name, tick)
        except Unavailable as err:
            print(json.dumps({"retrying_tick": tick.id, "because": err.message}), flush=True)
            time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("LONGRUN_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--token", default=os.environ.get("LONGRUN_AGENT_TOKEN"))
    parser.add_argument("--model", default=os.environ.get("MODEL", "gpt-4.1-mini"))
    parser.add_argument("--state", type=Path, help="file keeping the last tick id worked")
    parser.add_argument("--max-ticks", type=int, help="stop after working this many ticks")
    options = parser.parse_args(argv)
    if not options.token:
        parser.error("give the agent token: --token or LONGRUN_AGENT_TOKEN")
    after = None
    if options.state is not None and options.state.exists():
        after = options.state.read_text().strip() or None
    model = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    worked = 0
    with Agent(options.url, options.token) as agent:
        # Without a kept tick id, start at the feed's live tail (the id of its newest entry).
        after = after or agent.poll_wakes(wait_s=0).next_cursor
        print(json.dumps({"listening_after": after}), flush=True)
        for tick in agent.wakes(after=after):
            called = work_until_done(agent, model, options.model, tick)
            line = {"tick": tick.id, "kind": tick.kind, "work_item_id": tick.work_item_id}
            print(json.dumps({**line, "tools": called}), flush=True)
            if options.state is not None:
                options.state.write_text(tick.id)
            worked += 1
            if options.max_ticks is not None and worked >= options.max_ticks:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
