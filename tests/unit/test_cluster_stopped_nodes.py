"""``provider.cache_stopped_nodes``: the decision (which workers are stopped rather than
terminated, which stopped workers a scale-up starts again), pure, and its classification.

Ray's own cases translated (ray-project/ray):
- python/ray/tests/test_autoscaler.py ``testSetupCommandsWithNoNodeCaching``: without caching a
  removed node is terminated and the next launch is a new node;
- ``testSetupCommandsWithStoppedNodeCachingNoDocker``: with caching the removed node is
  stopped, and the next launch starts that same node again, no other;
- ``testMultiNodeReuse``: three stopped workers, a scale-up to ten starts the three again and
  launches seven new;
- python/ray/autoscaler/_private/aws/node_provider.py (``create_node``, ``terminate_node``;
  Ray's tests mock EC2 there): the setting defaults to true; spot nodes are terminated, not
  stopped; only stopped nodes of the same node type and launch config hash are reused.
Where Corral differs (a stopped node whose launch config changed is terminated, Ray leaves it
stopped; the most recently stopped node is started first, Ray takes EC2's order), the test
says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.shared.autoscaler import ClusterSpec, NodeTypeSpec
from corral.shared.autoscaler.stopped import (
    StoppedNode,
    caches_stopped_nodes,
    outdated,
    reuse,
    scale_down,
    spot_types,
)
from corral.shared.config.cluster import Cluster
from corral.shared.config.detect import load_config


def _spec(**hashes: str) -> ClusterSpec:
    types = {
        "head": NodeTypeSpec(resources={"CPU": 2}, launch_hash="h-head"),
        **{
            name: NodeTypeSpec(resources={"CPU": 4}, max_workers=10, launch_hash=h)
            for name, h in hashes.items()
        },
    }
    return ClusterSpec(head_node_type="head", max_workers=20, node_types=types)


def _cluster(provider: str, types: str = "") -> Cluster:
    import yaml

    text = (
        f"cluster_name: c\nprovider: {provider}\nhead_node_type: head\navailable_node_types:\n"
        "  head: {node_config: {InstanceType: m5.large}}\n" + types
    )
    return Cluster.model_validate(yaml.safe_load(text))


def test_no_caching_terminates_and_launches_new() -> None:
    """testSetupCommandsWithNoNodeCaching: a removed node is terminated (nothing is kept to
    reuse, so the next launch is a new node)."""
    assert scale_down(caching=False, can_stop=True, spot=False) == "terminate"
    started, new = reuse({"cpu": 1}, [], _spec(cpu="h1"))
    assert started == {} and new == {"cpu": 1}


def test_caching_stops_the_node_and_starts_that_same_node_again() -> None:
    """testSetupCommandsWithStoppedNodeCachingNoDocker: the removed worker is stopped; the
    next launch of its type starts it again and creates nothing new."""
    assert scale_down(caching=True, can_stop=True, spot=False) == "stop"
    stopped = [StoppedNode("n-0", "cpu", "h1", stopped_at=100.0)]
    started, new = reuse({"cpu": 1}, stopped, _spec(cpu="h1"))
    assert started == {"cpu": ["n-0"]} and new == {}


def test_three_stopped_and_a_scale_up_to_ten_starts_three_and_launches_seven() -> None:
    """testMultiNodeReuse."""
    stopped = [StoppedNode(f"n-{i}", "cpu", "h1", stopped_at=100.0 + i) for i in range(3)]
    started, new = reuse({"cpu": 10}, stopped, _spec(cpu="h1"))
    assert sorted(started["cpu"]) == ["n-0", "n-1", "n-2"] and new == {"cpu": 7}


def test_only_the_same_node_type_and_launch_hash_are_reused() -> None:
    """Ray's AWS create_node filters stopped instances by node kind, user node type and
    launch config hash."""
    stopped = [
        StoppedNode("gpu-0", "gpu", "g1", 100.0),
        StoppedNode("cpu-old", "cpu", "h-old", 100.0),
        StoppedNode("cpu-0", "cpu", "h1", 90.0),
    ]
    started, new = reuse({"cpu": 2}, stopped, _spec(cpu="h1", gpu="g1"))
    assert started == {"cpu": ["cpu-0"]} and new == {"cpu": 1}


def test_the_most_recently_stopped_is_started_first() -> None:
    """Corral's order (Ray's AWS provider takes EC2's listing order): the newest stop first,
    then by id, so a retried tick starts the same nodes."""
    stopped = [
        StoppedNode("b", "cpu", "h1", 100.0),
        StoppedNode("a", "cpu", "h1", 300.0),
        StoppedNode("c", "cpu", "h1", 300.0),
    ]
    started, _ = reuse({"cpu": 2}, stopped, _spec(cpu="h1"))
    assert started == {"cpu": ["a", "c"]}


def test_stopped_nodes_no_launch_can_start_are_outdated() -> None:
    """Corral differs from Ray here: a stopped worker of a type the file dropped, or whose
    launch config changed, is terminated (Ray keeps it stopped, billing its disk, until
    `ray down`)."""
    stopped = [
        StoppedNode("keep", "cpu", "h1", 1.0),
        StoppedNode("changed", "cpu", "h0", 1.0),
        StoppedNode("dropped", "tpu", "t1", 1.0),
    ]
    assert outdated(stopped, _spec(cpu="h1")) == ["changed", "dropped"]


def test_spot_workers_heads_and_clouds_without_stop_are_terminated() -> None:
    """Ray's AWS terminate_node: a spot instance is terminated, not stopped. A head is never
    stopped by a scale-down; a cloud that cannot stop terminates."""
    assert scale_down(caching=True, can_stop=True, spot=True) == "terminate"
    assert scale_down(caching=True, can_stop=True, spot=False, head=True) == "terminate"
    assert scale_down(caching=True, can_stop=False, spot=False) == "terminate"
    cluster = _cluster(
        "{type: aws, region: us-east-1}",
        "  spot: {node_config: {InstanceType: m5.large, "
        "InstanceMarketOptions: {MarketType: spot}}}\n"
        "  ondemand: {node_config: {InstanceType: m5.large}}\n",
    )
    assert spot_types(cluster, ["spot", "ondemand", "missing"]) == frozenset({"spot"})


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("{type: aws, region: us-east-1}", True),  # Ray's AWS default: true
        ("{type: gcp, region: us-central1, project_id: p}", True),
        ("{type: aws, region: us-east-1, cache_stopped_nodes: false}", False),
        ("{type: local}", False),
        ("{type: local, cache_stopped_nodes: true}", True),
    ],
)
def test_the_setting_with_rays_default(provider: str, expected: bool) -> None:
    assert caches_stopped_nodes(_cluster(provider)) is expected


def test_honoured_on_aws_and_gcp_noticed_elsewhere(tmp_path: Path) -> None:
    """Ray's schema: cache_stopped_nodes "Whether to try to reuse previously stopped nodes
    instead of launching nodes. This will also cause the autoscaler to stop nodes instead of
    terminating them." Honoured for AWS and GCP files (no notice); a provider whose machines
    Corral does not stop is told so at the field's line."""
    path = tmp_path / "cluster.yaml"
    text = (
        "cluster_name: c\nprovider:\n  type: aws\n  region: us-west-2\n"
        "  cache_stopped_nodes: true\nhead_node_type: head\navailable_node_types:\n"
        "  head: {node_config: {InstanceType: m5.large}, resources: {CPU: 2}}\n"
    )
    path.write_text(text)
    assert not [n for n in load_config(path, "cluster").notices if "cache_stopped" in n]
    path.write_text(text.replace("type: aws\n  region: us-west-2", "type: local\n  x: 1"))
    assert [n for n in load_config(path, "cluster").notices if "cache_stopped" in n] == [
        f"{path}:5: provider.cache_stopped_nodes: accepted; the local provider's machines are "
        "not stopped: Corral terminates the workers it scales down and launches new ones to "
        "scale up (workers are stopped and started again on AWS and Google Cloud)"
    ]


# ------------------------------------------------------------------ the autoscaler's use of it
def _record(**nodes: dict[str, object]) -> object:
    from corral.services.state.clusters import ClusterNode, ClusterRecord

    rec = ClusterRecord(
        name="c", uid="u1", file_name="c.yaml", cluster={}, created_at=0.0, updated_at=0.0
    )
    for node_id, fields in nodes.items():
        rec.nodes[node_id] = ClusterNode.model_validate(
            {"request_id": node_id, "committed_at": 0.0, "kind": "worker", **fields}
        )
    return rec


def test_a_decision_stops_up_workers_of_the_current_config_and_starts_stopped_ones() -> None:
    from corral.services.runtime.cluster_stops import Policy, decide

    rec: Any = _record(
        up={"node_type": "cpu", "launch_hash": "h1"},
        booting={"node_type": "cpu", "launch_hash": "h1"},
        old={"node_type": "cpu", "launch_hash": "h0"},
        spotty={"node_type": "spot", "launch_hash": "s1"},
        asleep={"node_type": "cpu", "launch_hash": "h1", "stopped_at": 5.0},
        stale={"node_type": "cpu", "launch_hash": "h0", "stopped_at": 5.0},
    )
    spec = _spec(cpu="h1", spot="s1")
    ready = [StoppedNode("asleep", "cpu", "h1", 5.0), StoppedNode("stale", "cpu", "h0", 5.0)]
    rule = Policy(stops=True, spot=frozenset({"spot"}))
    launch, changes = decide(
        rec,
        spec,
        rule,
        ready,
        {"cpu": 2},
        ["up", "booting", "old", "spotty"],
        {"up", "old", "spotty"},
        now=50.0,
    )
    assert launch == {"cpu": 1}  # one started again, one new
    assert changes.start == ["asleep"] and changes.terminate == ["stale"]
    assert changes.stop == ["up"]  # not the booting one, the outdated one or the spot one
    assert rec.nodes["up"].stopped_at == 50.0 and rec.nodes["up"].terminate_sent_at is None
    for gone in ("booting", "old", "spotty", "stale"):
        assert rec.nodes[gone].terminate_sent_at == 50.0 and rec.nodes[gone].stopped_at is None
    assert rec.nodes["asleep"].stopped_at is None and rec.nodes["asleep"].restart_at == 50.0
    assert [n.request_id for n in rec.stopped_nodes()] == ["up"]
    assert any("cache_stopped_nodes" in r for r in changes.reasons)

    # Without caching (the file says false, or the cloud cannot stop): every removal terminates.
    rec2: Any = _record(up={"node_type": "cpu", "launch_hash": "h1"})
    _, changes = decide(rec2, spec, Policy(stops=False), [], {}, ["up"], {"up"}, now=60.0)
    assert changes.stop == [] and rec2.nodes["up"].terminate_sent_at == 60.0


def test_an_interrupted_tick_is_carried_out_and_a_restart_that_never_came_back_ends(
    redis_url: str, tmp_path: Path
) -> None:
    from corral.services.runtime.cluster_stops import catch_up
    from corral.services.runtime.deps import Deps
    from corral.services.settings import Settings
    from corral.shared.lifecycle import RequestState

    deps = Deps(Settings(redis_url=redis_url, home=tmp_path))  # start deadline: 60 s
    rec: Any = _record(
        stopping={"node_type": "cpu", "launch_hash": "h1", "stopped_at": 10.0},
        starting={"node_type": "cpu", "launch_hash": "h1", "restart_at": 10.0},
    )
    stopping, starting = rec.nodes["stopping"], rec.nodes["starting"]
    assert catch_up(deps, stopping, RequestState.RUNNING, 11.0) == "stop"
    assert catch_up(deps, stopping, RequestState.STOPPED, 11.0) is None
    assert catch_up(deps, starting, RequestState.STOPPED, 30.0) == "start"
    assert catch_up(deps, starting, RequestState.STOPPED, 71.0) == "terminate"
    assert catch_up(deps, starting, RequestState.RUNNING, 71.0) is None


def test_status_shows_stopped_workers_and_the_decisions_stops_and_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from corral.services.cli import cluster_cmd

    view = {
        "name": "c",
        "state": "active",
        "cloud": "aws",
        "nodes": [
            {
                "id": "n-1",
                "node_type": "cpu",
                "kind": "worker",
                "state": "STOPPED",
                "idle_s": 0.0,
                "used": {},
            },
        ],
        "last_decision": {
            "launch": {},
            "terminate": [],
            "stop": ["n-1"],
            "start": [],
            "reasons": ["stop rather than terminate n-1: cache_stopped_nodes"],
        },
    }
    cluster_cmd._print_status(view)
    printed = capsys.readouterr().out
    assert "STOPPED" in printed
    assert "Last decision: launch nothing; terminate 0; stop 1" in printed


def test_stopped_nodes_are_settled_against_their_requests(redis_url: str, tmp_path: Path) -> None:
    """Only a STOPPED request's node can start again; one still RUNNING waits for its stop;
    one started by hand is coming back; one whose request ended is over; one in any other
    state (never up) is terminated."""
    from corral.services.runtime.cluster_stops import settle
    from corral.services.runtime.deps import Deps
    from corral.services.settings import Settings
    from corral.shared.lifecycle import RequestState
    from corral.shared.records import LaunchRequest

    deps = Deps(Settings(redis_url=redis_url, home=tmp_path))
    states = {
        "asleep": RequestState.STOPPED,
        "still-up": RequestState.RUNNING,
        "by-hand": RequestState.STARTING,
        "gone": RequestState.TERMINATED,
        "never-up": RequestState.PROVISIONING,
    }
    for rid, state in states.items():
        req = LaunchRequest(id=rid, task={}, state=state, created_at=0, updated_at=0)
        assert deps.store.create_request(req)
    fields = {"node_type": "cpu", "launch_hash": "h1", "stopped_at": 5.0}
    rec: Any = _record(**{rid: fields for rid in [*states, "unsubmitted"]})
    ready = settle(deps, rec)
    assert ready == [StoppedNode("asleep", "cpu", "h1", 5.0)]
    nodes = rec.nodes
    assert nodes["still-up"].stopped_at == 5.0 and nodes["still-up"].terminate_sent_at is None
    assert nodes["by-hand"].stopped_at is None and nodes["by-hand"].restart_at is not None
    assert nodes["gone"].ended == "request TERMINATED"
    for leaving in ("never-up", "unsubmitted"):
        assert nodes[leaving].stopped_at is None and nodes[leaving].terminate_sent_at is not None
