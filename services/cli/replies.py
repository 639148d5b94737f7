"""`longrun send --wait`: the brief that answers one operator message, found by polling the
agent's briefs for one naming the message in `in_reply_to`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from services.cli.client import Json, LongrunClient

POLL_S = 0.5
"""How often the briefs are read while waiting: a turn takes seconds, a reply is not urgent."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What became of the message: the agent's reply, or a failure brief that set it aside."""

    text: str
    failed: bool


def answer_in(briefs: list[Json], message_id: str) -> Answer | None:
    """The first reply or failure brief naming `message_id`; None while there is none."""
    for brief in briefs:
        if message_id not in (brief.get("in_reply_to") or ()):
            continue
        if brief.get("kind") == "reply":
            return Answer(str(brief["text"]), failed=False)
        if brief.get("kind") == "failure":
            return Answer(str(brief["text"]), failed=True)
    return None


def wait_for_answer(
    client: LongrunClient,
    agent_id: str,
    message_id: str,
    timeout_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Answer | None:
    """Poll the agent's briefs until one answers the message; None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = answer_in(list(client.briefs(agent_id).get("briefs") or []), message_id)
        if found is not None or time.monotonic() >= deadline:
            return found
        sleep(POLL_S)
