"""Issue #47 items 5, 6 and 8 as the red team ran them, against a real installation
(redis-server, the API, scheduling and provisioning workers, local machines' agents) with two
projects: what a member of one can do to the storage the projects share.

- a 153-byte sparse bundle that unpacks to 1 GiB is refused on the node, nothing written;
- a bundle upload past the project's quota is refused (413, naming the quota);
- team-b cannot find, fetch or name team-a's bundle by its sha256;
- a revoked user's open session ends within seconds.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import LOCAL_ONLY, System, kill_agents, wait_for

pytestmark = pytest.mark.integration

LOCAL_CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "localcloud" / "runtime.yaml"
QUOTA_BYTES = 1024 * 1024
SESSIONS_PER_USER = 2
RES = {"cloud": "local", "instance_type": "cpu-2"}


class Teams:
    """The installation, and a token per user: alice and carol (team-a), bob (team-b)."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.tokens: dict[str, str] = {}

    def http(self, user: str | None = None) -> httpx.Client:
        bearer = self.tokens[user] if user else self.system.token
        return httpx.Client(
            base_url=self.system.api_url, timeout=60, headers={"Authorization": f"Bearer {bearer}"}
        )

    def upload(self, user: str, data: bytes, **params: str) -> httpx.Response:
        sha = hashlib.sha256(data).hexdigest()
        with self.http(user) as c:
            return c.put(
                f"/v1/bundles/{sha}",
                content=data,
                params=params,
                headers={"Content-Type": "application/gzip"},
            )

    def state(self, rid: str) -> str:
        with self.http() as c:
            return str(c.get(f"/v1/requests/{rid}").json()["state"])

    def ended(self, rid: str, timeout_s: float = 90) -> tuple[str, str]:
        """The request's final state and its logs (both said if it never ends)."""
        done = {"SUCCEEDED", "FAILED", "CANCELLED", "TERMINATED"}
        try:
            wait_for(lambda: self.state(rid) in done, timeout_s, f"{rid} to end")
        finally:
            with self.http() as c:
                logs = c.get(f"/v1/requests/{rid}/logs").text
                events = c.get(f"/v1/requests/{rid}/events").text
            print(events[-3000:], logs[-3000:])
        return self.state(rid), logs


@pytest.fixture(scope="module")
def teams(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    redis_server.flush()
    home = tmp_path_factory.mktemp("teams-home")
    env = {
        **LOCAL_ONLY,
        "CORRAL_BUNDLE_QUOTA_BYTES": str(QUOTA_BYTES),
        "CORRAL_SESSIONS_PER_USER": str(SESSIONS_PER_USER),
    }
    system = System(home, redis_server.url, LOCAL_CLOUD, env)
    try:
        system.start_api()
        system.start_worker("schedule")
        system.start_worker("provision")
        system.start_beat()  # the monitor that sees a machine's run end
        made = Teams(system)
        with made.http() as c:
            for project in ("team-a", "team-b"):
                assert c.post("/v1/projects", json={"name": project}).status_code == 201
            for name, project in (("alice", "team-a"), ("bob", "team-b"), ("carol", "team-a")):
                body = {"name": name, "role": "member", "projects": [project]}
                done = c.post("/v1/users", json=body)
                assert done.status_code == 201, done.text
                made.tokens[name] = done.json()["token"]
        yield made
    finally:
        system.stop(grace_s=0)
        kill_agents(system)


def sparse_bundle(tmp_path: Path) -> bytes:
    """The red team's bundle: a workdir holding one GNU sparse file of 1 GiB, made by GNU tar."""
    if shutil.which("tar") is None:
        pytest.skip("GNU tar makes the sparse archive")
    src = tmp_path / "src"
    (src / "workdir").mkdir(parents=True)
    subprocess.run(["truncate", "-s", "1G", str(src / "workdir" / "big")], check=True)
    out = tmp_path / "sparse.tgz"
    subprocess.run(["tar", "--sparse", "-czf", str(out), "-C", str(src), "workdir"], check=True)
    return out.read_bytes()


def plain_bundle(text: str, size: int = 0) -> bytes:
    """A workdir holding hello.txt (and ``size`` random bytes in pad.bin)."""
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in (
            ("workdir/hello.txt", text.encode()),
            ("workdir/pad.bin", os.urandom(size)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def bundle_task(data: bytes, run: str) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    bundle = {"sha256": sha, "size_bytes": len(data), "workdir": True}
    return {"name": "files", "resources": RES, "bundle": bundle, "run": run}


def test_a_sparse_bundle_is_refused_on_the_node_and_nothing_is_written(
    teams: Teams, tmp_path: Path
) -> None:
    data = sparse_bundle(tmp_path)
    assert len(data) < 200  # 153 bytes with GNU tar 1.34
    assert teams.upload("alice", data).status_code == 201
    with teams.http("alice") as c:
        made = c.post("/v1/requests", json={"task": bundle_task(data, "ls -la; echo ran")})
    assert made.status_code == 201, made.text
    state, logs = teams.ended(made.json()["id"])
    assert state == "FAILED" and "sparse" in logs and "ran" not in logs, (state, logs)
    big = [p for p in (teams.system.home / "machines").rglob("big")]
    assert big == [], big  # not a byte of the gigabyte on the control plane's disk


def test_a_bundle_upload_over_the_projects_quota_is_refused(teams: Teams) -> None:
    first = teams.upload("alice", plain_bundle("one", 700_000))
    assert first.status_code == 201, first.text
    over = teams.upload("alice", plain_bundle("two", 400_000))
    assert over.status_code == 413, over.text
    said = over.json()["detail"]
    assert "team-a" in said and f"{QUOTA_BYTES:,}" in said and "CORRAL_BUNDLE_QUOTA_BYTES" in said
    # team-b's quota is its own.
    assert teams.upload("bob", plain_bundle("two", 400_000)).status_code == 201


def test_team_b_cannot_find_fetch_or_name_team_as_bundle_by_its_sha(teams: Teams) -> None:
    data = plain_bundle("TEAM-A-SECRET-FILE")
    sha = hashlib.sha256(data).hexdigest()
    assert teams.upload("alice", data).status_code == 201
    with teams.http("alice") as c:
        assert c.head(f"/v1/bundles/{sha}").status_code == 204
        mine = c.post("/v1/requests", json={"task": bundle_task(data, "cat hello.txt")})
    assert mine.status_code == 201, mine.text
    with teams.http("bob") as c:
        assert c.head(f"/v1/bundles/{sha}").status_code == 404
        assert c.head(f"/v1/bundles/{sha}", params={"project": "team-a"}).status_code == 404
        theirs = c.post("/v1/requests", json={"task": bundle_task(data, "cat hello.txt")})
    assert theirs.status_code == 422, theirs.text
    assert "bundle.sha256" in theirs.text and "team-b" in theirs.text
    # alice's own request gets her files, through the blob store, not Redis.
    state, logs = teams.ended(mine.json()["id"])
    assert state == "SUCCEEDED" and "TEAM-A-SECRET-FILE" in logs, (state, logs)
    kept = teams.system.home / "bundles" / "team-a" / sha
    assert kept.read_bytes() == data and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700


def _service(teams: Teams, user: str) -> str:
    """A service of ``user``'s on the local cloud, RUNNING: its request id."""
    task = {"name": "svc", "resources": RES}
    with teams.http(user) as c:
        made = c.post("/v1/requests", json={"task": task})
    assert made.status_code == 201, made.text
    rid = str(made.json()["id"])
    wait_for(lambda: teams.state(rid) == "RUNNING", 60, f"{rid} to run")
    return rid


def _shell(c: httpx.Client, rid: str) -> httpx.Response:
    return c.post(f"/v1/requests/{rid}/sessions", json={"kind": "shell"})


def _read_until(c: httpx.Client, sid: str, done: Any, timeout_s: float = 30) -> dict[str, Any]:
    """Session output read until ``done(text, answer)``; the text and the last answer."""
    text = ""
    last: dict[str, Any] = {}

    def enough() -> bool:
        nonlocal text, last
        last = c.get(f"/v1/sessions/{sid}/output", params={"wait_s": 2}).json()
        text += base64.b64decode(last["data"]).decode(errors="replace")
        return bool(done(text, last))

    wait_for(enough, timeout_s, f"session {sid}'s output")
    return {"text": text, **last}


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sessions_are_limited_per_user_and_an_ended_session_refuses_input(teams: Teams) -> None:
    rid = _service(teams, "alice")
    try:
        with teams.http("alice") as c:
            opened = [_shell(c, rid) for _ in range(SESSIONS_PER_USER)]
            assert [o.status_code for o in opened] == [201] * SESSIONS_PER_USER
            over = _shell(c, rid)
            assert over.status_code == 429, over.text
            assert "CORRAL_SESSIONS_PER_USER" in over.text and "alice" in over.text
            sid = opened[0].json()["id"]
            assert c.post(f"/v1/sessions/{sid}/input", content=b"exit 4\n").json()["ok"]
            ended = _read_until(c, sid, lambda _t, a: a["eof"])
            assert ended["exit_code"] == 4
            # The red team's 25 MB after the end: refused at the first byte, nothing kept.
            late = c.post(f"/v1/sessions/{sid}/input", content=b"x" * 60_000)
            assert late.status_code == 409 and "ended" in late.text, late.text
            # The ended one no longer counts: another may be opened.
            assert _shell(c, rid).status_code == 201
        with teams.http("bob") as c:  # another user's limit is their own
            assert c.get(f"/v1/requests/{rid}").status_code == 404
    finally:
        with teams.http() as c:
            c.post(f"/v1/requests/{rid}/terminate")


def test_a_revoked_users_open_shell_ends_within_seconds(teams: Teams) -> None:
    rid = _service(teams, "carol")
    try:
        with teams.http("carol") as c:
            opened = _shell(c, rid)
            assert opened.status_code == 201, opened.text
            sid = opened.json()["id"]
            c.post(f"/v1/sessions/{sid}/input", content=b"echo pid=$$; sleep 600\n")
            said = _read_until(c, sid, lambda text, _a: "pid=" in text and "\n" in text)
        pid = int(said["text"].split("pid=", 1)[1].split()[0])
        assert _alive(pid)
        with teams.http() as c:
            assert c.post("/v1/users/carol/revoke").status_code == 200
        revoked_at = time.monotonic()
        wait_for(lambda: not _alive(pid), 10, f"carol's shell (pid {pid}) to end")
        print(f"the shell ended {time.monotonic() - revoked_at:.1f} s after the revoke")
        with teams.http("carol") as c:
            assert c.post(f"/v1/sessions/{sid}/input", content=b"id\n").status_code == 401
    finally:
        with teams.http() as c:
            c.post(f"/v1/requests/{rid}/terminate")


def test_the_api_says_how_full_redis_is_against_its_limit(teams: Teams) -> None:
    """The metrics the chart's CorralRedisMemoryFilling alert reads: Redis's used memory and
    its limit (the tests' server has Corral's 1 GiB, noeviction)."""
    with teams.http() as c:
        text = c.get("/metrics").text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("corral_redis_")
    }
    assert values["corral_redis_maxmemory_bytes"] == 1024**3
    assert 0 < values["corral_redis_used_memory_bytes"] < 1024**3
