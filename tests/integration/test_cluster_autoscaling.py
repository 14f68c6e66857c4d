"""Cluster autoscaling end to end: the seed's multi-node-type Ray cluster file (written for AWS)
played with ``--cloud local`` on a local cloud whose aliases give each of its instance types a
local one; the API, workers and beat as real processes on the test's own redis-server.

Timers are short: a tick every 0.5 s (beat), idle timeout 3 s (``idle_timeout_minutes: 0.05``
in the test's copy of the file), a short cool-down and capacity-error memory.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.services.client import Client

from harness import System, wait_for
from local_processes import is_agent

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "tests" / "fixtures" / "seeds" / "ray-cluster-node-types.yaml"
LOCAL = REPO / "tests" / "fixtures" / "localcloud"
NAME = "multi-node-type"
HEAD = "cpu_4_ondemand"


def _cluster_file(tmp: Path, **top: Any) -> Path:
    """The seed's file with a short idle timeout; its `pip install` setup commands become
    echoes (the local nodes run them for real)."""
    data = yaml.safe_load(SEED.read_text())
    data["idle_timeout_minutes"] = 0.05
    data.update(top)
    for node_type in data["available_node_types"].values():
        if "worker_setup_commands" in node_type:
            node_type["worker_setup_commands"] = ["echo gpu-setup-done"]
    path = tmp / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _system(make_system: Callable[..., System], cloud: str, **timers: str) -> System:
    system = make_system(LOCAL / cloud, **timers)
    system.start_api()
    for role in ("schedule", "provision"):
        system.start_worker(role)
    system.start_worker("autoscale", name="autoscale-0")
    system.start_beat()
    return system


@pytest.fixture(scope="module")
def shared(make_module_system: Callable[..., System]) -> System:
    """One installation on cluster.yaml for the tests that neither stop a component nor
    change a timer; each ends with the cluster down and every node's process gone."""
    return _system(make_module_system, "cluster.yaml")


def _view(system: System) -> dict[str, Any]:
    resp = system.get(f"/v1/clusters/{NAME}")  # the kept-open client: waits look ten times a second
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def _running(view: dict[str, Any]) -> Counter[str]:
    return Counter(n["node_type"] for n in view["nodes"] if n["state"] == "RUNNING")


def _wait_nodes(system: System, want: dict[str, int], timeout_s: float = 45) -> dict[str, Any]:
    """Wait until exactly ``want`` nodes run (by type) and none is pending or leaving."""
    seen: dict[str, Any] = {}

    def reached() -> bool:
        seen.update(_view(system))
        states = {n["state"] for n in seen["nodes"]}
        return _running(seen) == Counter(want) and states == {"RUNNING"}

    try:
        wait_for(reached, timeout_s, f"nodes {want}", system.home / "logs")
    except pytest.fail.Exception as exc:  # the last look, not the empty one before the wait
        raise pytest.fail.Exception(f"{exc}\n(last seen: {seen.get('nodes')})") from None
    return seen


def _api(system: System) -> Client:
    """The client the `corral cluster` commands use, called in this process: a `corral` process
    per call cost most of a second of CPU on a loaded machine, and a test makes up to eight.
    The commands themselves are run once each, in the first test."""
    return Client(system.api_url, system.token)


def _demand(system: System, text: str) -> None:
    """`corral cluster demand NAME FILE` with a file holding ``text``."""
    with _api(system) as client:
        client.set_demand(NAME, text, "demand.yaml")


def _up(system: System, cluster: Path) -> dict[str, Any]:
    """`corral cluster up FILE --cloud local` (a file without file mounts)."""
    with _api(system) as client:
        made: dict[str, Any] = client.create_cluster(
            cluster.read_text(), str(cluster), "local"
        ).document()
    return made


def _agents(system: System) -> list[int]:
    """Live local-cloud agent processes started by this installation."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
        if is_agent(proc) and str(system.home).encode() in env and not zombie:
            pids.append(int(proc.name))
    return pids


def _launched(view: dict[str, Any]) -> list[dict[str, int]]:
    return [d["launch"] for d in view["decisions"] if d["launch"]]


def _down(system: System, cli: bool = False) -> None:
    """Take the cluster down (with `corral cluster down` when ``cli``) and wait until it is
    gone with every node's process."""
    if cli:
        done = system.cli("cluster", "down", NAME)
        assert done.returncode == 0, done.stderr
    else:
        with _api(system) as client:
            client.delete_cluster(NAME)

    # Watched through the API (a `corral cluster list` per look started a Python process ten
    # times a second).
    def gone() -> bool:
        listed = system.get("/v1/clusters")
        return listed.status_code == 200 and not listed.json()["clusters"] and not _agents(system)

    wait_for(gone, 40, "the cluster to be gone with all its processes", system.home / "logs")


def test_demand_steers_node_types_caps_launches_and_reaps_idle_nodes(
    shared: System, tmp_path: Path
) -> None:
    system = shared
    # The `corral cluster` commands, each once against a real API (the rest of this module
    # calls their client in process).
    cluster = _cluster_file(tmp_path, upscaling_speed=0.5)
    done = system.cli("cluster", "up", str(cluster), "--cloud", "local", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made["name"] == NAME and made["cloud"] == "local"

    # Up: the head and cpu_4_ondemand's min_workers (1), nothing else.
    view = _wait_nodes(system, {HEAD: 2})
    kinds = Counter(n["kind"] for n in view["nodes"])
    assert kinds == Counter({"head": 1, "worker": 1})
    first = {n["id"] for n in view["nodes"]}
    status = system.cli("cluster", "status", NAME, "--json")
    assert status.returncode == 0, status.stderr
    assert set(json.loads(status.stdout)) >= {"nodes", "demand", "last_decision"}

    # CPU-only work that no running node holds: a CPU type, though gpu_8_ondemand (32 CPUs)
    # would hold both bundles on one node.
    demand = tmp_path / "demand.yaml"
    demand.write_text("bundles: [{resources: {CPU: 8}, count: 2}]\n")
    done = system.cli("cluster", "demand", NAME, str(demand))
    assert done.returncode == 0, done.stderr
    view = _wait_nodes(system, {HEAD: 2, "cpu_16_spot": 1})
    assert _launched(view)[-1] == {"cpu_16_spot": 1}

    # GPUs launch the GPU type that fits them; Custom2 steers to gpu_1_ondemand (the only type
    # with it, 2 per node), Custom1 to cpu_16_spot (one runs already, a second is needed).
    _demand(
        system,
        "bundles:\n"
        "  - {resources: {GPU: 4}}\n"
        "  - {resources: {Custom2: 2}, count: 2}\n"
        "  - {resources: {Custom1: 1}, count: 2}\n",
    )
    view = _wait_nodes(
        system, {HEAD: 2, "cpu_16_spot": 2, "gpu_8_ondemand": 1, "gpu_1_ondemand": 2}
    )
    assert _launched(view)[-1] == {"cpu_16_spot": 1, "gpu_1_ondemand": 2, "gpu_8_ondemand": 1}

    # 10 Custom1 nodes wanted, 8 to launch. The demand is a standing request (Ray's
    # request_resources), which Ray lets past its upscaling cap (max(5, 0.5 x 2 running of the
    # type) = 5): all 8 are launched at once. The GPU nodes, no longer asked for, go idle
    # meanwhile and are reaped. (The cap on pending work: tests/unit/test_ray_peer_cases.py.)
    _demand(system, "bundles: [{resources: {Custom1: 1}, count: 10}]\n")
    most_in_flight = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        view = _view(system)
        pending = [n for n in view["nodes"] if n["state"] == "REQUESTED"]
        most_in_flight = max(most_in_flight, len(pending))
        if _running(view)["cpu_16_spot"] == 10 and not pending:
            break
        time.sleep(0.1)
    assert _running(view)["cpu_16_spot"] == 10
    assert most_in_flight > 5  # past the cap (8 when polled in time)
    burst = next(d for d in view["decisions"] if d["launch"].get("cpu_16_spot") == 8)
    assert not any("upscaling cap" in r for r in burst["reasons"])
    # The GPU node, idle since the demand moved on, is reaped (within its idle timeout and a
    # tick or two; it may still be there the moment the last cpu node came up).
    wait_for(lambda: _running(_view(system))["gpu_8_ondemand"] == 0, 30, "the idle GPU node reaped")

    # No demand: every idle worker goes after 3 s, but never below min_workers (the first
    # cpu_4_ondemand worker stays), and never the head.
    _demand(system, "")
    view = _wait_nodes(system, {HEAD: 2}, 30)
    assert {n["id"] for n in view["nodes"]} == first
    assert any("min_workers 1" in r for r in view["last_decision"]["reasons"])
    _down(system, cli=True)
    assert json.loads(system.cli("cluster", "list", "--json").stdout)["clusters"] == []


def test_sold_out_type_is_cooled_down_and_used_again_after(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    # gpu-k80-1 (gpu_1_ondemand) meets a capacity error on its first launch only. The
    # cool-down is seen within a second of the failure on a loaded machine (the fallback node
    # boots in 0.2 s), so 5 s holds it with room; the test then waits for it to end (at 8 s it
    # waited about 3 s longer, past the V100 node's reaping).
    system = _system(
        make_system, "cluster-soldout.yaml", AUTOSCALE_COOLDOWN_S="5", BLOCKED_TTL_S="2"
    )
    _up(system, _cluster_file(tmp_path))
    _wait_nodes(system, {HEAD: 2})

    _demand(system, "bundles: [{resources: {GPU: 1}}]\n")
    # The K80 launch fails for capacity: the type is cooled down, the next type that holds
    # the bundle (gpu_8_ondemand) is launched instead.
    view = _wait_nodes(system, {HEAD: 2, "gpu_8_ondemand": 1})
    assert _launched(view)[-2:] == [{"gpu_1_ondemand": 1}, {"gpu_8_ondemand": 1}]
    assert "gpu_1_ondemand" in view["cooldowns"]
    fell_back = view["decisions"][-1]["reasons"]
    assert any("gpu_1_ondemand is cooled down" in r for r in fell_back)

    # No demand: the V100 node is reaped; once the cool-down ends the K80 type is used again.
    _demand(system, "")
    _wait_nodes(system, {HEAD: 2})
    wait_for(lambda: not _view(system)["cooldowns"], 20, "the cool-down to end")
    _demand(system, "bundles: [{resources: {GPU: 1}}]\n")
    view = _wait_nodes(system, {HEAD: 2, "gpu_1_ondemand": 1})
    assert _launched(view)[-1] == {"gpu_1_ondemand": 1}
    _down(system)


def test_killed_autoscaling_worker_launches_nothing_twice(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    from corral.services.runtime import autoscaling
    from corral.services.runtime.deps import Deps
    from corral.services.settings import Settings

    system = _system(make_system, "cluster.yaml")
    _up(system, _cluster_file(tmp_path))
    _wait_nodes(system, {HEAD: 2})

    # A worker killed (SIGKILL) just as it ticks on a new demand; another takes over. The
    # demand is set with the command, not in process: returning a tenth of a second sooner
    # moved the kill into the tick's submits, between a node's request being created and
    # admitted. The next tick's catch-up skips a request that exists, so that one waited for
    # reconcile to hand it on (attempt_deadline_s + 30 s: 45 s, this wait's whole timeout).
    demand = tmp_path / "demand.yaml"
    demand.write_text("bundles: [{resources: {Custom1: 1}, count: 3}]\n")
    done = system.cli("cluster", "demand", NAME, str(demand))
    assert done.returncode == 0, done.stderr
    time.sleep(0.05)
    os.killpg(system.procs["autoscale-0"].pid, signal.SIGKILL)
    system.start_worker("autoscale", name="autoscale-1")
    system.start_worker("autoscale", name="autoscale-2")
    _wait_nodes(system, {HEAD: 2, "cpu_16_spot": 3})

    # A tick that committed its decision and died before carrying it out, made by hand: the
    # next tick submits exactly the committed nodes, once.
    settings = Settings(
        redis_url=system.env["CORRAL_REDIS_URL"],
        local_cloud_file=LOCAL / "cluster.yaml",
        home=system.home,
    )
    deps = Deps(settings)
    store = autoscaling.clusters(deps)

    def set_demand(r: Any) -> bool:
        r.demand = {"bundles": [{"resources": {"Custom1": 1}, "count": 5}]}
        return True

    # Committed while no worker can tick in between: the cluster's claim is held by "us".
    wait_for(lambda: deps.store.claim(f"autoscale:{NAME}", "test", 30), 10, "the claim")
    store.update(NAME, set_demand)
    rec = store.get(NAME)
    assert rec is not None
    new, launched, _ = autoscaling.decide_once(deps, rec)
    assert store.write(new, rec.version) == 1
    assert [n.node_type for n in launched] == ["cpu_16_spot", "cpu_16_spot"]
    assert all(deps.store.get_request(n.request_id) is None for n in launched)
    deps.store.release(f"autoscale:{NAME}", "test")

    view = _wait_nodes(system, {HEAD: 2, "cpu_16_spot": 5})
    ids = {n["id"] for n in view["nodes"]}
    assert {n.request_id for n in launched} <= ids
    # Every node is one request with one instance: nothing was launched twice.
    with system.client() as c:
        instances = c.get("/v1/instances").json()["instances"]
    per_request = Counter(i["request_id"] for i in instances)
    assert set(per_request) == ids
    assert set(per_request.values()) == {1}
    assert len(_agents(system)) == 7
    _down(system)


def test_work_queued_on_a_node_is_demand(shared: System, tmp_path: Path) -> None:
    # The head's workload reports queued work through CORRAL_DEMAND_FILE; no `cluster demand`.
    queued = json.dumps({"bundles": [{"resources": {"Custom2": 1}, "count": 1}]})
    cluster = _cluster_file(
        tmp_path, head_setup_commands=[f"echo '{queued}' > \"$CORRAL_DEMAND_FILE\""]
    )
    system = shared
    _up(system, cluster)
    # Custom2 exists only on gpu_1_ondemand: the queued bundle brings one up.
    view = _wait_nodes(system, {HEAD: 2, "gpu_1_ondemand": 1}, timeout_s=60)
    assert view["demand"] in (None, {}, {"bundles": [], "placement_groups": []})
    _down(system)
