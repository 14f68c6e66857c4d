"""The web console in a real browser: Debian's Chromium, headless, driven through its
chromedriver by Selenium, against the API of a demo-like run (the ``demo`` fixture of
tests/integration/conftest.py). Every page is loaded and its content asserted; each page's
screenshot is saved under build/console-screenshots/ (the test artifacts)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "console-screenshots"


def _until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.25)


def _start_chromium() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail("chromium and chromedriver are not installed; run `make setup`")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(arg)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.set_page_load_timeout(60)
    return chrome


@pytest.fixture(scope="module", autouse=True)
def _chromium() -> Iterator[Future[Any]]:
    """Chromium, started in a thread as the module begins (autouse: before the ``demo``
    fixture), so it comes up while the demo's installation does: selenium's import and the
    browser's start are seconds of the module, the demo's start mostly a wait on its requests."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(_start_chromium)
        try:
            yield starting
        finally:
            if starting.exception() is None:
                starting.result().quit()


@pytest.fixture(scope="module")
def browser(_chromium: Future[Any]) -> Any:
    return _chromium.result(timeout=120)


class Console:
    """The browser on one demo's console, signed in."""

    def __init__(self, browser: Any, base: str) -> None:
        self.browser, self.base = browser, base

    def open(self, path: str, shot: str) -> str:
        """The page at ``path``, once the browser shows it (its URL and a loaded document:
        a page read a moment early is the one before it)."""
        url = self.base + path

        def shown() -> bool:
            return bool(
                self.browser.current_url == url
                and self.browser.execute_script("return document.readyState") == "complete"
            )

        # A navigation can be dropped (the browser stays where it was: one still finishing
        # supersedes it): asked again every 2 s, up to ten times, before the page is said not
        # to load. (Once asked again after 20 s, that wait was a third of this module's time.)
        for _ in range(10):
            self.browser.get(url)
            deadline = time.monotonic() + 2
            while not shown() and time.monotonic() < deadline:
                time.sleep(0.25)
            if shown():
                break
        else:
            pytest.fail(
                f"{path} did not load: the browser shows {self.browser.current_url} "
                f"({self.browser.execute_script('return document.readyState')})"
            )
        self.browser.save_screenshot(str(SHOTS / f"{shot}.png"))
        return str(self.browser.find_element("tag name", "body").text)

    def text_of(self, css: str) -> str:
        return str(self.browser.find_element("css selector", css).text)

    def rows(self, table_id: str) -> list[str]:
        found = self.browser.find_elements("css selector", f"#{table_id} tbody tr")
        return [str(r.text) for r in found]


@pytest.fixture(scope="module")
def console(demo: Any, browser: Any) -> Console:
    system = demo.system
    browser.get(system.api_url + "/console/requests")
    assert "/console/login" in browser.current_url  # not signed in: to the sign-in page
    browser.find_element("id", "token").send_keys("not-the-token")
    browser.find_element("id", "sign-in").click()
    # The form posts and the browser loads the answer: on a loaded machine the old page is
    # still shown for a moment, so the refusal is waited for rather than read at once.
    failed = _until(lambda: browser.find_elements("id", "failed"), 30, "the refusal")
    assert failed[0].text.startswith("That token was not")
    browser.find_element("id", "token").send_keys(system.token)
    browser.find_element("id", "sign-in").click()
    # Until the requests page has loaded, not only its address: a navigation asked for while
    # the sign-in's is still loading is dropped (the first page a test opened then waited out).
    _until(
        lambda: (
            browser.current_url.endswith("/console/requests")
            and browser.execute_script("return document.readyState") == "complete"
            and browser.find_elements("id", "requests")
        ),
        30,
        "the sign-in",
    )
    return Console(browser, system.api_url)


def test_without_the_token_nothing_is_shown(demo: Any) -> None:
    url = demo.system.api_url
    page = httpx.get(f"{url}/console/requests", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/console/login")
    log = httpx.get(f"{url}/console/requests/{demo.ids['hello-job']}/log.txt")
    assert log.status_code == 303
    post = httpx.post(f"{url}/console/requests/{demo.ids['web-service']}/cancel", data={"key": ""})
    assert post.status_code == 303  # to the sign-in page, nothing cancelled
    headers = {"Authorization": f"Bearer {demo.system.token}"}
    forged = httpx.post(
        f"{url}/console/requests/{demo.ids['web-service']}/cancel",
        data={"key": "forged"},
        headers=headers,
    )
    assert forged.status_code == 403


def test_overview_and_requests(console: Console, demo: Any) -> None:
    body = console.open("/console/", "overview")
    assert "Requests by state" in body
    assert any(r.startswith("SUCCEEDED") for r in console.rows("by-state"))
    assert "live instance" in console.text_of("#summary")
    console.open("/console/requests", "requests")
    rows = "\n".join(console.rows("requests"))
    for name, rid in demo.ids.items():
        assert rid in rows and name in rows


def test_a_request_shows_its_failovers_on_a_timeline_runs_cost_and_log_tail(
    console: Console, demo: Any
) -> None:
    rid = demo.ids["train-a100"]
    body = console.open(f"/console/requests/{rid}", "request-failover")
    assert f"Request {rid}" in body
    attempts = console.rows("attempts")
    assert len(attempts) >= 3, attempts  # sold out, over quota, then the next region
    assert "capacity" in attempts[0] and "lab-east-a" in attempts[0]
    assert "quota" in attempts[1]
    assert "ok" in attempts[-1] and "lab-west" in attempts[-1]
    bars = console.browser.find_elements("css selector", "#timeline .tl span")
    assert len(bars) == len(attempts)
    assert console.text_of("#cost").startswith("Cost over every run: $")
    assert console.rows("runs") and "lab-west" in console.rows("runs")[0]
    assert "Why:" in console.text_of("#why")
    _until(lambda: "training on 8 x A100" in console.text_of("#log"), 30, "the log tail")
    console.browser.save_screenshot(str(SHOTS / "request-failover.png"))


def test_instances_pools_clusters_blocked_and_cost(console: Console, demo: Any) -> None:
    console.open("/console/instances", "instances")
    assert any("RUNNING" in r and "cpu-4" in r for r in console.rows("instances"))
    body = console.open("/console/pools", "pools")
    assert "demo-machine-pool" in body and "determined" in body
    assert "reserved-a100" in body  # a machine type with its partitions
    assert "partition" in body.lower()
    console.open("/console/clusters", "clusters")
    assert [r for r in console.rows("clusters") if r.startswith("local-lab")]
    body = console.open("/console/clusters/local-lab", "cluster")
    assert len(console.rows("nodes")) >= 2
    assert "The autoscaler's last decision" in body
    body = console.open("/console/blocked", "blocked")
    blocked = "\n".join(console.rows("blocked"))
    assert "lab-east" in blocked, blocked  # the A100 job's failures block their scopes
    console.open("/console/cost", "cost")
    cost = console.rows("cost")
    assert any(r.startswith("local on_demand") for r in cost), cost
    assert cost[-1].startswith("total") and "$" in cost[-1]


def test_cancel_from_the_console(console: Console, demo: Any) -> None:
    rid = demo.ids["web-service"]
    console.open(f"/console/requests/{rid}", "request-running")
    button = console.browser.find_element("id", "cancel")
    button.click()

    def reloaded() -> bool:  # the post answered with the request's page again
        try:
            button.is_enabled()
        except StaleElementReferenceException:
            return console.browser.current_url.endswith(f"/console/requests/{rid}")
        return False

    _until(reloaded, 30, "the page after the cancel")

    def ended() -> bool:
        console.browser.refresh()
        return any(s in console.text_of("#state") for s in ("TERMINATED", "CANCELLED"))

    _until(ended, 60, "the service to be terminated")
    assert demo.system.request(rid)["state"] in {"TERMINATED", "CANCELLED"}
    console.browser.save_screenshot(str(SHOTS / "request-terminated.png"))
