"""A cluster node's launch request: its node type's node_config goes to AWS or Google Cloud as
written (and never to the local cloud), and reaches the provider's launch spec."""

from __future__ import annotations

from pathlib import Path

import yaml

from corral.services.runtime.autoscaling import node_task
from corral.services.runtime.deps import Deps
from corral.services.runtime.provisioning import _advanced_config
from corral.services.settings import Settings
from corral.services.state.clusters import ClusterNode, ClusterRecord
from corral.shared.config.cluster import Cluster
from corral.shared.records import ChainStep

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "tests" / "fixtures" / "seeds" / "ray-cluster-node-types.yaml"
LOCAL = REPO / "tests" / "fixtures" / "localcloud" / "cluster.yaml"


def _record(cloud: str | None) -> ClusterRecord:
    cluster = Cluster.model_validate(yaml.safe_load(SEED.read_text()))
    return ClusterRecord(
        name="c",
        uid="u1",
        file_name="c.yaml",
        cluster=cluster.model_dump(mode="json"),
        cloud=cloud,
        created_at=0.0,
        updated_at=0.0,
    )


def _node(node_type: str) -> ClusterNode:
    return ClusterNode(
        request_id="r-1", node_type=node_type, kind="worker", launch_hash="h", committed_at=0.0
    )


def test_node_config_goes_to_the_cloud_the_file_is_written_for(tmp_path: Path) -> None:
    deps = Deps(Settings(home=tmp_path, local_cloud_file=LOCAL))
    task = node_task(deps, _record(None), _node("cpu_16_spot"))
    assert task.resources.cloud == "aws" and task.resources.instance_type == "m4.4xlarge"
    assert task.advanced_instance_config == {
        "InstanceType": "m4.4xlarge",
        "InstanceMarketOptions": {"MarketType": "spot"},
    }
    cand = ChainStep.model_validate(
        {
            "cloud": "aws",
            "region": "us-east-1",
            "zone": "us-east-1a",
            "instance_type": "m4.4xlarge",
            "market": "on_demand",
        }
    )
    assert _advanced_config(task, cand)["InstanceMarketOptions"] == {"MarketType": "spot"}
    # Not on another cloud than the one the task pins.
    assert _advanced_config(task, cand.model_copy(update={"cloud": "gcp"})) == {}


def test_played_on_the_local_cloud_the_node_config_stays_behind(tmp_path: Path) -> None:
    deps = Deps(Settings(home=tmp_path, local_cloud_file=LOCAL))
    task = node_task(deps, _record("local"), _node("cpu_16_spot"))
    assert task.resources.cloud == "local" and task.resources.instance_type == "cpu-16"
    assert task.advanced_instance_config is None
