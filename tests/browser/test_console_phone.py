"""The console at a phone's width (390 x 844, as an iPhone 14 shows it): no page scrolls
sideways; wide tables scroll inside their own box and everything else reflows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.conftest import Stack, new_agent_id, sign_in, wait

PHONE = (390, 844)
LONG_WORD = "x" * 300
"""A word no line can hold: agents write paths, ids and JSON without spaces."""


@pytest.fixture
def phone(browser: WebDriver) -> Iterator[WebDriver]:
    size = browser.get_window_size()
    browser.set_window_size(*PHONE)
    try:
        yield browser
    finally:
        browser.set_window_size(size["width"], size["height"])


def overflow(driver: WebDriver) -> tuple[int, int, list[str]]:
    """The page body's scroll width, the viewport's width, and the elements that stick out
    past its right edge (for the failure message)."""
    answer = driver.execute_script(
        """
        const width = window.innerWidth;
        const wide = [];
        for (const el of document.querySelectorAll('body *')) {
          const box = el.getBoundingClientRect();
          if (box.right > width + 0.5 && !el.closest('.table-wrap, pre')) {
            wide.push(el.tagName.toLowerCase() + '.' + el.className + ' ' + Math.round(box.right));
          }
        }
        return [document.scrollingElement.scrollWidth, width, wide.slice(0, 8)];
        """
    )
    return int(answer[0]), int(answer[1]), list(answer[2])


def busy_agent(stack: Stack) -> tuple[str, str]:
    """An agent with a bit of everything a page shows, long unbroken words included."""
    agent_id, child = new_agent_id(), new_agent_id()
    stack.create_agent(agent_id, loop="external", spec={"labels": {"team": LONG_WORD[:40]}})
    stack.create_agent(child, loop="external")
    item = stack.tool(
        agent_id,
        "CreateWorkItem",
        {
            "objective": f"Check {LONG_WORD}",
            "plan": f"# Plan\n{LONG_WORD}",
            "todo_list": [{"text": LONG_WORD}],
            "acceptance": [{"kind": "operator_approval"}],
        },
    )["result"]["work_item"]["id"]
    stack.tool(agent_id, "PickWorkItem", {"work_item_id": item})
    stack.tool(
        agent_id,
        "DelegateWorkItem",
        {"to_agent": child, "objective": f"Review {LONG_WORD}", "reason": LONG_WORD},
    )
    stack.tool(
        agent_id,
        "UpdateWorkItem",
        {"work_item_id": item, "blocked_by": LONG_WORD},
    )
    with stack.api() as api:
        sent = api.post(f"/v1/agents/{agent_id}/messages", json={"text": LONG_WORD})
        assert sent.status_code in (200, 201, 202), sent.text
    return agent_id, item


def test_no_console_page_scrolls_sideways_at_a_phone_width(phone: WebDriver, stack: Stack) -> None:
    agent_id, item = busy_agent(stack)
    sign_in(phone, stack)
    pages = [
        "/ui",
        f"/ui/agents/{agent_id}",
        f"/ui/agents/{agent_id}/work-items/{item}",
        f"/ui/agents/{agent_id}/history",
        "/ui/login",
    ]
    for path in pages:
        phone.get(f"{stack.url}{path}")
        wait(phone).until(lambda d: d.execute_script("return document.readyState") == "complete")
        scroll, width, wide = overflow(phone)
        assert width <= PHONE[0], (path, width)
        assert scroll <= width, f"{path} scrolls sideways: {scroll} > {width}: {wide}"
