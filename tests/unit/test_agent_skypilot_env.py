"""SkyPilot's runtime variables in SkyPilot's formats.

The source: SkyPilot's ``docs/source/running-jobs/environment-variables.rst`` (the tables
"Environment variables for setup" and "Environment variables for run": their examples
``sky-2023-07-06-21-18-31-563597_myclus_1`` and ``{"cluster_name": "my-cluster-name", "cloud":
"GCP", "region": "us-central1", "zone": "us-central1-a"}``, IPs "one IP address" a line in
rank order, ``SKYPILOT_NUM_NODES`` "same value as ``$(echo "$SKYPILOT_NODE_IPS" | wc -l)``")
and the names in ``sky/skylet/constants.py``. SkyPilot's smoke test
``tests/smoke_tests/test_basic.py`` reads ``.cluster_name`` and ``.cloud`` of
``SKYPILOT_CLUSTER_INFO`` with jq; its region test reads ``.region``.
"""

from __future__ import annotations

import calendar
import json
import subprocess

import pytest

from corral.services.agent import skypilot_env as sky


def test_the_task_id_is_skypilots_example_format() -> None:
    created = calendar.timegm((2023, 7, 6, 21, 18, 31, 0, 0, 0)) + 0.563597
    assert sky.task_id(created, "myclus") == "sky-2023-07-06-21-18-31-563597_myclus_1"
    # A whole second: six zeros, never a shorter stamp.
    assert sky.task_id(float(int(created)), "r-1") == "sky-2023-07-06-21-18-31-000000_r-1_1"


def test_the_cluster_info_is_skypilots_json_with_its_four_keys() -> None:
    info = sky.cluster_info("my-cluster-name", "GCP", "us-central1", "us-central1-a")
    assert json.loads(info) == {
        "cluster_name": "my-cluster-name",
        "cloud": "GCP",
        "region": "us-central1",
        "zone": "us-central1-a",
    }
    assert list(json.loads(info)) == ["cluster_name", "cloud", "region", "zone"]


def test_the_ips_are_one_a_line_head_first_and_count_the_nodes() -> None:
    envs = sky.node_envs(1, ["10.0.0.5", "10.0.0.7", "10.0.0.9"])
    assert envs["SKYPILOT_NODE_IPS"] == "10.0.0.5\n10.0.0.7\n10.0.0.9"
    assert envs["SKYPILOT_SETUP_NODE_IPS"] == envs["SKYPILOT_NODE_IPS"]
    assert envs["SKYPILOT_NODE_RANK"] == envs["SKYPILOT_SETUP_NODE_RANK"] == "1"
    assert envs["SKYPILOT_NUM_NODES"] == "3"
    # What SkyPilot's distributed example computes from them, in bash.
    shell = subprocess.run(
        ["bash", "-c", 'echo "$SKYPILOT_NODE_IPS" | head -n1; echo "$SKYPILOT_NODE_IPS" | wc -l'],
        env=envs,
        capture_output=True,
        text=True,
        check=True,
    )
    head, count = shell.stdout.split()
    assert (head, count) == ("10.0.0.5", envs["SKYPILOT_NUM_NODES"])


def test_a_rank_outside_the_nodes_is_refused() -> None:
    with pytest.raises(ValueError, match="rank 2 is not one of 2"):
        sky.node_envs(2, ["10.0.0.5", "10.0.0.7"])


def test_the_launch_values_every_node_shares() -> None:
    envs = sky.launch_envs(
        cluster="r-abc",
        created_at=0.0,
        cloud="AWS",
        region="us-east-1",
        zone="us-east-1a",
        num_nodes=2,
        gpus_per_node=8,
    )
    assert envs == {
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NUM_GPUS_PER_NODE": "8",
        "SKYPILOT_SETUP_NUM_GPUS_PER_NODE": "8",
        "SKYPILOT_TASK_ID": "sky-1970-01-01-00-00-00-000000_r-abc_1",
        "SKYPILOT_CLUSTER_INFO": sky.cluster_info("r-abc", "AWS", "us-east-1", "us-east-1a"),
    }


def test_a_boot_script_without_an_agent_exports_what_one_machine_knows() -> None:
    script = "\n".join(
        [
            *sky.boot_exports("0", 1),
            'echo "$SKYPILOT_NODE_RANK|$SKYPILOT_NODE_IPS|$SKYPILOT_SETUP_NODE_IPS"',
        ]
    )
    said = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    rank, ips, setup_ips = said.stdout.strip().split("|")
    own = subprocess.run(["bash", "-c", "hostname -I 2>/dev/null | cut -d' ' -f1"],
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert (rank, ips, setup_ips) == ("0", own, own)
    # Several nodes: no agent learns the others' addresses; only a rank written per node.
    assert sky.boot_exports(None, 2) == []
    assert sky.boot_exports("1", 2) == [
        "export SKYPILOT_NODE_RANK=1",
        "export SKYPILOT_SETUP_NODE_RANK=1",
    ]
