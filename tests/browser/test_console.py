"""The console in a real browser: sign-in, live updates without reload, escaping, CSRF, the
agent-token refusal, and a dropped live connection that resumes without losing an event."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import orjson
import redis as sync_redis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from services.ingress.console.pages import HISTORY_PAGE
from shared.wire.names import Names
from tests.browser.conftest import (
    OPERATOR_TOKEN,
    Stack,
    new_agent_id,
    sign_in,
    wait,
)

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "console-agent.png"


def signed_in_http(driver: WebDriver, stack: Stack) -> httpx.Client:
    """An HTTP client carrying the browser's session cookie (and nothing else)."""
    cookies = {c["name"]: c["value"] for c in driver.get_cookies()}
    return httpx.Client(base_url=stack.url, cookies=cookies, timeout=30, follow_redirects=False)


def open_agent(driver: WebDriver, stack: Stack, agent_id: str) -> None:
    driver.get(f"{stack.url}/ui/agents/{agent_id}")
    wait(driver).until(lambda d: d.execute_script("return window.longrunLive.opened") >= 1)
    driver.execute_script("window.__not_reloaded = true;")


def still_same_page(driver: WebDriver) -> bool:
    return driver.execute_script("return window.__not_reloaded === true") is True


def text_of(driver: WebDriver, css: str) -> str:
    """In one script call: live parts are replaced whole whenever the feed refreshes them, so
    an element found in one call may be gone in the next."""
    text = driver.execute_script(
        "const el = document.querySelector(arguments[0]); return el ? el.innerText : ''", css
    )
    return str(text)


def board_text(driver: WebDriver) -> str:
    return text_of(driver, ".board")


def test_sign_in_opens_the_agents_page_with_every_agent(browser: WebDriver, stack: Stack) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, spec={"labels": {"team": "ops"}})
    browser.delete_all_cookies()
    browser.get(f"{stack.url}/ui")
    assert "/ui/login" in browser.current_url
    sign_in(browser, stack)
    wait(browser).until(lambda d: d.current_url.rstrip("/").endswith("/ui"))
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-agent='{agent_id}']")
    assert "team=ops" in row.text
    assert "dormant" in row.text
    session = browser.get_cookie("longrun_session")
    assert session is not None
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"
    row.find_element(By.LINK_TEXT, agent_id).click()
    wait(browser).until(
        lambda d: d.find_element(By.CSS_SELECTOR, ".agent-head h1").text == agent_id
    )


def test_a_tool_call_over_http_appears_on_the_open_page_without_reload(
    browser: WebDriver, stack: Stack
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    assert "No WorkItems yet" in board_text(browser)

    stack.tool(agent_id, "CreateWorkItem", {"objective": "live objective 1"})
    called = time.monotonic()
    wait(browser, within=5.0).until(lambda d: "live objective 1" in board_text(d))
    elapsed = time.monotonic() - called
    print(f"tool call -> visible on the open page: {elapsed * 1000:.0f} ms")
    assert still_same_page(browser), "the page reloaded instead of updating in place"
    assert "work_item_created" in text_of(browser, "[data-live-log]")


def test_a_script_objective_renders_as_text_and_runs_nothing(
    browser: WebDriver, stack: Stack
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    attack = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    stack.tool(
        agent_id,
        "CreateWorkItem",
        {"objective": f"{attack} objective", "plan": attack, "todo_list": [{"text": attack}]},
    )
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    assert text_of(browser, ".work-item .objective") == f"{attack} objective"
    assert attack in text_of(browser, ".todos")
    assert browser.find_elements(By.CSS_SELECTOR, ".board script, .board img") == []
    # A change re-renders the board through the live path: still text, still nothing runs.
    stack.tool(agent_id, "CreateWorkItem", {"objective": f"{attack} second"})
    wait(browser).until(lambda d: f"{attack} second" in board_text(d))
    assert browser.execute_script("return window.__pwned === undefined") is True
    csp = httpx.get(f"{stack.url}/ui/login").headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp


def test_a_form_without_its_csrf_token_is_refused(browser: WebDriver, stack: Stack) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    form = "form[action$='/messages']"
    browser.find_element(By.CSS_SELECTOR, f"{form} textarea[name=text]").send_keys("no token")
    browser.execute_script(f'document.querySelector("{form} input[name=csrf_token]").remove()')
    browser.find_element(By.CSS_SELECTOR, f"{form} button").click()
    wait(browser).until(lambda d: "CSRF" in d.find_element(By.CSS_SELECTOR, "main").text)
    with signed_in_http(browser, stack) as http:
        forged = http.post(
            f"/ui/agents/{agent_id}/messages", data={"text": "x", "csrf_token": "forged"}
        )
        assert forged.status_code == 403
    with stack.api() as api:
        assert api.get(f"/v1/agents/{agent_id}").json()["inbox_pending"] == 0

    # The same form with its token goes through (without JavaScript's help: a plain post).
    open_agent(browser, stack, agent_id)
    browser.find_element(By.CSS_SELECTOR, f"{form} textarea[name=text]").send_keys("with token")
    browser.find_element(By.CSS_SELECTOR, f"{form} button").click()
    wait(browser).until(lambda d: "Message sent." in d.find_element(By.CSS_SELECTOR, "main").text)
    wait(browser).until(lambda d: "with token" in text_of(d, ".inbox"))


def test_an_agent_token_never_opens_the_console(browser: WebDriver, stack: Stack) -> None:
    agent_id = new_agent_id()
    agent_token = stack.create_agent(agent_id)["agent_token"]
    browser.delete_all_cookies()
    sign_in(browser, stack, token=agent_token)
    wait(browser).until(lambda d: "agent tokens never open" in d.page_source)
    assert browser.get_cookie("longrun_session") is None
    bearer = {"Authorization": f"Bearer {agent_token}"}
    for path in ("/ui", f"/ui/agents/{agent_id}", f"/ui/events?agent={agent_id}"):
        answer = httpx.get(f"{stack.url}{path}", headers=bearer, follow_redirects=False)
        assert answer.status_code == 403, path
    # Without any credential the console asks for the operator's sign-in instead.
    anonymous = httpx.get(f"{stack.url}/ui/agents/{agent_id}", follow_redirects=False)
    assert anonymous.status_code == 303
    assert anonymous.headers["location"].startswith("/ui/login")


def test_an_agents_file_creates_agents_from_the_page(browser: WebDriver, stack: Stack) -> None:
    agent_id = new_agent_id()
    sign_in(browser, stack)
    browser.get(f"{stack.url}/ui")
    text = f"- id: {agent_id}\n  loop: external\n  spec:\n    labels: {{team: web}}\n"
    browser.find_element(By.CSS_SELECTOR, "textarea[name=yaml]").send_keys(text)
    browser.find_element(By.CSS_SELECTOR, "form[action='/ui/agents'] button").click()
    wait(browser).until(lambda d: f"created {agent_id}" in d.find_element(By.TAG_NAME, "main").text)
    assert f"{agent_id}~" in browser.find_element(By.CSS_SELECTOR, "code.token").text
    with stack.api() as api:
        answer = api.get(f"/v1/agents/{agent_id}").json()
    assert answer["loop"] == "external"
    assert answer["spec"]["labels"] == {"team": "web"}


def test_a_dropped_live_connection_resumes_without_losing_an_event(
    browser: WebDriver, stack: Stack
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    stack.tool(agent_id, "CreateWorkItem", {"objective": "before the drop"})
    wait(browser).until(lambda d: "before the drop" in board_text(d))

    # The console's ingress dies; changes go on through another ingress meanwhile.
    stack.ingress.kill9()
    other = stack.another_ingress("ingress-other")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{other.port}", timeout=30) as http:
            for n in range(3):
                answer = http.post(
                    f"/v1/agents/{agent_id}/tools/CreateWorkItem",
                    headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                    json={"args": {"objective": f"during the drop {n}"}},
                )
                assert answer.status_code == 200, answer.text
    finally:
        other.stop()
    stack.ingress.start()
    asyncio.run(stack.ingress.wait_ready())
    wait(browser, within=60).until(lambda d: "during the drop 2" in board_text(d))
    stack.tool(agent_id, "CreateWorkItem", {"objective": "after the drop"})
    wait(browser).until(lambda d: "after the drop" in board_text(d))

    assert still_same_page(browser)
    with stack.api() as api:
        history = api.get(f"/v1/agents/{agent_id}/history").json()["events"]
    logged = browser.find_elements(By.CSS_SELECTOR, "[data-live-log] li")
    seen = sorted(int(li.get_attribute("data-seq")) for li in logged)
    rendered_at = min(seen)
    expected = [e["seq"] for e in history if e["seq"] >= rendered_at]
    assert seen == expected, "an event was lost or repeated across the reconnect"
    assert browser.execute_script("return window.longrunLive.opened") >= 2


def test_approving_a_gated_work_item_from_the_page_completes_it(
    browser: WebDriver, stack: Stack
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    gated = stack.tool(
        agent_id,
        "CreateWorkItem",
        {"objective": "ship the release", "acceptance": [{"kind": "operator_approval"}]},
    )["result"]["work_item"]["id"]
    other = stack.tool(agent_id, "CreateWorkItem", {"objective": "tidy the wiki"})
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": gated})
    stack.tool(
        agent_id, "CompleteWorkItem", {"work_item_id": gated}, assistant_text="Release 1.2 is out."
    )
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    card = f"[data-work-item='{gated}']"
    assert "verifying" in text_of(browser, card)
    browser.find_element(By.CSS_SELECTOR, f"{card} form.verdict button[value=true]").click()
    wait(browser).until(lambda d: "Verdict recorded: approved." in text_of(d, "main"))
    wait(browser).until(lambda d: "Release 1.2 is out." in text_of(d, card))
    with stack.api() as api:
        item = api.get(f"/v1/agents/{agent_id}/work-items/{gated}").json()["work_item"]
    assert item["state"] == "completed"
    assert item["outcome"] == "done"
    assert item["result_summary"] == "Release 1.2 is out."

    # Cancel, from the same page, with a reason.
    other_id = other["result"]["work_item"]["id"]
    cancel_form = f"[data-work-item='{other_id}'] form.cancel"
    browser.find_element(By.CSS_SELECTOR, f"{cancel_form} input[name=reason]").send_keys("stale")
    browser.find_element(By.CSS_SELECTOR, f"{cancel_form} button").click()
    wait(browser).until(lambda d: "WorkItem cancelled." in text_of(d, "main"))
    with stack.api() as api:
        cancelled = api.get(f"/v1/agents/{agent_id}/work-items/{other_id}").json()["work_item"]
    assert cancelled["outcome"] == "cancelled"


def test_an_agent_page_screenshot(browser: WebDriver, stack: Stack, tmp_path: Path) -> None:
    """The README's picture of an agent page, taken here (written to docs/ when
    LONGRUN_UPDATE_SCREENSHOT=1, else to a temporary folder): a board with a delegation out,
    a gated item waiting for approval and a completed report."""
    agent_id, reviewer = "docs-writer-" + new_agent_id()[3:], "reviewer-" + new_agent_id()[3:]
    stack.create_agent(agent_id, loop="external", spec={"labels": {"team": "docs"}})
    stack.create_agent(reviewer, loop="external")
    guide = stack.tool(
        agent_id,
        "CreateWorkItem",
        {
            "objective": "Write the operations guide",
            "plan": "# Plan\n1. outline\n2. runbook\n3. review",
            "todo_list": [
                {"text": "outline the chapters", "state": "completed"},
                {"text": "draft the runbook", "state": "completed"},
                {"text": "get the runbook reviewed", "state": "in_progress"},
            ],
        },
    )["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": guide})
    stack.tool(
        agent_id,
        "DelegateWorkItem",
        {"to_agent": reviewer, "objective": "Review the runbook draft", "reason": "second eyes"},
    )
    note = stack.tool(
        agent_id,
        "CreateWorkItem",
        {"objective": "Publish the release note", "acceptance": [{"kind": "operator_approval"}]},
    )["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": note})
    stack.tool(
        agent_id, "CompleteWorkItem", {"work_item_id": note}, assistant_text="Release note drafted."
    )
    done = stack.tool(agent_id, "CreateWorkItem", {"objective": "Summarize last week"})
    done_id = done["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": done_id})
    stack.tool(
        agent_id,
        "CompleteWorkItem",
        {"work_item_id": done_id},
        assistant_text="Last week: three releases, no incidents.",
    )
    stack.tool(agent_id, "CreateWorkItem", {"objective": "Answer the billing question"})
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    tree = text_of(browser, ".delegations")
    assert reviewer in tree
    assert "Review the runbook draft" in tree
    assert "Approve" in text_of(browser, f"[data-work-item='{note}']")
    update = os.environ.get("LONGRUN_UPDATE_SCREENSHOT") == "1"
    target = SCREENSHOT if update else tmp_path / "agent.png"
    browser.set_window_size(1280, 1400)
    try:
        assert browser.save_screenshot(str(target))
    finally:
        browser.set_window_size(1280, 900)
    assert target.stat().st_size > 10_000


def test_the_history_page_pages_the_timeline_and_names_the_first_bad_event(
    browser: WebDriver, stack: Stack, redis_url: str
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    for n in range(HISTORY_PAGE + 5):
        stack.tool(agent_id, "CreateWorkItem", {"objective": f"item {n}"})
    sign_in(browser, stack)
    browser.get(f"{stack.url}/ui/agents/{agent_id}/history")
    assert "Chain verified" in text_of(browser, ".verify")
    items = browser.find_elements(By.CSS_SELECTOR, ".timeline li")
    shown = [int(li.get_attribute("data-seq")) for li in items]
    total = HISTORY_PAGE + 6
    assert shown == list(range(total - HISTORY_PAGE + 1, total + 1))
    browser.find_element(By.LINK_TEXT, "← older").click()
    wait(browser).until(lambda d: "events 1 to " in text_of(d, ".pager"))

    # Someone edits event 3 in Redis: the page says the chain breaks there.
    names = Names(prefix=stack.env["LONGRUN_PREFIX"], partitions=4)
    client = sync_redis.Redis.from_url(redis_url)
    key = names.history(agent_id)
    event = orjson.loads(client.lindex(key, 2))
    event["data"]["work_item"]["objective"] = "rewritten"
    client.lset(key, 2, orjson.dumps(event))
    client.close()
    browser.get(f"{stack.url}/ui/agents/{agent_id}/history")
    assert "first bad index 2" in text_of(browser, ".verify")
