"""The console's actions in a real browser: putting the current WorkItem down from its card,
pausing, resuming and retiring the agent from its Control card, and every form the pages render
refused without its CSRF token (or with a forged one)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.conftest import Stack, new_agent_id, sign_in, wait
from tests.browser.test_console import open_agent, signed_in_http, text_of

FORMS_JS = """
return Array.from(document.querySelectorAll("form[method=post]")).map(form => {
  const fields = Array.from(new FormData(form).entries()).map(([k, v]) => [k, v || "probe"]);
  for (const button of form.querySelectorAll("button[name]")) {
    fields.push([button.name, button.value]);
  }
  return [form.getAttribute("action"), fields];
});
"""
"""Every posting form on the page with the fields a submit would send (blank ones filled in, a
named button's value added), so each post is refused for its token and nothing else."""
FORM = {"content-type": "application/x-www-form-urlencoded"}


def current_item(stack: Stack, agent_id: str) -> str | None:
    with stack.api() as api:
        answer = api.get(f"/v1/agents/{agent_id}").json()
    current = answer["current_work_item_id"]
    return str(current) if current else None


def history_types(stack: Stack, agent_id: str) -> list[str]:
    with stack.api() as api:
        events = api.get(f"/v1/agents/{agent_id}/history").json()["events"]
    return [str(e["type"]) for e in events]


def test_putting_the_current_work_item_down_from_the_page_releases_focus(
    browser: WebDriver, stack: Stack
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    picked = stack.tool(agent_id, "CreateWorkItem", {"objective": "draft the memo"})
    picked_id = picked["result"]["work_item"]["id"]
    queued = stack.tool(agent_id, "CreateWorkItem", {"objective": "file the receipts"})
    queued_id = queued["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": picked_id})
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    card = f"[data-work-item='{picked_id}']"
    assert "current" in text_of(browser, f"{card} .meta")
    # Only the current WorkItem can be put down: the other card has no such form.
    assert not browser.find_elements(By.CSS_SELECTOR, f"[data-work-item='{queued_id}'] .put-down")

    form = f"{card} form.put-down"
    # Without a reason it is refused and the item keeps the focus.
    csrf = browser.find_element(By.CSS_SELECTOR, f"{form} input[name=csrf_token]")
    with signed_in_http(browser, stack) as http:
        blank = http.post(
            f"/ui/agents/{agent_id}/work-items/{picked_id}/put-down",
            data={"csrf_token": str(csrf.get_attribute("value")), "reason": "  "},
        )
    assert (blank.status_code, "reason field" in blank.text) == (400, True)
    assert current_item(stack, agent_id) == picked_id
    browser.find_element(By.CSS_SELECTOR, f"{form} input[name=reason]").send_keys("org edit")
    browser.find_element(By.CSS_SELECTOR, f"{form} button").click()
    wait(browser).until(lambda d: "WorkItem put down" in text_of(d, "main"))

    assert current_item(stack, agent_id) is None
    assert "current" not in text_of(browser, f"{card} .meta")
    assert not browser.find_elements(By.CSS_SELECTOR, ".put-down")
    with stack.api() as api:
        events = api.get(f"/v1/agents/{agent_id}/history").json()["events"]
        item = api.get(f"/v1/agents/{agent_id}/work-items/{picked_id}").json()["work_item"]
    released = [e["data"] for e in events if e["type"] == "work_item_focus_released"]
    assert released == [{"cause": "put_down", "reason": "org edit"}]
    assert (item["state"], item["outcome"]) == ("open", None)


def _post_every_form(browser: WebDriver, stack: Stack, page: str) -> list[str]:
    """Posts each form of the page without its token and with a forged one; the actions."""
    browser.get(f"{stack.url}{page}")
    forms: list[tuple[str, list[list[Any]]]] = browser.execute_script(FORMS_JS)
    with signed_in_http(browser, stack) as http:
        for action, fields in forms:
            assert ["csrf_token"] in [field[:1] for field in fields], f"{action} has no token"
            bare = [(k, v) for k, v in fields if k != "csrf_token"]
            forged = [*bare, ("csrf_token", "forged")]
            for data in (bare, forged):
                # Encoded by hand: a form left with no field still posts as a form.
                answer = http.post(action, content=urlencode(data), headers=FORM)
                assert answer.status_code == 403, (action, answer.status_code)
                assert "CSRF" in answer.text
    return [action for action, _ in forms]


def test_every_form_without_its_csrf_token_is_refused_and_changes_nothing(
    browser: WebDriver, stack: Stack
) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    gated = stack.tool(
        agent_id,
        "CreateWorkItem",
        {"objective": "ship it", "acceptance": [{"kind": "operator_approval"}]},
    )["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": gated})
    stack.tool(agent_id, "CompleteWorkItem", {"work_item_id": gated}, assistant_text="done")
    current = stack.tool(agent_id, "CreateWorkItem", {"objective": "next thing"})
    current_id = current["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": current_id})
    before = history_types(stack, agent_id)
    sign_in(browser, stack)

    posted = _post_every_form(browser, stack, f"/ui/agents/{agent_id}")
    posted += _post_every_form(browser, stack, "/ui")
    base = f"/ui/agents/{agent_id}"
    for action in (
        f"{base}/messages",
        f"{base}/work-items/{gated}/verdict",
        f"{base}/work-items/{gated}/cancel",
        f"{base}/work-items/{current_id}/put-down",
        f"{base}/work-items/{current_id}/cancel",
        f"{base}/pause",
        f"{base}/retire",
        "/ui/agents",
        "/ui/logout",
    ):
        assert action in posted, f"the page lost its {action} form"

    assert history_types(stack, agent_id) == before
    assert current_item(stack, agent_id) == current_id
    with stack.api() as api:
        assert api.get(f"/v1/agents/{agent_id}").json()["inbox_pending"] == 0
    # The refused sign-out left the session alone.
    browser.get(f"{stack.url}/ui/agents/{agent_id}")
    assert browser.find_elements(By.CSS_SELECTOR, "form.signout")


def posture_of(stack: Stack, agent_id: str) -> str:
    with stack.api() as api:
        return str(api.get(f"/v1/agents/{agent_id}").json()["posture"])


def test_pause_resume_and_retire_from_the_control_card(browser: WebDriver, stack: Stack) -> None:
    agent_id = new_agent_id()
    stack.create_agent(agent_id, loop="external")
    item = stack.tool(agent_id, "CreateWorkItem", {"objective": "old work"})
    item_id = item["result"]["work_item"]["id"]
    sign_in(browser, stack)
    open_agent(browser, stack, agent_id)
    # A pause without a reason is refused and changes nothing.
    csrf = browser.find_element(By.CSS_SELECTOR, "form.pause input[name=csrf_token]")
    with signed_in_http(browser, stack) as http:
        blank = http.post(
            f"/ui/agents/{agent_id}/pause",
            data={"csrf_token": str(csrf.get_attribute("value")), "reason": " "},
        )
    assert (blank.status_code, "reason field" in blank.text) == (400, True)
    assert posture_of(stack, agent_id) != "paused"

    browser.find_element(By.CSS_SELECTOR, "form.pause input[name=reason]").send_keys("audit")
    browser.find_element(By.CSS_SELECTOR, "form.pause button").click()
    wait(browser).until(lambda d: "Agent paused" in text_of(d, "main"))
    assert posture_of(stack, agent_id) == "paused"
    assert "paused" in text_of(browser, ".why")
    browser.find_element(By.CSS_SELECTOR, "form.resume button").click()
    wait(browser).until(lambda d: "Agent resumed" in text_of(d, "main"))
    assert posture_of(stack, agent_id) != "paused"

    browser.find_element(By.CSS_SELECTOR, "form.retire input[name=reason]").send_keys("gone")
    browser.find_element(By.CSS_SELECTOR, "form.retire button").click()
    wait(browser).until(lambda d: "Agent retired" in text_of(d, "main"))
    assert posture_of(stack, agent_id) == "stopped"
    assert not browser.find_elements(By.CSS_SELECTOR, "form.pause, form.retire")
    with stack.api() as api:
        seen = api.get(f"/v1/agents/{agent_id}/work-items/{item_id}").json()["work_item"]
    assert seen["outcome"] == "cancelled"
    assert history_types(stack, agent_id).count("agent_retired") == 1
