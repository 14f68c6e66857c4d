"""The web console in a real browser: Debian's Chromium, headless, driven through its
chromedriver by Selenium, against the API of a demo-like run (the ``demo`` fixture of
tests/integration/conftest.py). Every page is loaded and its content asserted; each page's
screenshot is saved under build/console-screenshots/ (the test artifacts).

Issue #49 item 5, the console for a team: a member and a viewer sign in with their own tokens
(one browser and one installation for every case), 200-odd requests stored straight into the
demo's Redis (not launched) to filter and page over, the charts checked against the API's
numbers, and every page's browser console read for errors."""

from __future__ import annotations

import hashlib
import hmac
import re
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from selenium.common.exceptions import WebDriverException

from corral.services.state.store import Store
from corral.shared.lifecycle import RequestState
from corral.shared.records import LaunchRequest

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
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors, read back
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
        except WebDriverException:  # stale, or Chrome's "does not belong to the document"
            return console.browser.current_url.endswith(f"/console/requests/{rid}")
        return False

    _until(reloaded, 30, "the page after the cancel")

    def ended() -> bool:
        console.browser.refresh()
        return any(s in console.text_of("#state") for s in ("TERMINATED", "CANCELLED"))

    _until(ended, 60, "the service to be terminated")
    assert demo.system.request(rid)["state"] in {"TERMINATED", "CANCELLED"}
    console.browser.save_screenshot(str(SHOTS / "request-terminated.png"))


# ---- the console for a team (issue #49 item 5) ----------------------------------------------

BULK = {"red": ("mia", 150), "blue": ("ned", 55)}  # project -> (user, requests stored)
ENDED = (RequestState.SUCCEEDED, RequestState.FAILED, RequestState.CANCELLED)


class Team:
    """The demo's installation with two projects, a member and a viewer of ``red``, a real
    request of the member's, and 205 ended requests stored straight into Redis."""

    def __init__(self, demo: Any) -> None:
        self.system = demo.system
        self.tokens: dict[str, str] = {}
        admin = {"Authorization": f"Bearer {self.system.token}"}
        with httpx.Client(base_url=self.system.api_url, timeout=60, headers=admin) as c:
            for project in BULK:
                done = c.post("/v1/projects", json={"name": project})
                assert done.status_code == 201, done.text
            for name, role in (("mia", "member"), ("vic", "viewer"), ("ned", "member")):
                project = "blue" if name == "ned" else "red"
                body = {"name": name, "role": role, "projects": [project]}
                done = c.post("/v1/users", json=body)
                assert done.status_code == 201, done.text
                self.tokens[name] = done.json()["token"]
        # A service holding one GPU: the GPU chart has a bar to check.
        task = {"name": "mia-service", "resources": {"cloud": "local", "accelerators": "L4:1"}}
        member = {"Authorization": f"Bearer {self.tokens['mia']}"}
        with httpx.Client(base_url=self.system.api_url, timeout=60, headers=member) as c:
            done = c.post("/v1/requests", json={"task": task})
            assert done.status_code == 201, done.text
            self.live = str(done.json()["id"])
        store = Store(redis.Redis.from_url(self.system.env["CORRAL_REDIS_URL"]),
                      self.system.env.get("CORRAL_PREFIX", "corral"))  # fmt: skip
        now = time.time()
        self.counts: dict[tuple[str, str], int] = {}
        for project, (user, n) in BULK.items():
            for k in range(n):
                st = ENDED[k % 3]
                req = LaunchRequest(
                    id=f"bulk-{project}-{k:03d}",
                    task={"name": f"{project}-{k:03d}", "run": "true"},
                    state=st, created_at=now - 600 + k, updated_at=now - 600 + k,
                    user=user, project=project,
                )  # fmt: skip
                assert store.create_request(req)
                self.counts[(project, st.value)] = self.counts.get((project, st.value), 0) + 1


@pytest.fixture(scope="module")
def team(demo: Any) -> Team:
    return Team(demo)


def _sign_in(console: Console, token: str, target: str = "/console/requests") -> None:
    """Sign in through the form (after signing whoever was in out)."""
    browser = console.browser
    browser.delete_all_cookies()
    console.open("/console/login?next=" + target, "sign-in")
    browser.find_element("id", "token").send_keys(token)
    browser.find_element("id", "sign-in").click()
    _until(
        lambda: (
            browser.current_url.split("?")[0].endswith(target)
            and browser.execute_script("return document.readyState") == "complete"
            and browser.find_elements("id", "who")
        ),
        30,
        f"the sign-in to {target}",
    )


def _session(console: Console) -> str:
    return str(console.browser.get_cookie("corral_console")["value"])


def test_a_member_signs_in_and_sees_only_its_projects_requests(
    console: Console, team: Team, demo: Any
) -> None:
    _sign_in(console, team.tokens["mia"])
    assert console.text_of("#who") == "mia (member)"
    count = console.text_of("#count")
    assert count.startswith(f"{BULK['red'][1] + 1} requests"), count  # the bulk and its own
    rows = "\n".join(console.rows("requests"))
    assert "mia" in rows and "red" in rows
    assert "blue" not in rows and "ned" not in rows
    assert not any(rid in rows for rid in demo.ids.values())  # the admin's demo requests
    console.open("/console/requests?per=500", "member-requests")
    every = "\n".join(console.rows("requests"))
    assert team.live in every and "bulk-blue" not in every
    body = console.open(f"/console/requests/{demo.ids['web-service']}", "member-not-theirs")
    assert "no launch request" in body  # another's request: 404, as an unknown id


def test_a_viewer_has_no_cancel_or_terminate_and_its_posts_are_refused(
    console: Console, team: Team
) -> None:
    admin = {"Authorization": f"Bearer {team.system.token}"}

    def has_instance() -> bool:
        got = httpx.get(f"{team.system.api_url}/v1/requests/{team.live}", headers=admin)
        return bool(got.json().get("instances"))

    _until(has_instance, 90, "the member's request to have a machine")
    _sign_in(console, team.tokens["vic"], f"/console/requests/{team.live}")
    assert console.text_of("#who") == "vic (viewer)"
    assert console.rows("instances")  # it sees the request and its machine
    assert not console.browser.find_elements("id", "cancel")
    assert not console.browser.find_elements("css selector", "button.terminate")
    # The form key a writer's page would carry, posted from the viewer's own session: refused.
    key = hmac.new(_session(console).encode(), b"corral-console-form", hashlib.sha256)
    answer = console.browser.execute_async_script(
        "var done=arguments[arguments.length-1];"
        "fetch(arguments[0],{method:'POST',credentials:'same-origin',headers:"
        "{'Content-Type':'application/x-www-form-urlencoded'},body:'key='+arguments[1]})"
        ".then(function(r){return r.text().then(function(t){done([r.status,t]);});});",
        f"/console/requests/{team.live}/cancel",
        key.hexdigest(),
    )
    assert answer[0] == 403 and "is a viewer" in answer[1], answer
    got = httpx.get(f"{team.system.api_url}/v1/requests/{team.live}", headers=admin).json()
    assert got["state"] not in {"CANCELLED", "TERMINATED"}


def test_sign_out_ends_the_session_on_the_server(console: Console, team: Team) -> None:
    _sign_in(console, team.tokens["mia"])
    old = _session(console)
    console.browser.find_element("id", "sign-out").click()
    _until(lambda: "/console/login" in console.browser.current_url, 30, "the sign-in page")
    assert console.browser.get_cookie("corral_console") is None
    # The old cookie, put back: the server has ended its session.
    console.browser.add_cookie({"name": "corral_console", "value": old, "path": "/console"})
    console.browser.get(console.base + "/console/requests")
    _until(lambda: console.browser.find_elements("id", "token"), 30, "the sign-in form")
    assert "/console/login" in console.browser.current_url
    with httpx.Client(base_url=team.system.api_url, cookies={"corral_console": old}) as c:
        assert c.get("/console/requests").status_code == 303


def test_filters_sort_and_pages_over_two_hundred_requests(console: Console, team: Team) -> None:
    from selenium.webdriver.support.ui import Select

    _sign_in(console, team.system.token)
    console.open("/console/requests?per=25", "requests-all")
    Select(console.browser.find_element("id", "f-project")).select_by_value("red")
    Select(console.browser.find_element("id", "f-state")).select_by_value("FAILED")
    console.browser.find_element("id", "f-apply").click()
    want = team.counts[("red", "FAILED")]
    _until(lambda: "project=red" in console.browser.current_url, 30, "the filtered page")
    assert console.text_of("#count").startswith(f"{want} requests, page 1 of 2")
    first = console.rows("requests")
    assert len(first) == 25 and all("red" in r and "FAILED" in r for r in first)
    console.browser.find_element("id", "next").click()
    _until(lambda: "page=2" in console.browser.current_url, 30, "page 2")
    second = console.rows("requests")
    assert len(second) == want - 25 and not set(second) & set(first)
    # By user, sorted by name ascending: ned's 55, blue-000 first.
    console.open("/console/requests?user=ned&sort=name&per=100", "requests-ned")
    rows = console.rows("requests")
    assert len(rows) == BULK["blue"][1] and rows[0].startswith("bulk-blue-000")
    assert rows[-1].startswith(f"bulk-blue-{BULK['blue'][1] - 1:03d}")
    # By cost, dearest first, over every request on one page: the cost column never rises.
    admin = {"Authorization": f"Bearer {team.system.token}"}
    started = time.monotonic()
    got = httpx.get(
        f"{team.system.api_url}/console/requests", params={"sort": "-cost", "per": 500},
        headers=admin, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - started
    costs = [float(c.replace(",", "")) for c in re.findall(r"<td>\$([0-9.,]+)</td>", got.text)]
    assert len(costs) >= 3 and costs == sorted(costs, reverse=True), costs
    print(f"requests page, {got.text.count('<tr>') - 1} rows sorted by cost: {took:.2f}s")
    console.open("/console/requests?sort=bogus", "requests-bad-sort")
    assert "422" in console.browser.page_source or "pattern" in console.browser.page_source


def test_the_charts_show_the_numbers_the_api_returns(console: Console, team: Team) -> None:
    _sign_in(console, team.system.token)
    url, admin = team.system.api_url, {"Authorization": f"Bearer {team.system.token}"}
    before = httpx.get(f"{url}/v1/costs", params={"limit": 1000}, headers=admin).json()
    console.open("/console/cost", "cost-charts")
    _until(
        lambda: console.browser.find_elements("css selector", "#spend-chart[data-drawn]"),
        30,
        "the spend chart",
    )
    after = httpx.get(f"{url}/v1/costs", params={"limit": 1000}, headers=admin).json()
    drawn = {
        e.get_attribute("data-project"): float(e.get_attribute("data-value"))
        for e in console.browser.find_elements("css selector", "#spend-chart svg text.series")
    }
    assert set(drawn) == set(after["totals"]["by_project"]) and drawn
    for project, value in drawn.items():  # running machines' spend grows between the reads
        low = before["totals"]["by_project"].get(project, 0.0)
        assert low - 1e-6 <= value <= after["totals"]["by_project"][project] + 1e-6
    _until(
        lambda: console.browser.find_elements("css selector", "#gpus-chart[data-drawn]"),
        30,
        "the GPU chart",
    )
    held = httpx.get(f"{url}/console/charts/gpus.json", headers=admin).json()["held"]
    bars = {
        e.get_attribute("data-where"): int(e.get_attribute("data-value"))
        for e in console.browser.find_elements("css selector", "#gpus-chart svg text.bar")
    }
    assert bars == held and bars.get("cloud local", 0) >= 1, bars  # mia's L4 at least
    assert drawn["red"] > 0  # mia's service has run a while
    console.browser.save_screenshot(str(SHOTS / "cost-charts.png"))


def test_a_page_refreshes_in_place_keeping_its_scroll(console: Console, team: Team) -> None:
    _sign_in(console, team.system.token)
    console.open(f"/console/requests/{team.live}", "request-refresh")
    browser = console.browser
    browser.execute_script("window.__same = 1; window.scrollTo(0, 300);")
    y = browser.execute_script("return window.scrollY")
    _until(lambda: browser.execute_script("return document.body.dataset.refreshed"), 20, "a poll")
    assert browser.execute_script("return window.__same") == 1  # not reloaded
    assert browser.execute_script("return window.scrollY") == y
    shown = browser.find_elements("css selector", "#history time[data-t]")
    assert shown and "UTC" not in shown[0].text  # formatted in the browser's zone


def test_no_page_logs_a_browser_console_error(console: Console, team: Team, demo: Any) -> None:
    _sign_in(console, team.system.token)
    console.browser.get_log("browser")  # what came before
    paths = [
        "/console/", "/console/requests", f"/console/requests/{demo.ids['train-a100']}",
        "/console/instances", "/console/pools", "/console/pools/demo-machine-pool",
        "/console/clusters", "/console/clusters/local-lab", "/console/blocked", "/console/cost",
    ]  # fmt: skip
    errors = []
    for path in paths:
        console.open(path, "errors-" + path.strip("/").replace("/", "-") or "overview")
        time.sleep(0.3)  # the page's first fetches
        errors += [(path, e["message"]) for e in console.browser.get_log("browser")
                   if e["level"] == "SEVERE"]  # fmt: skip
    assert not errors, errors


def test_the_timeline_has_an_axis_and_the_log_tail_a_node_choice_search_and_download(
    console: Console, team: Team, demo: Any
) -> None:
    _sign_in(console, team.system.token)
    rid = demo.ids["train-a100"]
    console.open(f"/console/requests/{rid}", "request-axis-log")
    ticks = console.browser.find_elements("css selector", "#timeline-axis text.tick")
    assert len(ticks) == 6 and ticks[0].text == "+0.0s"
    labels = console.text_of("#timeline-axis")
    assert "lab-east-a" in labels and "capacity" in labels  # each bar labelled with its outcome
    _until(lambda: "training on 8 x A100" in console.text_of("#log"), 30, "the log tail")
    nodes = console.browser.find_elements("css selector", "#log-node option")
    assert len(nodes) >= 2  # every node, then each instance
    console.browser.find_element("id", "log-search").send_keys("8 x A100")
    _until(lambda: "matching lines" in console.text_of("#log-matches"), 10, "the search")
    shown = console.text_of("#log").splitlines()
    assert shown and all("8 x A100" in line for line in shown)
    href = console.browser.find_element("id", "log-download").get_attribute("href")
    admin = {"Authorization": f"Bearer {team.system.token}"}
    got = httpx.get(href, headers=admin)
    assert got.status_code == 200 and "attachment" in got.headers["content-disposition"]
    assert "training on 8 x A100" in got.text


# ---- the request page from JSON, utilisation, the job queue (issue #49) ----------------------


def _api(system: Any, path: str, method: str = "GET", **kw: Any) -> Any:
    admin = {"Authorization": f"Bearer {system.token}"}
    got = httpx.request(method, system.api_url + path, headers=admin, timeout=30, **kw)
    assert got.status_code < 300, got.text
    return got.json()


def test_the_request_page_refreshes_its_state_from_json_in_place(
    console: Console, team: Team, tmp_path: Path
) -> None:
    """A job's page open while it runs: its state, its job queue and its history change in
    the page as the job ends, from /console/requests/ID/live.json (the page itself is not
    fetched again), without a reload and with the scroll where the reader left it."""
    system, flag = team.system, tmp_path / "go.flag"
    task = {
        "name": "console-live",
        "resources": {"cloud": "local", "instance_type": "cpu-2"},
        "run": f"while [ ! -f {flag} ]; do sleep 0.1; done; echo done",
    }
    rid = system.submit(task)
    system.wait_state(rid, {"RUNNING"}, 90)
    _sign_in(console, system.token)
    console.open(f"/console/requests/{rid}", "request-live-running")
    browser = console.browser
    assert console.text_of("#state-value") == "RUNNING"
    queued = _api(system, f"/v1/requests/{rid}/jobs", "POST", json={"run": "exit 0", "name": "j2"})
    browser.execute_script("window.__same = 1; window.scrollTo(0, 400);")
    y = browser.execute_script("return window.scrollY")
    assert y > 0  # the page is long enough to scroll: keeping it means something
    _until(lambda: len(console.rows("jobs")) == 2, 30, "job 2 in the page's queue")
    assert "j2" in console.rows("jobs")[1] and "PENDING" in console.rows("jobs")[1]
    flag.touch()
    _until(lambda: console.text_of("#state-value") == "SUCCEEDED", 60, "the state in place")
    _until(lambda: "SUCCEEDED" in console.rows("jobs")[1], 30, "job 2's end in place")
    assert queued["id"] == 2
    assert browser.execute_script("return window.__same") == 1  # never reloaded
    assert browser.execute_script("return window.scrollY") == y
    assert any("SUCCEEDED" in r for r in console.rows("history"))
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(function(e){return e.name;})"
    )
    page = f"/console/requests/{rid}"
    assert any(u.endswith(page + "/live.json") for u in fetched), fetched
    assert not [u for u in fetched if u.split("?")[0].endswith(page)]  # not the HTML again
    browser.save_screenshot(str(SHOTS / "request-live-ended.png"))


def test_each_nodes_utilisation_in_the_page_is_the_apis(console: Console, team: Team) -> None:
    """The request page's per-node CPU and memory are the numbers GET /v1/requests/ID/usage
    returned for the same heartbeat (``at``): the test records what the API says while the
    page refreshes, then finds the page's numbers among them. The cluster and pool pages
    show their nodes' numbers as bars too."""
    system = team.system
    _sign_in(console, system.token)
    rid = team.live  # mia's service, running
    console.open(f"/console/requests/{rid}", "request-usage")
    seen: dict[tuple[str, float], dict[str, Any]] = {}

    def page_matches_api() -> bool:
        for node in _api(system, f"/v1/requests/{rid}/usage")["nodes"]:
            if "at" in node:
                seen[(node["instance_id"], float(node["at"]))] = node
        rows = console.browser.find_elements("css selector", "#usage tbody tr[data-at]")
        for row in rows:
            at = row.get_attribute("data-at")
            api = seen.get((str(row.get_attribute("data-instance")), float(at or 0)))
            if api is None:
                return False
            for field in ("cpu_percent", "mem_percent"):
                cell = row.find_element("css selector", f'td[data-field="{field}"]')
                shown = cell.get_attribute("data-value")
                if field in api and float(shown or "nan") != api[field]:
                    pytest.fail(f"{field}: the page shows {shown}, the API said {api[field]}")
                if field in api:
                    assert cell.text == f"{api[field]:.1f}%"
        return bool(rows)

    _until(page_matches_api, 60, "the page's numbers among the API's")
    assert any("mem_percent" in n for n in seen.values())
    console.open("/console/clusters/local-lab", "cluster-usage")
    assert console.browser.find_elements("css selector", "#nodes .bar")
    nodes = _api(system, "/v1/clusters/local-lab")["nodes"]
    assert any("cpu_percent" in n for n in nodes), nodes
    console.open("/console/pools/demo-machine-pool", "pool-usage")
    machines = _api(system, "/v1/pools/demo-machine-pool")["machines"]
    if any("mem_percent" in m for m in machines):
        assert console.browser.find_elements("css selector", ".bar")
