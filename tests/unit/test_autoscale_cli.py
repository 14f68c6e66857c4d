"""``corral autoscale explain``: in-process through the app, and once as the console script."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.services.cli.main import app

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = REPO / "examples" / "clusters"
DEMANDS = REPO / "examples" / "demands"
CLUSTER = CLUSTERS / "multi-node-type.yaml"
NODES = CLUSTERS / "multi-node-type.nodes.yaml"
CORRAL = Path(sys.executable).parent / "corral"


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)


def corral(*args: str | Path) -> Ran:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def explain(*args: str | Path) -> Ran:
    return corral("autoscale", "explain", *args)


def test_json_plan_for_the_example_cluster() -> None:
    ran = explain(
        CLUSTER, "--demand", DEMANDS / "custom-resources.yaml", "--nodes", NODES, "--json"
    )
    assert ran.returncode == 0, ran.stderr
    plan = ran.json()
    assert set(plan) == {"launch", "terminate", "reasons"}
    # Custom1 work only fits cpu_16_spot; Custom2 work only gpu_1_ondemand.
    assert plan["launch"] == {"cpu_16_spot": 2, "gpu_1_ondemand": 1}
    # cpu4-a has idled 900 s; its type keeps cpu4-b for min_workers 1.
    assert plan["terminate"] == ["cpu4-a"]
    assert "terminate cpu4-a: idle 900 s > 300 s" in plan["reasons"]


def test_every_example_demand_gets_a_plan() -> None:
    for demand in sorted(DEMANDS.glob("*.yaml")):
        ran = explain(CLUSTER, "--demand", demand, "--nodes", NODES, "--json")
        assert ran.returncode == 0, (demand.name, ran.stderr)
        assert ran.json()["reasons"], demand.name


def test_every_example_cluster_resolves() -> None:
    empty = DEMANDS / "mixed.yaml"
    for cluster in sorted(CLUSTERS.glob("*.yaml")):
        if cluster.name.endswith(".nodes.yaml"):
            continue
        ran = explain(cluster, "--demand", empty, "--json")
        assert ran.returncode == 0, (cluster.name, ran.stderr)


def test_human_output_lists_launches_terminations_and_reasons() -> None:
    ran = explain(CLUSTER, "--demand", DEMANDS / "mixed.yaml", "--nodes", NODES)
    assert ran.returncode == 0, ran.stderr
    text = ran.stdout
    assert "cpu_16_spot (m4.4xlarge): {CPU: 16, memory: 44.8GiB, Custom1: 1, is_spot: 1}" in text
    assert "Nodes: 6 running, 1 pending" in text
    assert text.index("Launch:") < text.index("Terminate:") < text.index("Why:")
    assert "  - work that needs no GPU kept off GPU node types: gpu_8_ondemand" in text


def test_without_nodes_the_cluster_is_its_idle_head(tmp_path: Path) -> None:
    demand = write(tmp_path, "d.yaml", "bundles: [{resources: {CPU: 4}, count: 1}]\n")
    ran = explain(CLUSTER, "--demand", demand, "--json")
    assert ran.returncode == 0
    # The head holds the bundle; only min_workers asks for a node.
    assert ran.json()["launch"] == {"cpu_4_ondemand": 1}
    assert "the cluster is taken to be its head alone" in ran.stderr


def test_an_empty_demand_file_is_no_demand(tmp_path: Path) -> None:
    ran = explain(CLUSTER, "--demand", write(tmp_path, "d.yaml", ""), "--nodes", NODES, "--json")
    assert ran.returncode == 0
    assert sorted(ran.json()["terminate"]) == ["cpu4-a", "gpu1-a", "spot-b"]


def test_nodes_can_come_as_cluster_status_output(tmp_path: Path) -> None:
    status = {
        "nodes": [
            {"id": "h", "node_type": "cpu_4_ondemand", "state": "RUNNING", "idle_s": 0},
            {"id": "w", "node_type": "cpu_4_ondemand", "state": "running", "used": {"CPU": 1}},
        ],
        "demand": {},
        "last_decision": {},
    }
    nodes = write(tmp_path, "status.json", json.dumps(status))
    demand = write(tmp_path, "d.json", json.dumps({"bundles": [{"resources": {"GPU": 1}}]}))
    ran = explain(CLUSTER, "--demand", demand, "--nodes", nodes, "--json")
    assert ran.returncode == 0, ran.stderr
    assert ran.json()["launch"] == {"gpu_1_ondemand": 1}


def test_a_cooled_down_type_gives_way_to_the_next(tmp_path: Path) -> None:
    demand = write(tmp_path, "d.yaml", "bundles: [{resources: {CPU: 16}, count: 1}]\n")
    nodes = write(
        tmp_path,
        "n.yaml",
        "- {id: h, node_type: cpu_4_ondemand, state: running, used: {CPU: 4}}\n"
        "- {id: w, node_type: cpu_4_ondemand, state: running, used: {CPU: 4}}\n",
    )
    plain = explain(CLUSTER, "--demand", demand, "--nodes", nodes, "--json")
    assert plain.json()["launch"] == {"cpu_16_spot": 1}
    cooled = explain(
        CLUSTER, "--demand", demand, "--nodes", nodes, "--json", "--cooled-down", "cpu_16_spot"
    )
    assert cooled.json()["launch"] == {"gpu_8_ondemand": 1}
    assert any("cpu_16_spot is cooled down" in r for r in cooled.json()["reasons"])
    wrong = explain(CLUSTER, "--demand", demand, "--cooled-down", "cpu_17")
    assert wrong.returncode == 2
    assert "no such node type" in wrong.stderr


def test_exit_1_only_when_nothing_at_all_can_be_done(tmp_path: Path) -> None:
    nodes = write(
        tmp_path,
        "n.yaml",
        "- {id: h, node_type: cpu_4_ondemand, state: running}\n"
        "- {id: w, node_type: cpu_4_ondemand, state: running, used: {CPU: 4}}\n",
    )
    impossible = DEMANDS / "impossible.yaml"
    ran = explain(CLUSTER, "--demand", impossible, "--nodes", nodes, "--json")
    assert ran.returncode == 1
    assert ran.json()["reasons"] == ["unsatisfiable: 2 x {GPU: 8}: no node type can hold it"]
    # Some of the demand can run (on the idle head): an answer, exit 0.
    mixed = write(
        tmp_path,
        "d.yaml",
        "bundles: [{resources: {GPU: 8}, count: 2}, {resources: {CPU: 1}, count: 1}]\n",
    )
    assert explain(CLUSTER, "--demand", mixed, "--nodes", nodes).returncode == 0


def test_local_cloud_plays_the_aws_file(tmp_path: Path) -> None:
    local = write(
        tmp_path,
        "local.yaml",
        """
instance_types:
  - {name: small, vcpus: 4, memory_gib: 16, price_usd_per_hour: 0.2}
  - {name: big, vcpus: 16, memory_gib: 64, price_usd_per_hour: 0.8}
  - {name: gpus, vcpus: 32, memory_gib: 244, accelerators: {V100: 4}, price_usd_per_hour: 9}
regions:
  - name: lab
    zones: [{name: lab-a, capacity: {small: 4, big: 4, gpus: 2}}]
aliases: {p2.xlarge: gpus}
""",
    )
    demand = write(tmp_path, "d.yaml", "bundles: [{resources: {GPU: 1}, count: 1}]\n")
    ran = explain(CLUSTER, "--demand", demand, "--cloud", "local", "--local-cloud", local, "--json")
    assert ran.returncode == 0, ran.stderr
    assert "gpu_1_ondemand: p2.xlarge runs as local gpus (alias)" in ran.stderr
    assert "cpu_16_spot: m4.4xlarge runs as local big" in ran.stderr
    bad = explain(CLUSTER, "--demand", demand, "--cloud", "azure")
    assert bad.returncode == 2
    assert "expected one of local, aws, gcp, kubernetes" in bad.stderr


# (file, text, line, field, what the message must say)
BAD_INPUTS = [
    (
        "demand.yaml",
        "bundles:\n  - {resources: {CPU: 1}, count: 2}\n  - {resource: {CPU: 1}}\n",
        3,
        "bundles[1].resource",
        "unknown field",
    ),
    (
        "demand.yaml",
        "bundles:\n  - {resources: {CPU: 1}, count: 0}\n",
        2,
        "bundles[0].count",
        "greater than or equal to 1",
    ),
    (
        "demand.yaml",
        "bundles:\n  - {resources: {CPU: -1}}\n",
        2,
        "bundles[0].resources",
        "expected an amount >= 0",
    ),
    (
        "demand.yaml",
        "placement_groups:\n  - {strategy: SCATTER, bundles: [{CPU: 1}]}\n",
        2,
        "placement_groups[0].strategy",
        "expected one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD",
    ),
    (
        "nodes.yaml",
        "- {id: a, node_type: x, state: running}\n- {id: b, node_type: x, state: booting}\n",
        2,
        "[1].state",
        "expected one of REQUESTED, RUNNING",
    ),
    (
        "nodes.yaml",
        "- {id: a, node_type: x, state: running}\n- {id: a, node_type: x, state: running}\n",
        2,
        "[1].id",
        "listed more than once",
    ),
    (
        "nodes.yaml",
        "- {id: a, node_type: x, state: running, idle_s: -3}\n",
        1,
        "[0].idle_s",
        "greater than or equal to 0",
    ),
]


@pytest.mark.parametrize(("name", "text", "line", "field", "message"), BAD_INPUTS)
def test_bad_inputs_exit_2_naming_file_line_and_field(
    tmp_path: Path, name: str, text: str, line: int, field: str, message: str
) -> None:
    path = write(tmp_path, name, text)
    ok_demand = write(tmp_path, "ok.yaml", "bundles: []\n")
    if name == "demand.yaml":
        ran = explain(CLUSTER, "--demand", path)
    else:
        ran = explain(CLUSTER, "--demand", ok_demand, "--nodes", path)
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert any(
        text.startswith(f"{path}:{line}: {field}: ") and message in text for text in lines
    ), lines
    assert "Traceback" not in ran.stderr


def test_a_cluster_file_with_an_unknown_instance_type_exits_2(tmp_path: Path) -> None:
    text = CLUSTER.read_text().replace("InstanceType: p3.8xlarge", "InstanceType: p9.mega")
    cluster = write(tmp_path, "cluster.yaml", text)
    ran = explain(cluster, "--demand", DEMANDS / "mixed.yaml", "--json")
    assert ran.returncode == 2
    issues = ran.json()["issues"]
    assert [(i["line"], i["field"]) for i in issues] == [
        (38, "available_node_types.gpu_8_ondemand.node_config.InstanceType")
    ]
    assert "'p9.mega' is not in the aws catalog" in issues[0]["message"]


def test_the_console_script() -> None:
    ran = subprocess.run(
        [
            str(CORRAL),
            "autoscale",
            "explain",
            CLUSTER,
            "--demand",
            DEMANDS / "gpu-training.yaml",
            "--nodes",
            NODES,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    plan = json.loads(ran.stdout)
    assert plan["launch"] == {"gpu_8_ondemand": 1}  # two 4-GPU trainers: the pending node + one
