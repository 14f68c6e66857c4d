"""Projects sharing machines, written as the attacks of issue #47 (items 1 and 4) and the
folders of issue #45 (item 2), against a real installation (redis-server, the API, scheduling
and provisioning workers, beat) on the local cloud, with Corral running as root where the test
can (tasks then run as users of their own: ``CORRAL_LOCAL_TASKS_RUN_AS=own-user``).

- alice (team-a) runs a workload on a pool machine that prints TEAM-A-SECRET-OUTPUT and writes
  a file in ``~``; bob (team-b) then gets the same machine: his logs hold none of alice's
  output, her file is gone and out of his reach, and his exec, attach and port-forward reach
  his own assignment only (his folder, never the control plane's Redis).
- a local task cannot read Corral's home (the API token, the Redis URL), and no variable of its
  environment names a path inside it.
- every node of a request has a HOME and a working directory of its own, neither the real
  user's nor the control plane's.
"""

from __future__ import annotations

import base64
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
import yaml

from harness import System, wait_for
from other_user import needs_other_user

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLOUD = FIXTURES / "localcloud" / "pools.yaml"
POOL = {
    "kind": "ANYSCALE_MANAGED",
    "machine_types": [
        {
            "machine_type": "cpu",
            "launch_templates": [{"instance_type": "cpu-2"}],
            "partitions": [{"name": "one", "size": 1}],  # one machine: bob gets alice's
        }
    ],
}
COMPUTE = {
    "worker_nodes": [
        {"instance_type": "cpu", "flags": {"cloud_deployment": {"machine_pool": "shared"}}}
    ]
}
SECRET = "TEAM-A-SECRET-OUTPUT"


class Team:
    """The installation and its two members' tokens."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.tokens: dict[str, str] = {}

    def http(self, who: str | None = None) -> httpx.Client:
        token = self.tokens[who] if who else self.system.token
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.system.api_url, timeout=60, headers=headers)

    def submit(self, who: str, project: str, task: dict[str, Any]) -> str:
        with self.http(who) as c:
            resp = c.post("/v1/requests", json={"task": task}, params={"project": project})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def logs(self, who: str, rid: str) -> str:
        with self.http(who) as c:
            resp = c.get(f"/v1/requests/{rid}/logs")
        assert resp.status_code == 200, resp.text
        return resp.text

    def exec(self, who: str, rid: str, command: str) -> dict[str, Any]:
        """``corral exec``: the command's output and exit code once it ended."""
        with self.http(who) as c:
            started = c.post(f"/v1/requests/{rid}/exec", json={"command": command})
            assert started.status_code == 201, started.text
            xid = started.json()["id"]

            seen: list[dict[str, Any]] = []

            def ended() -> bool:
                seen.append(c.get(f"/v1/execs/{xid}").json())
                return seen[-1].get("exit_code") is not None

            wait_for(ended, 30, f"exec {command!r} to end")
            return seen[-1]

    def session(
        self, who: str, rid: str, body: dict[str, Any], send: bytes = b""
    ) -> dict[str, Any]:
        """A relayed session (attach with a command, or a port-forward) run to its end:
        what the node sent, its exit code and error."""
        with self.http(who) as c:
            opened = c.post(f"/v1/requests/{rid}/sessions", json=body)
            assert opened.status_code == 201, opened.text
            sid = opened.json()["id"]
            if send:
                c.post(f"/v1/sessions/{sid}/input", content=send)
            c.post(f"/v1/sessions/{sid}/input", content=b"", params={"eof": "true"})
            data, deadline = b"", time.monotonic() + 30
            while time.monotonic() < deadline:
                got = c.get(f"/v1/sessions/{sid}/output", params={"wait_s": 2}).json()
                data += base64.b64decode(got["data"])
                if got["eof"]:
                    return {"data": data, "exit_code": got["exit_code"], "error": got["error"]}
            raise AssertionError(f"session {sid} did not end: {data!r}")


@pytest.fixture(scope="module")
def team(
    make_module_system: Callable[..., System], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Team]:
    system = make_module_system(CLOUD, env={"CORRAL_LOCAL_TASKS_RUN_AS": "own-user"})
    # Corral's home as `corral up` leaves it: the admin's token and the Redis URL, 0600 in 0700.
    (system.home / "api-token").write_text(system.token)
    (system.home / "redis-url").write_text(system.env["CORRAL_REDIS_URL"])
    for name in ("api-token", "redis-url"):
        os.chmod(system.home / name, 0o600)
    os.chmod(system.home, 0o700)
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_worker("autoscale")  # the cluster test's nodes
    system.start_beat()
    team = Team(system)
    pool = tmp_path_factory.mktemp("pool") / "shared.yaml"
    pool.write_text(yaml.safe_dump(POOL))
    assert system.cli("pools", "apply", str(pool), "--name", "shared").returncode == 0
    with team.http() as c:
        for project in ("team-a", "team-b"):
            assert c.post("/v1/projects", json={"name": project}).status_code == 201
        for name, project in (("alice", "team-a"), ("bob", "team-b")):
            body = {"name": name, "role": "member", "projects": [project]}
            made = c.post("/v1/users", json=body)
            assert made.status_code == 201, made.text
            team.tokens[name] = made.json()["token"]
    yield team


def _machine(system: System, rid: str) -> str:
    [inst] = system.request(rid)["instances"]
    return str(inst["provider_id"])


def _line(text: str, key: str) -> str:
    """The value of the line ``key=value`` a task printed."""
    found = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]
    assert found, f"no {key}= in {text!r}"
    return found[-1]


def test_a_second_project_on_a_pool_machine_reaches_none_of_the_firsts_work(team: Team) -> None:
    system = team.system
    alice = team.submit(
        "alice",
        "team-a",
        {
            "name": "alice-job",
            "compute_config": COMPUTE,
            "run": f"echo {SECRET}; echo alice-data > ~/alice-file; echo HOME=$HOME; echo PWD=$PWD",
        },
    )
    system.wait_state(alice, {"SUCCEEDED"}, 90)
    said = team.logs("alice", alice)
    assert SECRET in said  # her own logs: her output
    alice_home = _line(said, "HOME")
    assert _line(said, "PWD") == alice_home  # no workdir: she starts in her own folder
    assert alice_home != str(Path.home())
    machine = _machine(system, alice)

    # bob's workload lands on the same machine (a pool of one) and looks for alice's traces.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bob = team.submit(
        "bob",
        "team-b",
        {
            "name": "bob-job",
            "compute_config": COMPUTE,
            "run": (
                f"cat {alice_home}/alice-file || echo NO-ALICE-FILE; ls -A ~; echo HOME=$HOME; "
                f"echo BOB-OWN-OUTPUT; exec python3 -m http.server {port} --bind 127.0.0.1"
            ),
        },
    )
    system.wait_state(bob, {"RUNNING"}, 90)
    assert _machine(system, bob) == machine

    wait_for(lambda: "BOB-OWN-OUTPUT" in team.logs("bob", bob), 30, "bob's output")
    said = team.logs("bob", bob)
    assert SECRET not in said and "alice-data" not in said, said
    assert "NO-ALICE-FILE" in said
    bob_home = _line(said, "HOME")
    assert bob_home != alice_home
    assert not Path(alice_home).exists()  # removed when her assignment ended

    # exec and attach run in bob's own assignment: his folder, his HOME, not alice's.
    done = team.exec("bob", bob, f"echo HOME=$HOME; echo PWD=$PWD; cat {alice_home}/alice-file")
    out = str(done["output"])
    assert _line(out, "HOME") == bob_home and _line(out, "PWD") == bob_home, done
    assert "alice-data" not in out and SECRET not in out
    shell = team.session("bob", bob, {"kind": "shell", "command": "echo HOME=$HOME; ls -A ~"})
    assert _line(shell["data"].decode(), "HOME") == bob_home, shell

    # port-forward reaches his own server, never the control plane's Redis on the same host.
    request = b"GET / HTTP/1.0\r\n\r\n"
    wait_for(
        lambda: (
            b"HTTP/1.0 200"
            in team.session("bob", bob, {"kind": "forward", "port": port}, request)["data"]
        ),
        30,
        "bob's own port through the relay",
    )
    redis_port = urlparse(system.env["CORRAL_REDIS_URL"]).port
    to_redis = team.session("bob", bob, {"kind": "forward", "port": redis_port}, b"PING\r\n")
    assert to_redis["exit_code"] == 1 and b"PONG" not in to_redis["data"], to_redis
    assert "not this task's own port" in str(to_redis["error"])

    # Ended, alice's logs hold none of his output either.
    assert system.cli("terminate", bob).returncode == 0
    system.wait_state(bob, {"TERMINATED", "CANCELLED", "SUCCEEDED", "FAILED"}, 60)
    assert "BOB-OWN-OUTPUT" not in team.logs("alice", alice)


@needs_other_user
def test_a_local_task_cannot_read_corrals_home(team: Team) -> None:
    system = team.system
    home = system.home
    rid = team.submit(
        "alice",
        "team-a",
        {
            "name": "snoop",
            "resources": {"cloud": "local", "instance_type": "cpu-2"},
            "run": (
                f"cat {home}/api-token && echo READ-TOKEN; "
                f"cat {home}/redis-url && echo READ-REDIS; "
                f"ls {home} && echo LISTED-HOME; echo UID=$(id -u); env"
            ),
        },
    )
    system.wait_state(rid, {"SUCCEEDED", "FAILED"}, 90)
    said = team.logs("alice", rid)
    assert "UID=" in said, said
    assert _line(said, "UID") != "0"
    for mark in ("READ-TOKEN", "READ-REDIS", "LISTED-HOME", system.token):
        assert mark not in said, said
    env_lines = [
        line for line in said.splitlines() if "=" in line and not line.startswith("[corral")
    ]
    assert not [line for line in env_lines if str(home) in line], env_lines


def _homes(said: str) -> dict[str, tuple[str, str]]:
    """node rank -> (HOME, PWD) from lines ``NODE<rank>=<HOME>:<PWD>``."""
    found = {}
    for line in said.splitlines():
        if line.startswith("NODE") and "=" in line:
            rank, _, rest = line.partition("=")
            home, _, pwd = rest.partition(":")
            found[rank] = (home, pwd)
    return found


def test_every_node_of_a_request_has_a_home_and_folder_of_its_own(team: Team) -> None:
    """Issue #45 item 2: without a workdir a local task ran in `corral up`'s working directory
    with the user's own HOME, shared by every node."""
    system = team.system
    mark = f"corral-mine-{os.getpid()}"  # this run's own: a file left by another never counts
    rid = team.submit(
        "alice",
        "team-a",
        {
            "name": "two-nodes",
            "num_nodes": 2,
            "resources": {"cloud": "local", "instance_type": "cpu-2"},
            "run": f"echo NODE$CORRAL_NODE_RANK=$HOME:$PWD; touch ~/{mark}-$CORRAL_NODE_RANK; ls ~",
        },
    )
    system.wait_state(rid, {"SUCCEEDED"}, 90)
    said = team.logs("alice", rid)
    homes = _homes(said)
    assert sorted(homes) == ["NODE0", "NODE1"], said
    (home0, pwd0), (home1, pwd1) = homes["NODE0"], homes["NODE1"]
    assert home0 != home1 and pwd0 == home0 and pwd1 == home1
    for home in (home0, home1):
        assert home not in (str(Path.home()), os.getcwd())
        assert not Path(home).is_relative_to(system.home)  # never inside Corral's home
    assert not (Path.home() / f"{mark}-0").exists()


def test_a_ray_cluster_nodes_home_mount_lands_in_its_own_home(team: Team, tmp_path: Path) -> None:
    """Issue #45 item 2: Ray cluster nodes on the local cloud shared the real user's HOME, so
    a `~` file mount wrote into it. Each node's `~` is its own folder now."""
    system = team.system
    name = "home-mounts"
    mark = f"corral-mount-{os.getpid()}.txt"
    source = tmp_path / "data.txt"
    source.write_text("mounted-into-the-node\n")
    cluster = {
        "cluster_name": name,
        "provider": {"type": "local"},
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": {"InstanceType": "cpu-2"}, "resources": {"CPU": 0}},
            "worker": {
                "node_config": {"InstanceType": "cpu-2"},
                "resources": {"CPU": 1},
                "min_workers": 1,
                "max_workers": 1,
            },
        },
        "file_mounts": {f"~/{mark}": str(source)},
        "setup_commands": [f"echo NODE$RAY_NODE_TYPE_NAME=$HOME:$PWD; cat ~/{mark}"],
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster))
    up = system.cli("cluster", "up", str(path))
    assert up.returncode == 0, up.stderr
    try:

        def said() -> str:
            nodes = system.get(f"/v1/clusters/{name}").json()["nodes"]
            return "\n".join(system.get(f"/v1/requests/{n['id']}/logs").text for n in nodes)

        wait_for(lambda: said().count("mounted-into-the-node") >= 2, 120, "both nodes' setup")
        text = said()
        homes = _homes(text)
        assert sorted(homes) == ["NODEhead", "NODEworker"], text
        assert homes["NODEhead"][0] != homes["NODEworker"][0]
        for home, _ in homes.values():
            assert home != str(Path.home())
        assert not (Path.home() / mark).exists()  # the real HOME is untouched
    finally:
        assert system.cli("cluster", "down", name).returncode == 0
