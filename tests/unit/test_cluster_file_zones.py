"""A Ray cluster file's ``provider.availability_zone`` is where its nodes launch.

Ray's schema (python/ray/autoscaler/ray-schema.json, ``provider.availability_zone``) and its
examples: the AWS example writes ``availability_zone: us-west-2a,us-west-2b`` (the zones tried
in turn), the GCP example one zone, ``us-west1-a``. Corral's plain cluster-file rules (AWS,
Google Cloud) put the zone, or the zones in order, in each node's launch resources; the planner
then plans that node in them alone.
"""

from __future__ import annotations

import yaml

from corral.services.providers.cluster_files import ClusterFiles, availability_zones
from corral.shared.catalog import load_catalog
from corral.shared.config.cluster import Cluster
from corral.shared.config.task import Task
from corral.shared.planner import plan


def _cluster(provider: str) -> Cluster:
    return Cluster.model_validate(
        yaml.safe_load(
            f"""
cluster_name: zones
provider: {provider}
head_node_type: head
available_node_types:
  head: {{node_config: {{InstanceType: m5.large}}, resources: {{CPU: 2}}}}
"""
        )
    )


def _zones_planned(cluster: Cluster, cloud: str, instance_type: str) -> list[str]:
    resources, _config = ClusterFiles().node_launch(cluster, {}, {}, instance_type)
    task = Task.model_validate({"resources": {"cloud": cloud, **resources}, "run": "true"})
    return list(dict.fromkeys(c.zone for c in plan(task, load_catalog()).candidates))


def test_the_aws_examples_zone_list_is_tried_in_its_order_and_nowhere_else() -> None:
    cluster = _cluster("{type: aws, region: us-west-2, availability_zone: 'us-west-2b,us-west-2a'}")
    assert availability_zones(cluster) == ["us-west-2b", "us-west-2a"]
    resources, _ = ClusterFiles().node_launch(cluster, {}, {}, "m5.large")
    assert resources == {
        "instance_type": "m5.large",
        "region": "us-west-2",
        "ordered": [{"zone": "us-west-2b"}, {"zone": "us-west-2a"}],
    }
    assert _zones_planned(cluster, "aws", "m5.large") == ["us-west-2b", "us-west-2a"]


def test_a_gcp_files_one_zone_is_the_nodes_zone() -> None:
    cluster = _cluster("{type: gcp, region: us-central1, availability_zone: us-central1-b}")
    resources, _ = ClusterFiles().node_launch(cluster, {}, {}, "n2-standard-2")
    assert resources["zone"] == "us-central1-b"
    assert _zones_planned(cluster, "gcp", "n2-standard-2") == ["us-central1-b"]


def test_without_a_zone_every_zone_of_the_region() -> None:
    cluster = _cluster("{type: aws, region: us-west-2}")
    resources, _ = ClusterFiles().node_launch(cluster, {}, {}, "m5.large")
    assert "zone" not in resources and "ordered" not in resources
    assert len(_zones_planned(cluster, "aws", "m5.large")) > 1
