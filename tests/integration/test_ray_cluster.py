"""A Ray cluster on the local cloud, with real Ray: Corral runs Ray's launcher steps on every
node, scales on the demand Ray's GCS reports, and ends idle Ray nodes' machines.

Ray comes from the tests' Ray venv (tests/ray_venv.py installs it when missing); its ``bin`` is
on the nodes' PATH, as on a machine image with Ray installed. Every node is a local-cloud
machine on this host: Ray runs several raylets on one host, as its own multi-node tests do. Ray
is kept small: a head that takes no tasks (``CPU: 0``), one CPU per worker, 80 MB object stores,
and no log monitor on any node (no driver here prints its workers' logs: each node's log
monitor is one more Python process started on these two cores).

Translated from Ray's own cases:
- python/ray/autoscaler/v2/tests/test_e2e.py::test_autoscaler_all_gangs_scheduled (a STRICT_SPREAD
  placement group's bundles bring up one node each) and
  ::test_scheduled_task_no_pending_demand (tasks needing a custom resource bring up the type
  that has it, then leave no pending demand);
- ::test_idle_termination (an idle worker is terminated after idle_timeout, the head never).

The tests share one installation (``system``), each with a cluster of its own name; after each
its cluster is down and every process of its machines gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import System, free_port, wait_for
from local_processes import is_agent

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NAME = "ray-lab"
OBJECT_STORE = 80 * 1024 * 1024
RAY_TMP_PREFIX = "cr-"
PORTS_USED: set[str] = set()  # the heads' GCS ports: their session folders are removed after

LOCAL_CLOUD = """\
instance_types:
  - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.1}
regions:
  - name: lab
    zones:
      - name: lab-a
        capacity: {cpu-2: 12}
        launch_delay_s: 0.2
"""

WORKER_PORTS = (
    "node-manager-port",
    "object-manager-port",
    "metrics-export-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
)
FREE_PORT = """#!/bin/sh
exec python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
"""

DRIVER = """\
import json, sys, time
import ray
from ray.util.placement_group import placement_group, remove_placement_group

ray.init(address=sys.argv[1], log_to_driver=False)
mount = sys.argv[2]

@ray.remote(num_cpus=0, resources={"A": 1})
def task(i):
    import os
    with open(mount) as fh:
        return {"i": i, "node": os.environ.get("RAY_CLOUD_INSTANCE_ID"), "data": fh.read()}

started = time.time()
refs = [task.remote(i) for i in range(8)]
pg = placement_group([{"B": 1}, {"B": 1}], strategy="STRICT_SPREAD")
results = ray.get(refs, timeout=240)
ray.get(pg.ready(), timeout=240)
table = ray.util.placement_group_table(pg)
nodes = sorted(set(table["bundles_to_node_id"].values()))
# `ray status` while the group holds the wb nodes (busy, so not reaped as idle meanwhile).
# The head's monitor refreshes what `ray status` reads every few seconds: a first read may
# predate the wb nodes, so read again (for up to a minute) until it lists three nodes.
import os, subprocess
ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
deadline = time.time() + 60
while True:
    status = subprocess.run(
        [ray_cli, "status", "--address", sys.argv[1]], capture_output=True, text=True, timeout=120
    ).stdout
    if status.count("node_") >= 3 or time.time() > deadline:
        break
    time.sleep(2)
remove_placement_group(pg)
print(json.dumps({"results": results, "pg_nodes": nodes, "status": status,
                  "seconds": time.time() - started}))
"""


@pytest.fixture(scope="session")
def ray_bin() -> Path:
    """The Ray venv's bin folder, Ray installed there by the tests themselves."""
    from ray_venv import ray_python

    python, how = ray_python()
    if python is None:
        pytest.skip(f"Ray cannot be installed here: {how}")
    return python.parent


def _cluster_file(tmp: Path, port: int, dash_port: int, name: str = NAME, **extra: Any) -> Path:
    temp_dir = Path("/tmp") / f"{RAY_TMP_PREFIX}{port}"
    PORTS_USED.add(str(port))  # no_leftovers removes the folder
    free = tmp / "free_port.sh"
    free.write_text(FREE_PORT)
    free.chmod(0o755)  # short: Ray's socket paths must fit 107 bytes
    (tmp / "data.txt").write_text("mounted-by-corral\n")
    data: dict[str, Any] = {
        "cluster_name": name,
        "max_workers": 4,
        "upscaling_speed": 10,
        # 12 s: long against the autoscaler's pass (RECONCILE_INTERVAL_S, 0.5 s) and the 10 s
        # the test may wait after the driver released the wb nodes to see both in Corral's list
        # of Ray's nodes; a node pending demand is packed onto is never reaped as idle anyway.
        "idle_timeout_minutes": 0.2,
        "provider": {"type": "local"},
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": {"InstanceType": "cpu-2"}, "resources": {"CPU": 0}},
            "wa": {
                "node_config": {"InstanceType": "cpu-2"},
                "resources": {"CPU": 1, "A": 8},
                "max_workers": 2,
            },
            "wb": {
                "node_config": {"InstanceType": "cpu-2"},
                "resources": {"CPU": 1, "B": 1},
                "max_workers": 2,
            },
        },
        "file_mounts": {str(tmp / "mounted" / "data.txt"): str(tmp / "data.txt")},
        "setup_commands": ['echo "setup on $RAY_NODE_TYPE_NAME ($RAY_CLOUD_INSTANCE_ID)"'],
        "head_start_ray_commands": [
            f"ray start --head --port={port} --num-cpus=0 --include-dashboard=false "
            f"--dashboard-port={dash_port} --object-store-memory={OBJECT_STORE} "
            f"--temp-dir={temp_dir} --disable-usage-stats --include-log-monitor=false"
        ],
        # Several raylets on one host: each worker's ports are its own (Ray's defaults for the
        # agents' ports are fixed numbers, which the second raylet on a host cannot bind).
        # ...and one `ray start` at a time on this host: Ray numbers a node's sockets and logs
        # by what it finds in the session folder, which two raylets starting at once both find
        # free (on separate machines, as in production, neither applies).
        "worker_start_ray_commands": [
            f"flock {tmp}/ray-start.lock ray start --address=$RAY_HEAD_IP:{port} "
            f"--object-store-memory={OBJECT_STORE} --disable-usage-stats "
            "--include-log-monitor=false " + " ".join(f"--{p}=$({free})" for p in WORKER_PORTS)
        ],
        **extra,
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def no_leftovers() -> Any:
    """Whatever happens, no Ray process of the test's machines outlives it (the harness kills
    the agents; Ray's daemons and workers carry their instance ids)."""
    systems: list[System] = []
    yield systems
    for system in systems:
        for pid in _marked_processes(system):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for folder in Path("/tmp").glob(f"{RAY_TMP_PREFIX}*"):
        if folder.name.removeprefix(RAY_TMP_PREFIX) in PORTS_USED:
            shutil.rmtree(folder, ignore_errors=True)  # Ray's session folder (its logs)


@pytest.fixture(scope="module")
def shared(
    make_module_system: Callable[..., System], tmp_path_factory: pytest.TempPathFactory
) -> System:
    # Ray's bin folder on the nodes' PATH whether or not Ray is there yet: the tests that run
    # Ray ask for ``ray_bin`` (which installs it); the launcher-steps test needs none.
    from ray_venv import RAY_VENV

    return _system(make_module_system, tmp_path_factory.mktemp("ray-cloud"), RAY_VENV / "bin")


@pytest.fixture
def system(shared: System, no_leftovers: list[System]) -> Iterator[System]:
    """The module's installation as a fresh one: after the test its cluster is down and its
    machines gone (then ``no_leftovers`` kills whatever of them is left)."""
    no_leftovers.append(shared)
    yield shared
    shared.clear(timeout_s=120)


def _system(make_system: Callable[..., System], tmp: Path, ray_bin: Path) -> System:
    cloud = tmp / "cloud.yaml"
    cloud.write_text(LOCAL_CLOUD)
    path = f"{ray_bin}:{os.environ.get('PATH', '')}"
    system = make_system(
        cloud,
        env={"PATH": path},
        HEARTBEAT_TIMEOUT_S="15",
        TERMINATE_GRACE_S="8",
        ATTEMPT_DEADLINE_S="60",
    )
    system.start_api()
    for role in ("schedule", "provision"):
        system.start_worker(role)
    system.start_worker("autoscale")
    system.start_beat()
    return system


def _view(system: System, name: str = NAME) -> dict[str, Any]:
    """The cluster as the API shows it: a look repeated in a wait (a `corral cluster status`
    per look would start a Python process ten times a second)."""
    resp = system.get(f"/v1/clusters/{name}")
    assert resp.status_code == 200, resp.text
    view: dict[str, Any] = resp.json()
    return view


def _cli_view(system: System, name: str = NAME) -> dict[str, Any]:
    """The cluster as `corral cluster status --json` prints it (the same document)."""
    done = system.cli("cluster", "status", name, "--json")
    assert done.returncode == 0, done.stderr
    view: dict[str, Any] = json.loads(done.stdout)
    return view


def _ray_nodes(view: dict[str, Any]) -> Counter[str]:
    ray = view.get("ray") or {}
    return Counter(n["node_type"] for n in ray.get("nodes", []) if n["status"] != "DEAD")


def _marked_processes(system: System) -> list[int]:
    """Processes of this installation's machines: agents, and anything (Ray's daemons and
    workers) carrying one of its instance ids."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue
        ours = str(system.home).encode() in env
        if ours and (is_agent(proc) or b"CORRAL_INSTANCE_ID=" in env):
            pids.append(int(proc.name))
    return pids


@pytest.mark.timeout(600)  # Ray starts four raylets on this (shared, 2-core) host
def test_ray_demand_launches_workers_that_run_ray_and_idle_ones_go(
    system: System, tmp_path: Path, ray_bin: Path
) -> None:
    port, dash_port = free_port(), free_port()
    up = system.cli("cluster", "up", str(_cluster_file(tmp_path, port, dash_port)))
    assert up.returncode == 0, up.stderr
    assert "file mounts: 1 paths" in up.stdout

    # The head's Ray comes up and reports: only the head, no worker (no demand yet).
    def head_reports() -> bool:
        view = _view(system)
        return _ray_nodes(view) == Counter({"head": 1})

    wait_for(head_reports, 120, "the head's Ray to report", system.home / "logs")
    view = _cli_view(system)
    assert view["ray"]["gcs_address"].endswith(f":{port}")
    assert [n["node_type"] for n in view["nodes"]] == ["head"]

    # A driver on the head: 8 tasks needing A (only wa has it), a STRICT_SPREAD group of two
    # {B: 1} bundles (one wb node each). Corral reads it from Ray's GCS and launches them.
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    mounted = tmp_path / "mounted" / "data.txt"
    ran = subprocess.run(
        [str(ray_bin / "python"), str(driver), view["ray"]["gcs_address"], str(mounted)],
        capture_output=True,
        text=True,
        timeout=290,
    )
    assert ran.returncode == 0, (ran.stderr[-2000:], json.dumps(_view(system))[-4000:])
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert sorted(r["i"] for r in out["results"]) == list(range(8))
    assert {r["data"] for r in out["results"]} == {"mounted-by-corral\n"}  # the file mount
    assert len(out["pg_nodes"]) == 2  # STRICT_SPREAD: two nodes

    # Exactly the workers Ray's demand needs: one wa (8 x {A: 1} fit its A: 8) and two wb
    # (one per STRICT_SPREAD bundle; the tasks and the group may reach the GCS's report in
    # different ticks). A worker whose `ray start` failed on this loaded host (Ray's own
    # start-up timeout) failed its node and was launched again.
    view = _view(system)
    workers = [d["launch"] for d in view["decisions"] if d["launch"] and "head" not in d["launch"]]
    launched: Counter[str] = Counter()
    for launch in workers:
        launched.update(launch)
    failed = Counter(f["node_type"] for f in view["failed_nodes"])
    assert launched - failed == Counter({"wa": 1, "wb": 2}), (
        view["decisions"],
        view["failed_nodes"],
    )
    assert all("start_ray command 1 exited" in f["failure"] for f in view["failed_nodes"]), view[
        "failed_nodes"
    ]
    # The tasks ran on one Ray node, started by Corral as its wa node (RAY_CLOUD_INSTANCE_ID
    # is the Corral node id; the node's own log says so). It may be gone already: idle since
    # its tasks ended, while the placement group waited for the wb nodes.
    [wa_node] = {r["node"] for r in out["results"]}
    assert "setup on wa (" + wa_node + ")" in system.cli("logs", wa_node).stdout
    # Corral's list of Ray's nodes is its last read of the GCS, one autoscaler pass: on a
    # loaded host it may trail the driver, which saw both wb nodes, by a pass or two (well
    # inside the 12 s the wb nodes idle before they go).
    ray_nodes = _ray_nodes(view)
    deadline = time.monotonic() + 10
    while ray_nodes["wb"] < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        ray_nodes = _ray_nodes(_view(system))
    assert ray_nodes["head"] == 1 and ray_nodes["wb"] == 2 and ray_nodes["wa"] <= 1, ray_nodes

    # `ray status` on the head, run while the group held the wb nodes, lists the workers Corral
    # started (two wb, the head, maybe wa); `cluster exec` reaches the head's Ray too.
    assert out["status"].count("node_") >= 3, out["status"]
    status = system.cli("cluster", "exec", NAME, "--", "ray", "status")
    assert status.returncode == 0 and "Node status" in status.stdout, status.stderr

    # Idle: after the idle timeout (12 s) every worker's machine is terminated, and Ray sees
    # them gone; the head stays.
    def workers_gone() -> bool:
        v = _view(system)
        return [n["node_type"] for n in v["nodes"]] == ["head"] and _ray_nodes(v) == Counter(
            {"head": 1}
        )

    wait_for(workers_gone, 90, "the idle workers to go", system.home / "logs")
    view = _view(system)
    terminated = [d for d in view["decisions"] if d["terminate"]]
    assert sum(len(d["terminate"]) for d in terminated) == 3
    assert any("idle" in r for d in terminated for r in d["reasons"])

    # Down: Ray is stopped on the head, the machine goes, nothing is left running.
    down = system.cli("cluster", "down", NAME)
    assert down.returncode == 0, down.stderr

    def all_gone() -> bool:
        listed = system.get("/v1/clusters").json()["clusters"]
        return not listed and not _marked_processes(system)

    wait_for(all_gone, 60, "the cluster and every process of it to be gone", system.home / "logs")


def test_a_failing_setup_command_fails_its_node_with_the_exit_code_and_is_retried(
    system: System, tmp_path: Path
) -> None:
    # No Ray needed: the launcher's steps alone. Ray's launcher marks a node whose setup
    # command fails "update-failed" and terminates it; the autoscaler launches again (here for
    # min_workers). Ray: python/ray/tests/test_autoscaler.py, the cases run with
    # MockProcessRunner(fail_cmds=...) (testScaleUpFailure-style update failures).
    name = "ray-bad-setup"
    cluster = {
        "cluster_name": name,
        "provider": {"type": "local"},
        "head_node_type": "head",
        "available_node_types": {
            "head": {"node_config": {"InstanceType": "cpu-2"}, "resources": {"CPU": 0}},
            "bad": {
                "node_config": {"InstanceType": "cpu-2"},
                "resources": {"CPU": 1},
                "min_workers": 1,
                "max_workers": 1,
                "worker_setup_commands": ["echo before-the-failure", "exit 3"],
            },
        },
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cluster))
    up = system.cli("cluster", "up", str(path))
    assert up.returncode == 0, up.stderr

    def failed_twice() -> bool:
        return len(_view(system, name)["failed_nodes"]) >= 2  # failed, launched again, failed again

    wait_for(failed_twice, 90, "the bad node to fail twice", system.home / "logs")
    view = _cli_view(system, name)
    failed_ids = {f["id"] for f in view["failed_nodes"]}
    for f in view["failed_nodes"]:
        assert f["node_type"] == "bad"
        assert f["failure"] == "setup command 2 exited 3: exit 3"
    # A failed node is no capacity: not among the cluster's nodes, not in its count.
    assert not failed_ids & {n["id"] for n in view["nodes"]}
    assert view["by_type"].get("bad", 0) <= 1
    shown = system.cli("cluster", "status", name)
    assert "setup command 2 exited 3: exit 3" in shown.stdout, shown.stdout
    # The node's own log, through `corral logs`, has each command's output and the failure.
    logs = system.cli("logs", sorted(failed_ids)[0])
    assert "before-the-failure" in logs.stdout
    assert "[corral-launcher] FAILED setup command 2 exited 3" in logs.stdout
    # `cluster exec` runs through the head's agent (as on a cloud node): output and exit code.
    ran = system.cli("cluster", "exec", name, "--", "echo on-$CORRAL_CLUSTER; exit 5")
    assert ran.returncode == 5 and ran.stdout.strip() == f"on-{name}", (ran.stdout, ran.stderr)
    missing = system.cli("cluster", "exec", name, "--node", "nope", "--", "true")
    assert missing.returncode == 1 and "no running node nope" in missing.stderr, missing.stderr
    down = system.cli("cluster", "down", name)
    assert down.returncode == 0, down.stderr


@pytest.mark.timeout(300)
def test_ray_job_submit_reaches_the_heads_dashboard_that_cluster_status_names(
    system: System, tmp_path: Path, ray_bin: Path
) -> None:
    """Issue: "the head's dashboard / job-submission address in `cluster status` so `ray job
    submit` works". A head-only cluster with the dashboard on; `ray job submit` to the address
    `cluster status --json` gives runs the entrypoint on the head and prints its output."""
    port, dash_port = free_port(), free_port()
    name = "ray-dashboard"
    path = _cluster_file(tmp_path, port, dash_port, name, max_workers=0)
    data = yaml.safe_load(path.read_text())
    data["head_start_ray_commands"] = [
        c.replace(
            "--include-dashboard=false", "--include-dashboard=true --dashboard-host=127.0.0.1"
        )
        for c in data["head_start_ray_commands"]
    ]
    path.write_text(yaml.safe_dump(data))
    assert system.cli("cluster", "up", str(path)).returncode == 0

    def dashboard() -> str | None:
        return (_view(system, name).get("ray") or {}).get("dashboard")

    wait_for(dashboard, 150, "the head to report its dashboard", system.home / "logs")
    address = _cli_view(system, name)["ray"]["dashboard"]
    assert address == f"http://127.0.0.1:{dash_port}", address
    job = subprocess.run(
        [
            str(ray_bin / "ray"),
            "job",
            "submit",
            "--address",
            str(address),
            "--",
            "python",
            "-c",
            "print('job-ran-on-the-head')",
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert job.returncode == 0 and "job-ran-on-the-head" in job.stdout, (job.stdout, job.stderr)
    assert system.cli("cluster", "down", name).returncode == 0


REQUEST = """\
import json, sys
import ray
from ray.autoscaler.sdk import request_resources

ray.init(address=sys.argv[1], log_to_driver=False)
request_resources(bundles=json.loads(sys.argv[2]))
"""


@pytest.mark.timeout(600)  # two raylets on this (shared, 2-core) host
def test_request_resources_launches_workers_that_stay_past_the_idle_timeout_until_cleared(
    system: System, tmp_path: Path, ray_bin: Path
) -> None:
    """Issue 45: a driver's ``request_resources(bundles=[...])`` on a head Corral started
    (no autoscaler v2: Ray writes the request to its v1 key) launches the nodes the bundles
    need, which stay while the request stands, idle past ``idle_timeout_minutes``, and go
    once an empty request clears it. Ray's python/ray/tests/test_autoscaler.py
    (testRequestBundles...: a standing request holds capacity; an empty one releases it)."""
    name = "ray-request"
    port, dash_port = free_port(), free_port()
    up = system.cli("cluster", "up", str(_cluster_file(tmp_path, port, dash_port, name=name)))
    assert up.returncode == 0, up.stderr
    wait_for(lambda: _ray_nodes(_view(system, name)) == Counter({"head": 1}), 120,
             "the head's Ray to report", system.home / "logs")  # fmt: skip
    gcs = _view(system, name)["ray"]["gcs_address"]
    driver = tmp_path / "request.py"
    driver.write_text(REQUEST)

    def request(bundles: list[dict[str, float]]) -> None:
        ran = subprocess.run(
            [str(ray_bin / "python"), str(driver), gcs, json.dumps(bundles)],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert ran.returncode == 0, ran.stderr[-2000:]

    def wb_nodes() -> int:
        return sum(1 for n in _view(system, name)["nodes"] if n["node_type"] == "wb")

    request([{"B": 1}, {"B": 1}])  # two wb nodes (B: 1 each); no task ever runs on them
    wait_for(lambda: _ray_nodes(_view(system, name))["wb"] == 2, 300,
             "two wb nodes up in Ray", system.home / "logs")  # fmt: skip
    # Idle all along (nothing runs there), held past the 12 s idle timeout by the request.
    time.sleep(20)
    view = _view(system, name)
    assert wb_nodes() == 2 and _ray_nodes(view)["wb"] == 2, view["decisions"][-3:]
    assert not any(d["terminate"] for d in view["decisions"]), view["decisions"]

    request([])  # cleared: the idle workers go, the head stays
    wait_for(lambda: wb_nodes() == 0, 120, "the released workers to go", system.home / "logs")
    assert [n["node_type"] for n in _view(system, name)["nodes"]] == ["head"]
    assert system.cli("cluster", "down", name).returncode == 0
