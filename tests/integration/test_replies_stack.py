"""`longrun send ID TEXT --wait` on the services as processes, the executor talking to a
chat-completions server on loopback: the question reaches the model and the model's answer is
what the command prints."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.integration.stack import OPERATOR_TOKEN, Stack
from tests.integration.test_model_calls import used
from tests.unit.test_provider_openai import ChatServer, serving

LONGRUN = Path(sys.executable).parent / "longrun"


async def longrun(url: str, *args: str) -> tuple[int, str, str]:
    """Run the installed `longrun` command line against `url`; (exit code, stdout, stderr)."""
    env = {**os.environ, "LONGRUN_URL": url, "LONGRUN_OPERATOR_TOKEN": OPERATOR_TOKEN}
    proc = await asyncio.create_subprocess_exec(
        str(LONGRUN),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def openai_env(app: ChatServer) -> dict[str, str]:
    return {
        "LONGRUN_PROVIDER": "openai",
        "LONGRUN_OPENAI_BASE_URL": app.base_url,
        "LONGRUN_OPENAI_API_KEY": "sk-stub",
        "LONGRUN_MODEL": "stub-model",
    }


async def test_send_wait_prints_the_agents_answer_to_the_question(spawn) -> None:
    answer = used(120, 0, 9, text="The staging database is db-stage-2.")
    async with serving(ChatServer(replies=[(200, answer, {})])) as app:
        stack = Stack(spawn)
        await stack.start(**openai_env(app))
        async with stack.http() as http:
            created = await http.put("/v1/agents/helper")
            assert created.status_code == 201, created.text
            code, out, err = await longrun(
                stack.url, "send", "helper", "Which database is staging on?", "--wait"
            )
            assert (code, out) == (0, "The staging database is db-stage-2.\n"), err
            assert err.startswith("message msg_")
            (request,) = app.requests
            asked = [m["content"] for m in request["messages"] if m["role"] == "user"]
            assert any("Which database is staging on?" in str(text) for text in asked)
            briefs = (await http.get("/v1/agents/helper/briefs")).json()["briefs"]
            (reply,) = briefs
            message_id = err.split()[1]
            assert (reply["kind"], reply["in_reply_to"]) == ("reply", [message_id])


async def test_send_wait_gives_up_with_exit_1_when_no_reply_comes(spawn) -> None:
    stack = Stack(spawn)
    await stack.start()
    async with stack.http() as http:
        created = await http.put("/v1/agents/external-one", json={"loop": "external"})
        assert created.status_code == 201, created.text
        # An external-loop agent's turns are its own: longrun records no reply for it.
        code, out, err = await longrun(
            stack.url, "send", "external-one", "Anyone?", "--wait", "--timeout", "1"
        )
    assert (code, out) == (1, "")
    assert "no reply from external-one within 1s" in err
