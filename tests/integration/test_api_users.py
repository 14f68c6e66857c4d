"""Users, roles, projects and quotas against a real installation: redis-server, the API
process and a scheduling worker (tests/harness.py), driven through HTTP and the `corral` CLI.

What issue #27 item 12 must show: a member's token cannot read, list or cancel another
project's request (404, as an unknown id); a viewer cannot submit or cancel (403); an admin
sees all; a quota refusal shows in `why` (the CLI's and the API's); a revoked token stops
working. A direct request is admitted on its cloud's provisioning queue (the task that admits
it runs its first attempt), so a provisioning worker runs beside the scheduling worker and
admitted requests launch on the local cloud; quotas are checked at admission."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from harness import CORRAL, LOCAL_ONLY, System, kill_agents, wait_for

pytestmark = pytest.mark.integration

LOCAL_CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "runtime.yaml"
CPU_TASK = {
    "name": "cpu-job",
    "resources": {"cloud": "local", "instance_type": "cpu-2"},
    "run": "sleep 30",
}
# A cancel ends a request CANCELLED before it runs, TERMINATED once it does.
ENDED_BY_USER = {"CANCELLED", "TERMINATED"}
GPU_TASK = {
    "name": "gpu-job",
    "resources": {"cloud": "local", "accelerators": "A100:8"},
    "run": "sleep 120",  # holds its 8 GPUs until cancelled
}


class Installation:
    """The system, its admin's client and the users the module made (name -> token)."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.tokens: dict[str, str] = {}

    def http(self, token: str | None = None) -> httpx.Client:
        bearer = token if token is not None else self.system.token
        return httpx.Client(
            base_url=self.system.api_url, timeout=60, headers={"Authorization": f"Bearer {bearer}"}
        )

    def cli(self, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**self.system.env, "CORRAL_API_URL": self.system.api_url}
        if token is not None:
            env["CORRAL_API_TOKEN"] = token
        return subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=120)

    def submit(self, token: str, task: dict[str, Any], project: str | None = None) -> str:
        params = {"project": project} if project else {}
        with self.http(token) as c:
            resp = c.post("/v1/requests", json={"task": task}, params=params)
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def state(self, request_id: str) -> str:
        with self.http() as c:
            return str(c.get(f"/v1/requests/{request_id}").json()["state"])

    def wait_state(self, request_id: str, states: set[str], timeout_s: float = 60) -> None:
        wait_for(lambda: self.state(request_id) in states, timeout_s, f"{request_id} in {states}")


@pytest.fixture(scope="module")
def corral(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installation]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("users-home")
    system = System(home, redis_server.url, LOCAL_CLOUD, LOCAL_ONLY)
    try:
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        inst = Installation(system)
        # The module's projects and users through the API the CLI calls: six `corral` processes
        # were most of this fixture's seconds. The CLI's own `projects add` and `users add`
        # (and their --json) are run by the tests that add gamma, delta, erin, fred and gina.
        with inst.http() as c:
            for project in ("alpha", "beta"):
                done = c.post("/v1/projects", json={"name": project})
                assert done.status_code == 201, done.text
            for name, role, projects in (
                ("alice", "member", ["alpha"]),
                ("bob", "member", ["beta"]),
                ("carol", "viewer", ["alpha"]),
                ("dave", "member", ["alpha", "beta"]),
            ):
                body = {"name": name, "role": role, "projects": projects}
                done = c.post("/v1/users", json=body)
                assert done.status_code == 201, done.text
                inst.tokens[name] = done.json()["token"]
        yield inst
    finally:
        system.stop(grace_s=0)
        kill_agents(system)


def test_a_members_token_cannot_read_list_or_cancel_another_projects_request(
    corral: Installation,
) -> None:
    alice, bob = corral.tokens["alice"], corral.tokens["bob"]
    rid = corral.submit(alice, CPU_TASK)
    with corral.http(alice) as c:
        mine = c.get(f"/v1/requests/{rid}").json()
    assert (mine["user"], mine["project"]) == ("alice", "alpha")
    with corral.http(bob) as c:
        unknown = c.get("/v1/requests/r-does-not-exist")
        assert unknown.status_code == 404
        for method, path in (
            ("GET", f"/v1/requests/{rid}"),
            ("GET", f"/v1/requests/{rid}/events"),
            ("GET", f"/v1/requests/{rid}/logs"),
            ("GET", f"/v1/requests/{rid}/logs/since"),
            ("GET", f"/v1/requests/{rid}/why"),
            ("POST", f"/v1/requests/{rid}/cancel"),
            ("POST", f"/v1/requests/{rid}/terminate"),
            ("POST", f"/v1/requests/{rid}/exec"),
            ("POST", f"/v1/requests/{rid}/sessions"),
        ):
            body = {"command": "id"} if path.endswith("/exec") else None
            body = {"kind": "shell"} if path.endswith("/sessions") else body
            resp = c.request(method, path, json=body)
            assert resp.status_code == 404, (method, path, resp.status_code, resp.text)
            # The same answer as for an id that does not exist: nothing says it does.
            assert resp.json()["detail"] == unknown.json()["detail"].replace(
                "r-does-not-exist", rid
            ), (method, path)
        listed = c.get("/v1/requests").json()["requests"]
        assert rid not in {r["id"] for r in listed}
        assert c.get("/v1/requests", params={"project": "alpha"}).json()["requests"] == []
    # The CLI says the same to bob, and alice's request was not touched.
    shown = corral.cli("status", rid, token=bob)
    assert shown.returncode == 2 and "no launch request" in shown.stderr
    assert corral.cli("terminate", rid, token=bob).returncode == 2
    assert corral.state(rid) not in ENDED_BY_USER
    # Alice sees and cancels her own.
    listed = json.loads(corral.cli("status", "--json", token=alice).stdout)["requests"]
    assert rid in {r["id"] for r in listed}
    with corral.http(alice) as c:
        assert c.post(f"/v1/requests/{rid}/cancel").status_code == 200
    corral.wait_state(rid, ENDED_BY_USER)


def test_a_viewer_reads_its_project_but_cannot_submit_or_cancel(corral: Installation) -> None:
    rid = corral.submit(corral.tokens["alice"], CPU_TASK)
    with corral.http(corral.tokens["carol"]) as c:
        assert c.get(f"/v1/requests/{rid}").status_code == 200
        assert c.post("/v1/requests", json={"task": CPU_TASK}).status_code == 403
        assert c.post(f"/v1/requests/{rid}/cancel").status_code == 403
        assert c.post(f"/v1/requests/{rid}/terminate").status_code == 403
        assert c.post(f"/v1/requests/{rid}/sessions", json={"kind": "shell"}).status_code == 403
        assert c.get("/v1/users").status_code == 403
    done = corral.cli(
        "launch", "-d", str(_task_file(corral, CPU_TASK)), token=corral.tokens["carol"]
    )
    assert done.returncode == 2 and "viewer" in done.stderr
    assert corral.state(rid) not in ENDED_BY_USER
    with corral.http() as c:
        c.post(f"/v1/requests/{rid}/cancel")


def test_an_admin_sees_every_project_and_a_member_only_its_own(corral: Installation) -> None:
    a = corral.submit(corral.tokens["alice"], CPU_TASK)
    b = corral.submit(corral.tokens["bob"], CPU_TASK)
    with corral.http() as c:
        listed = {r["id"]: r["project"] for r in c.get("/v1/requests").json()["requests"]}
        assert listed[a] == "alpha" and listed[b] == "beta"
        assert c.get(f"/v1/requests/{b}").status_code == 200
        only_beta = c.get("/v1/requests", params={"project": "beta"}).json()["requests"]
        assert {r["project"] for r in only_beta} == {"beta"}
    shown = corral.cli("status", "--project", "beta", "--json")
    assert {r["project"] for r in json.loads(shown.stdout)["requests"]} == {"beta"}
    with corral.http() as c:
        projects = {p["name"] for p in c.get("/v1/projects").json()["projects"]}
        assert {"alpha", "beta"} <= projects
    with corral.http(corral.tokens["bob"]) as c:
        assert {r["project"] for r in c.get("/v1/requests").json()["requests"]} == {"beta"}
        assert [p["name"] for p in c.get("/v1/projects").json()["projects"]] == ["beta"]
        # Not its project: refused before anything is stored; a member of one needs no name.
        assert c.post("/v1/requests?project=alpha", json={"task": CPU_TASK}).status_code == 403
        assert c.get("/v1/whoami").json() == {"name": "bob", "role": "member", "projects": ["beta"]}
    with corral.http(corral.tokens["dave"]) as c:  # two projects: it must name one
        resp = c.post("/v1/requests", json={"task": CPU_TASK})
        assert resp.status_code == 422 and "name one" in resp.text
    with corral.http() as c:
        for rid in (a, b):
            c.post(f"/v1/requests/{rid}/cancel")


def test_idempotency_keys_are_kept_per_project(corral: Installation) -> None:
    key = {"Idempotency-Key": "same-key"}
    with corral.http(corral.tokens["alice"]) as c:
        first = c.post("/v1/requests", json={"task": CPU_TASK}, headers=key).json()["id"]
    with corral.http(corral.tokens["bob"]) as c:
        other = c.post("/v1/requests", json={"task": CPU_TASK}, headers=key)
        assert other.status_code == 201 and other.json()["id"] != first
        assert c.get("/v1/submissions/same-key").json()["request_id"] == other.json()["id"]
    with corral.http() as c:
        for rid in (first, other.json()["id"]):
            c.post(f"/v1/requests/{rid}/cancel")


def test_a_gpu_quota_refusal_shows_in_why_from_the_cli_and_the_api(
    corral: Installation, tmp_path: Path
) -> None:
    done = corral.cli("projects", "add", "gamma", "--gpus", "8", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["quota"]["gpus"] == 8
    done = corral.cli("users", "add", "erin", "--project", "gamma", "--json")
    erin = json.loads(done.stdout)["token"]
    task = _task_file(corral, GPU_TASK)
    first = json.loads(corral.cli("launch", "-d", "--json", str(task), token=erin).stdout)["id"]
    # Admitted: its 8 GPUs count from now on (and it holds them, booting or running).
    corral.wait_state(first, {"PROVISIONING", "RUNNING"})
    second = json.loads(corral.cli("launch", "-d", "--json", str(task), token=erin).stdout)["id"]
    corral.wait_state(second, {"FAILED"})
    with corral.http(erin) as c:
        why = c.get(f"/v1/requests/{second}/why").json()
    assert why["code"] == "over_quota"
    assert why["quota"] == {
        "project": "gamma",
        "quota": "gpus",
        "limit": 8,
        "in_use": 8,
        "asked": 8,
        "reason": "project 'gamma' is over its quota gpus: 8 in use + 8 asked > 8 allowed at once",
    }
    shown = corral.cli("why", second, token=erin)
    assert shown.returncode == 0, shown.stderr
    assert (
        "over its quota gpus: 8 in use + 8 asked > 8 allowed at once (over_quota)" in shown.stdout
    )
    listed = json.loads(corral.cli("projects", "list", "--json").stdout)
    gamma = next(p for p in listed["projects"] if p["name"] == "gamma")
    assert listed["count"] == len(listed["projects"]) and gamma["gpus_in_use"] == 8
    # Room again once the first ends; a raised quota admits at once.
    with corral.http() as c:
        c.post(f"/v1/requests/{first}/cancel")
    assert corral.cli("projects", "quota", "gamma", "--gpus", "16").returncode == 0
    third = json.loads(corral.cli("launch", "-d", "--json", str(task), token=erin).stdout)["id"]
    # Admitted (not refused): launching, or waiting for the one A100 machine to be let go.
    corral.wait_state(third, {"PROVISIONING", "RUNNING", "WAITING"})
    with corral.http() as c:
        c.post(f"/v1/requests/{third}/cancel")


def test_a_spent_dollar_quota_refuses_with_its_numbers(corral: Installation) -> None:
    assert corral.cli("projects", "add", "delta", "--dollars-per-day", "0").returncode == 0
    done = corral.cli("users", "add", "fred", "--project", "delta", "--json")
    rid = corral.submit(json.loads(done.stdout)["token"], CPU_TASK)
    corral.wait_state(rid, {"FAILED"})
    with corral.http() as c:
        why = c.get(f"/v1/requests/{rid}/why").json()
        view = c.get(f"/v1/requests/{rid}").json()
    assert why["quota"]["quota"] == "usd_per_period" and why["quota"]["limit"] == 0
    assert "0.00 of 0.00 USD spent in this 24 h period" in why["reason"]
    assert view["error"] == why["reason"]


def test_a_revoked_token_stops_working_at_once(corral: Installation, tmp_path: Path) -> None:
    token_file = tmp_path / "gina.token"
    done = corral.cli("users", "add", "gina", "--project", "alpha", "--token-file", str(token_file))
    assert done.returncode == 0, done.stderr
    token = token_file.read_text().strip()
    assert token not in done.stdout + done.stderr  # written, never printed
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    with corral.http(token) as c:
        assert c.get("/v1/requests").status_code == 200
    assert corral.cli("users", "revoke", "gina").returncode == 0
    with corral.http(token) as c:
        assert c.get("/v1/requests").status_code == 401
    listed = json.loads(corral.cli("users", "list", "--json").stdout)
    gina = next(u for u in listed["users"] if u["name"] == "gina")
    assert gina["revoked_at"] is not None and "token" not in gina
    assert "token_sha256" not in gina
    # Only the hash is kept: no key or value in Redis holds the token.
    import redis as redis_lib

    r = redis_lib.Redis.from_url(corral.system.env["CORRAL_REDIS_URL"])
    for key in r.scan_iter("corral:*"):
        assert token.encode() not in key
        if r.type(key) == b"hash":
            assert all(token.encode() not in v for v in r.hgetall(key).values())


def test_only_an_admin_manages_users_and_the_first_admin_keeps_working(
    corral: Installation,
) -> None:
    member = corral.tokens["alice"]
    done = corral.cli("users", "add", "mallory", "--role", "admin", token=member)
    assert done.returncode == 2 and "needs an admin" in done.stderr
    assert corral.cli("projects", "quota", "alpha", "--gpus", "0", token=member).returncode == 2
    with corral.http(member) as c:
        assert c.get("/v1/pools").status_code == 403
    with corral.http() as c:  # the token `corral up` writes: the admin, as before
        assert c.get("/v1/whoami").json()["role"] == "admin"
    with corral.http("crl_not-a-token") as c:
        assert c.get("/v1/requests").status_code == 401
    assert corral.cli("users", "add", "admin", "--role", "admin").returncode == 2


def _task_file(corral: Installation, task: dict[str, Any]) -> Path:
    path = corral.system.home / f"{task['name']}.yaml"
    path.write_text(json.dumps(task))
    return path


def test_every_user_signs_in_to_the_console_and_sees_its_projects_only(
    corral: Installation,
) -> None:
    """Issue #49 item 5 (it reverses #47's "first admin only"): each user signs in with its
    own token; a member sees its project's requests (another's answers 404, as in the API), a
    viewer sees them with no cancel or terminate and its posts are refused (403)."""
    url = corral.system.api_url
    mine = corral.submit(corral.tokens["alice"], CPU_TASK)  # alpha
    theirs = corral.submit(corral.tokens["bob"], CPU_TASK)  # beta

    def signed_in(token: str) -> httpx.Client:
        """A client holding a new session's cookie only."""
        with httpx.Client(base_url=url, timeout=60) as c:
            signed = c.post("/console/login", data={"token": token, "next": "/console/requests"})
        assert signed.status_code == 303 and "failed" not in signed.headers["location"]
        sid = signed.cookies["corral_console"]
        return httpx.Client(base_url=url, timeout=60, cookies={"corral_console": sid})

    with httpx.Client(base_url=url, timeout=60) as c:
        refused = c.post("/console/login", data={"token": "crl_not-a-token", "next": "/console/"})
        assert "failed=1" in refused.headers["location"] and "corral_console" not in refused.cookies
    with signed_in(corral.tokens["alice"]) as c:
        listed = c.get("/console/requests")
        assert listed.status_code == 200 and mine in listed.text and theirs not in listed.text
        assert "alice (member)" in listed.text
        assert c.get(f"/console/requests/{theirs}").status_code == 404
        assert c.get(f"/console/requests/{theirs}/log.txt").status_code == 404
        assert c.get("/console/requests", params={"project": "beta"}).text.count(theirs) == 0
        page = c.get(f"/console/requests/{mine}")
        assert page.status_code == 200 and 'id="cancel"' in page.text
    with signed_in(corral.tokens["carol"]) as c:  # a viewer of alpha
        page = c.get(f"/console/requests/{mine}")
        assert page.status_code == 200 and "carol (viewer)" in page.text
        assert 'id="cancel"' not in page.text and 'class="terminate"' not in page.text
        key = re.search(r'name="key" value="([0-9a-f]+)"', page.text)
        assert key is None  # no form at all
        # With the form key a member's page would carry, the post is still a viewer's: 403.
        form = hmac_form_key(c.cookies["corral_console"])
        assert c.post(f"/console/requests/{mine}/cancel", data={"key": form}).status_code == 403
    assert corral.state(mine) not in ENDED_BY_USER
    with signed_in(corral.system.token) as c:
        listed = c.get("/console/requests")
        assert mine in listed.text and theirs in listed.text and "admin (admin)" in listed.text
        beta = c.get("/console/requests", params={"project": "beta"}).text
        assert theirs in beta and mine not in beta
    with corral.http() as c:
        for rid in (mine, theirs):
            c.post(f"/v1/requests/{rid}/cancel")


def hmac_form_key(session_id: str) -> str:
    """The form key the console derives from a session id (console/auth.py's form_key)."""
    import hmac

    return hmac.new(session_id.encode(), b"corral-console-form", hashlib.sha256).hexdigest()


def test_revoking_a_user_ends_its_console_sessions(corral: Installation) -> None:
    """`corral users revoke` ends the user's open console sessions at once: the same cookie
    then gets the sign-in page."""
    with corral.http() as c:
        made = c.post("/v1/users", json={"name": "ivan", "role": "member", "projects": ["alpha"]})
        assert made.status_code == 201, made.text
        token = made.json()["token"]
    url = corral.system.api_url
    with httpx.Client(base_url=url, timeout=60) as c:
        sid = c.post("/console/login", data={"token": token, "next": "/"}).cookies["corral_console"]
    with httpx.Client(base_url=url, timeout=60, cookies={"corral_console": sid}) as c:
        assert c.get("/console/requests").status_code == 200
        assert corral.cli("users", "revoke", "ivan").returncode == 0
        after = c.get("/console/requests")
        assert after.status_code == 303 and after.headers["location"].startswith("/console/login")
        again = c.post("/console/login", data={"token": token, "next": "/console/"})
        assert "failed=1" in again.headers["location"]


def test_a_console_session_is_a_random_id_that_ends_at_sign_out(corral: Installation) -> None:
    """Issue #47 item 7: the console's cookie was a fixed HMAC of the admin token, the same on
    every sign-in and valid after sign-out. Now each sign-in gets a random id kept in Redis
    (only its SHA-256), deleted at sign-out: the copied cookie is refused after."""
    url, token = corral.system.api_url, corral.system.token

    def sign_in() -> str:
        with httpx.Client(base_url=url, timeout=60) as c:
            signed = c.post("/console/login", data={"token": token, "next": "/console/"})
            assert signed.status_code == 303 and "failed" not in signed.headers["location"]
            return str(signed.cookies["corral_console"])

    first, second = sign_in(), sign_in()
    assert first != second and token not in first
    digest = hashlib.sha256(first.encode()).hexdigest()
    keys = redis.Redis.from_url(corral.system.env["CORRAL_REDIS_URL"]).keys("*console-session*")
    assert any(k.decode().endswith(digest) for k in keys) and first.encode() not in b"".join(keys)
    rid = corral.submit(corral.tokens["alice"], CPU_TASK)
    with httpx.Client(base_url=url, timeout=60, cookies={"corral_console": first}) as c:
        page = c.get(f"/console/requests/{rid}")
        assert page.status_code == 200
        # The form key is the session's: another session's (or the token's) is refused.
        key = re.search(r'name="key" value="([0-9a-f]+)"', page.text)
        assert key is not None
        cancel = f"/console/requests/{rid}/cancel"
        assert c.post(cancel, data={"key": "0" * 64}).status_code == 403
        assert c.post("/console/logout").status_code == 303
        assert c.get("/console/").status_code == 303  # the same cookie, after sign-out
        assert c.post(cancel, data={"key": key.group(1)}).status_code == 303  # to sign-in
    assert corral.state(rid) not in ENDED_BY_USER
    with httpx.Client(base_url=url, timeout=60, cookies={"corral_console": second}) as c:
        assert c.get("/console/").status_code == 200  # another session lives on
        # The first session's key is not this one's.
        assert c.post(cancel, data={"key": key.group(1)}).status_code == 403
    assert corral.state(rid) not in ENDED_BY_USER
    with corral.http() as c:
        c.post(f"/v1/requests/{rid}/cancel")


def test_dollars_spent_by_a_projects_machines_refuse_its_next_request(
    corral: Installation,
) -> None:
    """The spend is read from the store: a real machine of the local cloud (cpu-2 at 0.10
    USD/h) runs a job, and its cost this period is over the project's tiny daily quota. Runs
    last in this module: it starts beat (which ends a finished job)."""
    corral.system.start_beat()
    assert corral.cli("projects", "add", "epsilon", "--dollars-per-day", "0.00001").returncode == 0
    done = corral.cli("users", "add", "hank", "--project", "epsilon", "--json")
    hank = json.loads(done.stdout)["token"]
    job = {**CPU_TASK, "name": "short-job", "run": "sleep 1"}
    first = corral.submit(hank, job)
    corral.wait_state(first, {"SUCCEEDED"}, 120)
    second = corral.submit(hank, job)
    corral.wait_state(second, {"FAILED"})
    with corral.http(hank) as c:
        why = c.get(f"/v1/requests/{second}/why").json()
        cost = c.get(f"/v1/requests/{first}").json()["cost_usd"]
    assert why["code"] == "over_quota" and why["quota"]["quota"] == "usd_per_period"
    assert why["quota"]["in_use"] == pytest.approx(cost, rel=0.05) and cost > 0.00001
    projects = json.loads(corral.cli("projects", "list", "--json", token=hank).stdout)
    assert [p["name"] for p in projects["projects"]] == ["epsilon"]
    assert projects["projects"][0]["spent_usd"] == pytest.approx(cost, rel=0.05)
