"""Node type resources from the catalog, launch settings merged per type, the launch hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.autoscaler.resources import (
    LEGACY_HEAD,
    LEGACY_WORKER,
    docker_settings,
    launch_config,
    launch_hash,
    resolve_cluster,
    setup_commands,
)
from corral.shared.catalog import load_catalog
from corral.shared.config.cluster import Cluster
from corral.shared.config.localcloud import parse_local_cloud
from corral.shared.configio import parse_text, validate_doc

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
GIB = 2**30
WORKER_MEMORY = 0.7  # the share of a node's memory Ray offers as the `memory` resource


def cluster_from(text: str) -> Cluster:
    return validate_doc(Cluster, parse_text(text, "cluster.yaml"))


def seed(name: str) -> Cluster:
    return validate_doc(Cluster, parse_text((SEEDS / name).read_text(), name))


def memory(gib: float) -> float:
    return float(int(gib * GIB * WORKER_MEMORY))


def test_the_seed_types_are_filled_from_the_aws_catalog() -> None:
    resolved = resolve_cluster(seed("ray-cluster-node-types.yaml"), load_catalog())
    assert resolved.problems == [] and resolved.notices == []
    types = resolved.spec.node_types
    assert types["cpu_4_ondemand"].resources == {"CPU": 4.0, "memory": memory(16)}
    assert types["cpu_16_spot"].resources == {
        "CPU": 16.0,
        "memory": memory(64),
        "Custom1": 1.0,
        "is_spot": 1.0,
    }
    assert types["gpu_1_ondemand"].resources == {
        "CPU": 4.0,
        "memory": memory(61),
        "GPU": 1.0,
        "accelerator_type:K80": 1.0,
        "Custom2": 2.0,
    }
    assert types["gpu_8_ondemand"].resources == {
        "CPU": 32.0,
        "memory": memory(244),
        "GPU": 4.0,
        "accelerator_type:V100": 1.0,
    }
    assert (types["cpu_4_ondemand"].min_workers, types["cpu_4_ondemand"].max_workers) == (1, 5)
    assert types["gpu_8_ondemand"].instance_type == "p3.8xlarge"
    spec = resolved.spec
    assert (spec.head_node_type, spec.max_workers, spec.upscaling_speed) == (
        "cpu_4_ondemand",
        21,
        1.0,
    )
    assert spec.idle_timeout_s == 300.0


BASE = """
cluster_name: t
max_workers: 7
upscaling_speed: 2.5
idle_timeout_minutes: 1.5
provider: {type: %s}
head_node_type: head
available_node_types:
  head: {node_config: {%s}, resources: {}}
  w:
    node_config: {%s}
    %s
"""


def test_keys_the_file_writes_win_over_the_catalog() -> None:
    text = BASE % (
        "aws",
        "InstanceType: m5.large",
        "InstanceType: m4.4xlarge",
        "resources: {CPU: 2}",
    )
    resolved = resolve_cluster(cluster_from(text), load_catalog())
    assert resolved.spec.node_types["w"].resources == {"CPU": 2.0, "memory": memory(64)}
    # `resources: {}` still gets the catalog's values, as Ray fills it.
    assert resolved.spec.node_types["head"].resources["CPU"] == 2.0
    assert resolved.spec.node_types["w"].max_workers == 7  # the global max when unset
    assert (resolved.spec.upscaling_speed, resolved.spec.idle_timeout_s) == (2.5, 90.0)


def test_an_unknown_instance_type_needs_written_resources() -> None:
    text = BASE % ("aws", "InstanceType: m5.large", "InstanceType: x9.huge", "")
    resolved = resolve_cluster(cluster_from(text), load_catalog())
    assert resolved.problems == [
        (
            ("available_node_types", "w", "node_config", "InstanceType"),
            "instance type 'x9.huge' is not in the aws catalog; write its resources",
        )
    ]
    text = BASE % ("aws", "InstanceType: m5.large", "InstanceType: x9.huge", "resources: {CPU: 3}")
    resolved = resolve_cluster(cluster_from(text), load_catalog())
    assert resolved.problems == []
    assert resolved.spec.node_types["w"].resources == {"CPU": 3.0}
    assert resolved.notices == ["w: x9.huge is not in the aws catalog; resources as written"]


def test_an_unknown_instance_type_names_the_nearest_in_its_clouds_catalog() -> None:
    """Ray's GCP files name n1-standard-2; a misspelling of it says what it was meant to be."""
    text = BASE % ("gcp", "machineType: n1-standard-2", "machineType: n1-standrd-2", "")
    resolved = resolve_cluster(cluster_from(text), load_catalog())
    assert resolved.problems == [
        (
            ("available_node_types", "w", "node_config", "machineType"),
            "instance type 'n1-standrd-2' is not in the gcp catalog (did you mean "
            "'n1-standard-2'?); write its resources",
        )
    ]
    assert resolved.spec.node_types["head"].resources["CPU"] == 2.0  # n1-standard-2 is known


def test_gcp_machine_types_and_guest_accelerators() -> None:
    guest = (
        "machineType: zones/us-central1-a/machineTypes/n1-standard-8, "
        "guestAccelerators: [{acceleratorType: nvidia-tesla-v100, acceleratorCount: 1}]"
    )
    text = BASE % ("gcp", "machineType: n1-standard-8", guest, "")
    types = resolve_cluster(cluster_from(text), load_catalog()).spec.node_types
    assert "GPU" not in types["head"].resources  # the bare N1, not one carrying a GPU
    assert types["head"].resources["CPU"] == 8.0
    assert types["w"].resources["GPU"] == 1.0
    assert types["w"].resources["accelerator_type:V100"] == 1.0
    text = BASE % ("gcp", "machineType: n1-standard-8", "machineType: a2-highgpu-1g", "")
    types = resolve_cluster(cluster_from(text), load_catalog()).spec.node_types
    assert types["w"].resources["accelerator_type:A100"] == 1.0
    assert types["w"].resources["CPU"] == 12.0


LOCAL = """
instance_types:
  - {name: cpu-2, vcpus: 2, memory_gib: 4, price_usd_per_hour: 0.1}
  - {name: cpu-16, vcpus: 16, memory_gib: 64, price_usd_per_hour: 0.8}
  - {name: gpu-l4-1, vcpus: 4, memory_gib: 16, accelerators: {L4: 1}, price_usd_per_hour: 0.7}
  - {name: gpu-v100-4, vcpus: 32, memory_gib: 244, accelerators: {V100: 4},
     price_usd_per_hour: 12}
regions:
  - name: lab
    zones:
      - name: lab-a
        capacity: {cpu-2: 4, cpu-16: 4, gpu-l4-1: 2, gpu-v100-4: 1}
aliases:
  p2.xlarge: gpu-l4-1
"""


def test_local_cloud_plays_aws_types_by_alias_or_the_smallest_that_fits() -> None:
    local = parse_local_cloud(LOCAL, "local.yaml")
    resolved = resolve_cluster(seed("ray-cluster-node-types.yaml"), load_catalog(), local)
    assert resolved.problems == []
    types = resolved.spec.node_types
    assert types["gpu_1_ondemand"].instance_type == "gpu-l4-1"  # the alias
    assert types["gpu_1_ondemand"].resources["Custom2"] == 2.0  # the file's keys stay
    assert types["gpu_1_ondemand"].resources["accelerator_type:L4"] == 1.0
    assert types["cpu_4_ondemand"].instance_type == "cpu-16"  # 4 vCPUs and 16 GiB at least
    assert types["cpu_16_spot"].instance_type == "cpu-16"
    assert types["gpu_8_ondemand"].instance_type == "gpu-v100-4"
    assert types["gpu_8_ondemand"].resources["GPU"] == 4.0
    assert "gpu_1_ondemand: p2.xlarge runs as local gpu-l4-1 (alias)" in resolved.notices


def test_a_file_without_node_types_cannot_autoscale() -> None:
    resolved = resolve_cluster(seed("ray-cluster-basic.yaml"), load_catalog())
    assert resolved.problems == [
        ((), "no node types: write available_node_types and head_node_type to autoscale")
    ]


def test_a_legacy_file_becomes_two_node_types() -> None:
    text = """
cluster_name: old
min_workers: 1
max_workers: 4
provider: {type: aws}
head_node: {InstanceType: m5.large}
worker_nodes: {InstanceType: m5.xlarge}
"""
    spec = resolve_cluster(cluster_from(text), load_catalog()).spec
    assert list(spec.node_types) == [LEGACY_HEAD, LEGACY_WORKER]
    assert spec.head_node_type == LEGACY_HEAD
    worker = spec.node_types[LEGACY_WORKER]
    assert (worker.min_workers, worker.max_workers, worker.resources["CPU"]) == (1, 4, 4.0)
    assert spec.node_types[LEGACY_HEAD].max_workers == 0


COMMANDS = """
cluster_name: c
provider: {type: aws}
setup_commands: [common]
head_setup_commands: [head-only]
worker_setup_commands: [worker-default]
initialization_commands: [init-default]
head_node_type: cpu
available_node_types:
  cpu: {node_config: {InstanceType: m5.large}}
  gpu:
    node_config: {InstanceType: p3.2xlarge}
    worker_setup_commands: [pip install tensorflow-gpu]
    initialization_commands: [init-gpu]
"""


def test_setup_commands_top_level_first_per_type_lists_replace_the_global_ones() -> None:
    """Ray's python/ray/autoscaler/ray-schema.json, available_node_types' worker_setup_commands:
    "This node specfic list will override the global setup_commands and
    worker_setup_commands". This test once asserted ["common", <the type's list>], the
    misreading issue #45 names: the type's own list runs alone."""
    cluster = cluster_from(COMMANDS)
    assert setup_commands(cluster, "cpu", head=True) == ["common", "head-only"]
    assert setup_commands(cluster, "cpu") == ["common", "worker-default"]
    assert setup_commands(cluster, "gpu") == ["pip install tensorflow-gpu"]
    assert launch_config(cluster, "gpu").initialization_commands == ["init-gpu"]
    assert launch_config(cluster, "cpu").initialization_commands == ["init-default"]


def test_per_type_docker_keys_override_the_top_level_ones() -> None:
    cluster = seed("ray-cluster-docker-per-type.yaml")
    assert docker_settings(cluster, "gpu_1_ondemand") == {
        "image": "rayproject/ray-ml:latest-gpu",
        "container_name": "ray_container",
        "pull_before_run": True,
        "run_options": ["--ulimit nofile=65536:65536", "-v /home:/home"],
    }
    assert docker_settings(cluster, "head", head=True) == {
        "image": "rayproject/ray-ml:latest",
        "container_name": "ray_container",
        "pull_before_run": True,
        "run_options": ["--ulimit nofile=65536:65536"],
    }
    nested = cluster_from(
        """
cluster_name: d
provider: {type: aws}
docker: {image: base, container_name: c, pull_before_run: true, worker_run_options: [-x]}
head_node_type: h
available_node_types:
  h: {node_config: {}, resources: {}}
  w: {node_config: {}, resources: {CPU: 1},
      docker: {worker_image: special, pull_before_run: false, worker_run_options: [-y]}}
"""
    )
    settings = docker_settings(nested, "w")
    assert (settings["image"], settings["pull_before_run"], settings["run_options"]) == (
        "special",
        False,
        ["-y"],
    )
    assert docker_settings(nested, "h")["run_options"] == ["-x"]  # the top-level worker list
    assert docker_settings(cluster_from(COMMANDS), "cpu") == {}


def test_the_launch_hash_follows_the_node_config_only() -> None:
    a = launch_hash({"InstanceType": "m5.large", "ImageId": "ami-1"}, {"ssh_user": "ubuntu"})
    b = launch_hash({"ImageId": "ami-1", "InstanceType": "m5.large"}, {"ssh_user": "ubuntu"})
    c = launch_hash({"InstanceType": "m5.large", "ImageId": "ami-2"}, {"ssh_user": "ubuntu"})
    assert a == b != c
    before = resolve_cluster(cluster_from(COMMANDS), load_catalog()).spec.node_types
    changed = COMMANDS.replace("p3.2xlarge}", "p3.2xlarge, ImageId: ami-9}")
    after = resolve_cluster(cluster_from(changed), load_catalog()).spec.node_types
    assert before["gpu"].launch_hash != after["gpu"].launch_hash
    assert before["cpu"].launch_hash == after["cpu"].launch_hash


@pytest.mark.parametrize(
    "name", ["ray-cluster-node-types.yaml", "ray-cluster-docker-per-type.yaml"]
)
def test_launch_config_serializes(name: str) -> None:
    cluster = seed(name)
    for node_type in cluster.available_node_types or {}:
        config = launch_config(cluster, node_type)
        assert config.model_validate_json(config.model_dump_json()) == config


def test_a_node_config_reads_as_its_files_provider_type_writes_it() -> None:
    """Ray passes node_config to the cloud's API as written: an AWS file names InstanceType,
    a GCP file machineType (a path's last part) and attaches guestAccelerators; a provider
    type Ray has no reading for takes either key and attaches nothing."""
    from corral.shared.autoscaler.node_configs import node_configs

    gcp = {
        "machineType": "zones/us-central1-a/machineTypes/n1-standard-8",
        "guestAccelerators": [{"acceleratorType": "nvidia-tesla-v100", "acceleratorCount": 2}],
    }
    assert node_configs("gcp").instance_type(gcp) == "n1-standard-8"
    assert node_configs("GCP").attached_gpus(gcp) == (2, "V100")
    assert node_configs("aws").instance_type(gcp) is None  # not an AWS key
    assert node_configs("aws").instance_type({"InstanceType": "p3.2xlarge"}) == "p3.2xlarge"
    assert node_configs("aws").attached_gpus(gcp) == (0, None)
    moon = node_configs("moon")
    assert moon.instance_type({"machineType": "big"}) == "big"
    assert moon.type_key({"InstanceType": "x"}) == "InstanceType"
    assert moon.attached_gpus(gcp) == (0, None) and not moon.pods
    assert node_configs("kubernetes").pods
