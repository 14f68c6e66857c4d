"""A Determined pool's provider on the real launch path (issue #45 item 4): on Google Cloud
(the Compute API fake the tests own) the zone, image, network, labels and tags the file names
are what the insert carries; with no credentials for a pool's cloud, ``pools apply`` warns,
naming the cloud and what is missing, and ``corral why`` on a task waiting there names it.

(The AWS pool on moto, whose agents launch in the file's region, AMI and subnet, is in
test_node_pools.py, which has the moto installation and the machines' player.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloud_vms import gcp_env, start_with_agents
from fakes.gcp_compute import FakeCompute
from harness import System, wait_for

pytestmark = pytest.mark.integration


def _master(tmp_path: Path, provider: dict[str, Any]) -> Path:
    path = tmp_path / "master.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "resource_manager": {
                    "default_aux_resource_pool": "pool",
                    "default_compute_resource_pool": "pool",
                },
                "resource_pools": [{"pool_name": "pool", "provider": provider}],
            }
        )
    )
    return path


def _launch(system: System, tmp: Path, name: str) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "resources": {"slots": 1}, "run": "echo hi"}))
    done = system.cli("launch", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def test_a_determined_gcp_pool_inserts_in_the_files_zone_with_its_image_and_network(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    with FakeCompute(project="corral-test") as fake:
        system = start_with_agents(make_system(env=gcp_env(fake), ATTEMPT_DEADLINE_S="60"))
        image = "projects/det-images/global/images/det-agent-1"
        network = "projects/corral-test/global/networks/det"
        subnetwork = "projects/corral-test/regions/us-central1/subnetworks/det-agents"
        master = _master(
            tmp_path,
            {
                "type": "gcp",
                "project": "corral-test",
                "zone": "us-central1-c",  # not the first zone the catalog lists
                "instance_type": {"machine_type": "n2-standard-2"},
                "instance_slots": 1,
                "boot_disk_source_image": image,
                "boot_disk_size": 150,
                "labels": {"team": "vision"},
                "network_interface": {
                    "network": network,
                    "subnetwork": subnetwork,
                    "external_ip": True,
                },
                "network_tags": ["det-agent"],
                "max_instances": 1,
            },
        )
        applied = system.cli("pools", "apply", str(master), "--name", "det-gcp")
        assert applied.returncode == 0, applied.stderr
        assert "warning" not in applied.stderr, applied.stderr  # the fake's credentials do
        job = _launch(system, tmp_path, "gcp-job")
        wait_for(
            lambda: any(
                i["body"].get("labels", {}).get("corral-pool") == "det-gcp" for i in fake.inserts
            ),
            60,
            "the agent's insert",
        )
        [insert] = [
            i for i in fake.inserts if i["body"].get("labels", {}).get("corral-pool") == "det-gcp"
        ]
        body = insert["body"]
        assert insert["zone"] == "us-central1-c"
        assert body["machineType"].endswith("zones/us-central1-c/machineTypes/n2-standard-2")
        [boot] = [d for d in body["disks"] if d.get("boot")]
        assert boot["initializeParams"]["sourceImage"] == image
        assert str(boot["initializeParams"]["diskSizeGb"]) == "150"
        [nic] = body["networkInterfaces"]
        assert (nic["network"], nic["subnetwork"]) == (network, subnetwork)
        assert nic["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT"
        assert body["labels"]["team"] == "vision"
        assert body["tags"]["items"] == ["det-agent"]
        assert system.cli("terminate", job).returncode == 0


def test_a_pool_on_a_cloud_without_credentials_is_applied_with_a_warning_and_why_names_it(
    make_system: Callable[..., System], tmp_path: Path
) -> None:
    """Issue #45: `pools apply` with no AWS credentials accepted the pool silently, and the
    task then sat with the cause only in a worker's log."""
    nowhere = tmp_path / "no-such-file"
    system = make_system(
        env={
            "CORRAL_CLOUDS": json.dumps(["local", "aws"]),
            "AWS_SHARED_CREDENTIALS_FILE": str(nowhere),
            "AWS_CONFIG_FILE": str(nowhere),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        system.env.pop(key, None)
    system.start_api()
    system.start_worker("schedule")
    system.start_worker("provision")
    system.start_beat()
    master = _master(
        tmp_path,
        {"type": "aws", "region": "us-west-2", "instance_type": "m5.large", "instance_slots": 1},
    )
    applied = system.cli("pools", "apply", str(master), "--name", "det-dry")
    assert applied.returncode == 0, applied.stderr  # registered: credentials may come later
    assert "warning: AWS (aws) has no credentials here" in applied.stderr, applied.stderr
    assert "resource pool pool" in applied.stderr, applied.stderr
    assert "AWS_ACCESS_KEY_ID" in applied.stderr  # what is missing: where boto3 looks
    job = _launch(system, tmp_path, "dry-job")

    def why() -> dict[str, Any]:
        done = system.cli("why", job, "--json")
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        return found

    wait_for(lambda: why()["code"] == "cloud_not_ready", 60, "why to name the cloud")
    said = why()
    assert said["cloud"] == "aws"
    assert "pool pool's agents cannot launch: AWS (aws) has no credentials here" in said["reason"]
    plain = system.cli("why", job)
    assert "no credentials" in plain.stdout, plain.stdout
    assert system.cli("terminate", job).returncode == 0
