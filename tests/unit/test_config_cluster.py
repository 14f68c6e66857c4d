"""Ray cluster files: the seed's snippets (completed where they are fragments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.shared.config.cluster import Cluster
from corral.shared.config.detect import load_as, load_config
from corral.shared.configio import ConfigError, parse_text, validate_doc

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"


def test_basic_seed_as_written() -> None:
    loaded = load_config(SEEDS / "ray-cluster-basic.yaml")
    cluster = loaded.model
    assert isinstance(cluster, Cluster)
    assert (cluster.cluster_name, cluster.max_workers) == ("basic-ray", 0)
    assert cluster.provider.type == "kubernetes"
    assert cluster.setup_commands == ["pip install ray[all]", "touch /tmp/some_file.txt"]
    assert [n.split(": ")[1] for n in loaded.notices] == ["auth"]


def test_autoscaling_seed() -> None:
    cluster, _ = load_as(SEEDS / "ray-cluster-autoscaling.yaml", Cluster)
    assert (cluster.min_workers, cluster.upscaling_speed, cluster.idle_timeout_minutes) == (
        0,
        1.0,
        5,
    )


def test_node_types_seed() -> None:
    cluster, _ = load_as(SEEDS / "ray-cluster-node-types.yaml", Cluster)
    types = cluster.available_node_types
    assert types is not None
    assert list(types) == ["cpu_4_ondemand", "cpu_16_spot", "gpu_1_ondemand", "gpu_8_ondemand"]
    assert types["cpu_16_spot"].resources == {"Custom1": 1, "is_spot": 1}
    assert types["cpu_16_spot"].node_config["InstanceMarketOptions"] == {"MarketType": "spot"}
    assert types["cpu_4_ondemand"].resources is None  # the autoscaler fills it in
    assert types["gpu_8_ondemand"].worker_setup_commands == ["pip install tensorflow-gpu"]
    assert cluster.head_node_type == "cpu_4_ondemand"
    assert cluster.worker_bounds("cpu_4_ondemand") == (1, 5)
    assert cluster.worker_bounds("gpu_8_ondemand") == (0, 2)


def test_docker_per_type_seed_keys() -> None:
    cluster, _ = load_as(SEEDS / "ray-cluster-docker-per-type.yaml", Cluster)
    assert cluster.available_node_types is not None
    gpu = cluster.available_node_types["gpu_1_ondemand"]
    assert gpu.pull_before_run is True
    assert gpu.worker_image == ["rayproject/ray-ml:latest-gpu"]
    assert gpu.worker_run_options == ["-v /home:/home"]


def test_nested_docker_and_v2_keys() -> None:
    cluster = validate_doc(
        Cluster,
        parse_text(
            "cluster_name: c\nprovider: {type: gcp, region: us-west1, availability_zone: "
            "us-west1-a, project_id: p, my_plugin_key: 1}\nhead_node_type: h\n"
            "available_node_types:\n  h: {node_config: {machineType: n1-standard-4}}\n"
            "  w:\n    node_config: {}\n    labels: {tier: gpu}\n    idle_timeout_s: 120\n"
            "    docker: {worker_image: img, pull_before_run: false}\n",
            "c.yaml",
        ),
    )
    assert cluster.available_node_types is not None
    worker = cluster.available_node_types["w"]
    assert worker.idle_timeout_s == 120
    assert worker.docker is not None and worker.docker.worker_image == "img"
    assert cluster.provider.model_extra == {"my_plugin_key": 1}  # plugins' keys pass through


@pytest.mark.parametrize(
    ("text", "line", "loc", "needle"),
    [
        (
            "cluster_name: c\nprovider: {type: aws}\nmax_worker: 2\n",
            3,
            "max_worker",
            "unknown field",
        ),
        (
            "cluster_name: c\nprovider: {type: aws}\nupscaling_speed: fast\n",
            3,
            "upscaling_speed",
            "valid number",
        ),
        (
            "cluster_name: c\nprovider: {type: aws}\nautoscaling_mode: turbo\n",
            3,
            "autoscaling_mode",
            "expected one of default, aggressive",
        ),
        (
            "cluster_name: c\nprovider: {region: us-east-1}\n",
            2,
            "provider.type",
            "required field is missing",
        ),
        ("provider: {type: aws}\n", 1, "cluster_name", "required field is missing"),
        (
            "cluster_name: c\nprovider: {type: aws}\navailable_node_types:\n  w:\n"
            "    node_config: {}\n    max_wrkers: 2\n",
            6,
            "available_node_types.w.max_wrkers",
            "unknown field",
        ),
        (
            "cluster_name: c\nprovider: {type: aws}\navailable_node_types:\n  w:\n"
            "    resources: {CPU: 2}\n",
            4,
            "available_node_types.w.node_config",
            "required field is missing",
        ),
    ],
)
def test_mistakes(text: str, line: int, loc: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_doc(Cluster, parse_text(text, "c.yaml"))
    [issue] = info.value.issues
    assert (issue.line, issue.loc) == (line, loc)
    assert needle in issue.message


def test_head_node_type_must_name_a_node_type(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    text = (SEEDS / "ray-cluster-node-types.yaml").read_text()
    path.write_text(text.replace("head_node_type: cpu_4_ondemand", "head_node_type: cpu_4"))
    with pytest.raises(ConfigError) as info:
        load_as(path, Cluster)
    [issue] = info.value.issues
    assert (issue.line, issue.loc) == (42, "head_node_type")
    assert "expected one of cpu_4_ondemand, cpu_16_spot, gpu_1_ondemand, gpu_8_ondemand" in (
        issue.message
    )
