"""Browser fixtures: a real ledger and a real ingress process on a private key prefix, and
Debian's headless Chromium driven by Selenium through /usr/bin/chromedriver. Every test here
is marked `browser` and `e2e`; a machine without Chromium fails them (CI installs it)."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.conftest import ServiceProcess, drop_prefix, service_process, started

OPERATOR_TOKEN = "operator-" + "b" * 32
CHROMIUM = os.environ.get("LONGRUN_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LONGRUN_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
PATIENCE_S = 20.0
"""How long a step may take on a loaded machine before the test says what it waited for."""


@dataclass
class Stack:
    """A ledger and an ingress as processes; `url` is the ingress."""

    ledger: ServiceProcess
    ingress: ServiceProcess
    env: dict[str, str]
    logs: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ingress.port}"

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
            timeout=30,
        )

    def another_ingress(self, name: str) -> ServiceProcess:
        """A second ingress process on the same Redis and prefix, on its own port."""
        log = self.logs / f"{name}.log"
        return started(service_process("services.ingress", self.env, "LONGRUN_HTTP_PORT", log))

    def create_agent(self, agent_id: str, **body: Any) -> dict[str, Any]:
        with self.api() as http:
            answer = http.put(f"/v1/agents/{agent_id}", json=body)
        assert answer.status_code == 201, answer.text
        return dict(answer.json())

    def tool(self, agent_id: str, tool: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
        with self.api() as http:
            answer = http.post(f"/v1/agents/{agent_id}/tools/{tool}", json={"args": args, **extra})
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


@pytest.fixture(scope="module")
def stack(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prefix = "tb" + secrets.token_hex(4)
    logs = tmp_path_factory.mktemp("logs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LONGRUN_")}
    env.update(
        REDIS_URL=redis_url,
        LONGRUN_PREFIX=prefix,
        LONGRUN_PARTITIONS="4",
        LONGRUN_AGENT_HOME=str(tmp_path_factory.mktemp("home")),
        LONGRUN_OPERATOR_TOKEN=OPERATOR_TOKEN,
        LONGRUN_LOG_LEVEL="WARNING",
    )
    ledger = service_process("services.ledger", env, "LONGRUN_LEDGER_PORT", logs / "ledger.log")
    ingress = service_process("services.ingress", env, "LONGRUN_HTTP_PORT", logs / "ingress.log")
    ledger.start()
    ingress.start()
    asyncio.run(ledger.wait_ready())
    asyncio.run(ingress.wait_ready())
    yield Stack(ledger, ingress, env, logs)
    ingress.stop()
    ledger.stop()
    drop_prefix(redis_url, prefix)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    assert not missing, f"install Debian's chromium and chromium-driver packages: {missing}"
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(PATIENCE_S)
    yield driver
    driver.quit()


def sign_in(driver: WebDriver, stack: Stack, token: str = OPERATOR_TOKEN) -> None:
    """Submit the sign-in form and wait until its answer has replaced the page: a `get` issued
    while the form's navigation is still under way races it, and the redirect to /ui can win."""
    driver.get(f"{stack.url}/ui/login")
    driver.find_element(By.NAME, "token").send_keys(token)
    driver.execute_script("window.__before_sign_in = true;")
    driver.find_element(By.CSS_SELECTOR, "form[action='/ui/login'] button").click()
    # A new document has no marker; while the navigation runs the driver may raise anything.
    WebDriverWait(
        driver, PATIENCE_S, poll_frequency=0.05, ignored_exceptions=(WebDriverException,)
    ).until(
        lambda d: d.execute_script(
            "return window.__before_sign_in === undefined && document.readyState === 'complete'"
        )
    )


def wait(driver: WebDriver, within: float = PATIENCE_S) -> WebDriverWait[WebDriver]:
    """Polls until the condition holds. An element found in one call may be gone by the next
    (a live refresh replaced it, or a form's answer replaced the page): that is one more poll,
    not a failure."""
    return WebDriverWait(
        driver, within, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    )


def new_agent_id() -> str:
    return "ui-" + secrets.token_hex(4)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.browser)
