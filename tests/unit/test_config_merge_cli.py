"""`corral config merge`, run as the real console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "merge"
CORRAL = Path(sys.executable).parent / "corral"


def corral(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``corral config merge ARGS`` inside the fixtures folder (so messages name files
    the way a user typed them)."""
    proc = subprocess.run(
        [str(CORRAL), "config", "merge", *args],
        cwd=FIXTURES,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def fixture(name: str) -> Any:
    return yaml.safe_load((FIXTURES / name).read_text())


def test_aws_tag_added_printed_as_yaml() -> None:
    proc = corral("--cloud", "aws", "aws_pool_template.yaml", "aws_override_tag.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    merged = yaml.safe_load(proc.stdout)
    assert merged["TagSpecifications"][0]["Tags"] == [
        {"Key": "machine-pool", "Value": "demo-machine-pool"},
        {"Key": "cost-center", "Value": "ml-research"},
        {"Key": "team", "Value": "ml-research"},
    ]
    assert (
        merged["CapacityReservationSpecification"]
        == fixture("aws_reservation_template.yaml")["CapacityReservationSpecification"]
    )
    # Keys come out in the template's order, not sorted.
    assert list(merged) == [
        "CapacityReservationSpecification",
        "TagSpecifications",
        "BlockDeviceMappings",
    ]


def test_aws_block_device_added_printed_as_json() -> None:
    proc = corral(
        "--cloud",
        "aws",
        "aws_reservation_template.yaml",
        "aws_override_block_device.yaml",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": "cr-xxx"}
        },
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/sdf",
                "Ebs": {"VolumeSize": 2000, "VolumeType": "gp3", "DeleteOnTermination": True},
            }
        ],
    }


def test_gcp_camel_case_template_with_snake_case_override() -> None:
    proc = corral("--cloud", "gcp", "gcp_pool_template.yaml", "gcp_override.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    props = json.loads(proc.stdout)["instanceProperties"]
    assert props["labels"] == {
        "machine-pool": "demo-machine-pool",
        "team": "ml-research",
        "workload": "llm-finetune",
    }
    assert props["disks"][0]["deviceName"] == "boot"
    assert props["disks"][0]["boot"] is True
    assert props["disks"][1]["device_name"] == "data-0"
    assert props["reservationAffinity"]["consumeReservationType"] == "SPECIFIC_RESERVATION"


def test_kubernetes_alias() -> None:
    proc = corral("--cloud", "k8s", "k8s_template.yaml", "k8s_override.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    (ray,) = json.loads(proc.stdout)["spec"]["containers"]
    assert [e["name"] for e in ray["env"]] == ["NCCL_DEBUG", "HF_HOME"]
    assert ray["env"][0]["value"] == "INFO"


def test_patch_delete_is_refused_naming_file_line_and_path() -> None:
    proc = corral("--cloud", "aws", "aws_pool_template.yaml", "aws_override_delete.yaml")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(
        "aws_override_delete.yaml:4: BlockDeviceMappings[0].$patch: patch directive "
        "'$patch: delete' refused"
    )


def test_null_over_a_template_key_is_refused_in_the_other_spelling() -> None:
    proc = corral("--cloud", "gcp", "gcp_reservation_template.yaml", "gcp_override_null.yaml")
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "gcp_override_null.yaml:3: instance_properties.reservation_affinity: null would remove "
        "'reservationAffinity'"
    )


def test_missing_identity_key_is_refused_with_json_issues() -> None:
    proc = corral(
        "--cloud", "kubernetes", "k8s_template.yaml", "k8s_override_missing_name.yaml", "--json"
    )
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["issues"] == [
        {
            "file": "k8s_override_missing_name.yaml",
            "line": 4,
            "field": "spec.containers[0]",
            "message": report["issues"][0]["message"],
        }
    ]
    assert "'name'" in report["issues"][0]["message"]


def test_an_ambiguous_template_is_blamed_on_the_template_file() -> None:
    proc = corral("--cloud", "aws", "aws_template_duplicate.yaml", "aws_override_sdb.yaml")
    assert proc.returncode == 2
    assert proc.stderr.startswith("aws_template_duplicate.yaml:5: BlockDeviceMappings[1]: ")


def test_a_list_at_the_top_level_is_refused() -> None:
    proc = corral("--cloud", "aws", "aws_pool_template.yaml", "not_a_mapping.yaml")
    assert proc.returncode == 2
    assert proc.stderr.startswith("not_a_mapping.yaml:1: expected the workload's")


def test_unreadable_input_exits_2() -> None:
    broken = corral("--cloud", "aws", "broken.yaml", "aws_override_tag.yaml")
    assert broken.returncode == 2
    assert broken.stderr.startswith("broken.yaml:4: not valid YAML or JSON")
    missing = corral("--cloud", "aws", "aws_pool_template.yaml", "no-such-file.yaml")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "no-such-file.yaml: no such file"


def test_an_unknown_cloud_exits_2() -> None:
    proc = corral("--cloud", "azure", "aws_pool_template.yaml", "aws_override_tag.yaml", "--json")
    assert proc.returncode == 2
    (issue,) = json.loads(proc.stdout)["issues"]
    assert issue["file"] == "--cloud"
    assert "'azure'" in issue["message"]
