"""advanced_instance_config merge rules: the seed's examples, each cloud's rules, refusals."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral.shared.merge import MergeError, merge_advanced_instance_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "merge"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((FIXTURES / name).read_text())
    assert isinstance(data, dict)
    return data


def merge(cloud: str, template: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = merge_advanced_instance_config(cloud, template, override)
    return merged


# --- the seed's examples ---------------------------------------------------------------------


def test_aws_reservation_template_with_a_tag_added() -> None:
    merged = merge("aws", load("aws_reservation_template.yaml"), load("aws_override_tag.yaml"))
    assert merged == {
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": "cr-xxx"}
        },
        "TagSpecifications": [
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "team", "Value": "ml-research"},
                    {"Key": "cost-center", "Value": "ml-research"},
                ],
            }
        ],
    }


def test_aws_pool_tags_merge_by_key_within_resource_type() -> None:
    merged = merge("aws", load("aws_pool_template.yaml"), load("aws_override_tag.yaml"))
    assert merged["TagSpecifications"] == [
        {
            "ResourceType": "instance",
            "Tags": [
                {"Key": "machine-pool", "Value": "demo-machine-pool"},  # kept
                {"Key": "cost-center", "Value": "ml-research"},  # overridden in place
                {"Key": "team", "Value": "ml-research"},  # added
            ],
        }
    ]
    assert merged["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-xxx"}
    }


def test_aws_pool_template_with_a_block_device_added() -> None:
    merged = merge("aws", load("aws_pool_template.yaml"), load("aws_override_block_device.yaml"))
    assert merged["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 500, "VolumeType": "gp3"}},
        {
            "DeviceName": "/dev/sdf",
            "Ebs": {"VolumeSize": 2000, "VolumeType": "gp3", "DeleteOnTermination": True},
        },
    ]
    assert [t["Key"] for t in merged["TagSpecifications"][0]["Tags"]] == [
        "machine-pool",
        "cost-center",
    ]


def test_gcp_reservation_template_camel_case_with_snake_case_override() -> None:
    merged = merge("gcp", load("gcp_reservation_template.yaml"), load("gcp_override.yaml"))
    # One instance-properties mapping, in the template's spelling, not two.
    assert list(merged) == ["instanceProperties"]
    props = merged["instanceProperties"]
    assert props["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["projects/my-project/reservations/shared-a100"],
    }
    assert props["labels"] == {"team": "ml-research", "workload": "llm-finetune"}
    assert [d["device_name"] for d in props["disks"]] == ["data-0"]


def test_gcp_pool_template_boot_disk_stays_first() -> None:
    merged = merge("gcp", load("gcp_pool_template.yaml"), load("gcp_override.yaml"))
    props = merged["instanceProperties"]
    assert props["labels"] == {
        "machine-pool": "demo-machine-pool",
        "team": "ml-research",
        "workload": "llm-finetune",
    }
    disks = props["disks"]
    assert [d.get("deviceName", d.get("device_name")) for d in disks] == ["boot", "data-0"]
    assert disks[0]["boot"] is True
    assert disks[0]["initializeParams"]["sourceImage"].endswith("gpu-base")
    assert disks[1]["initialize_params"] == {"disk_size_gb": "2000", "disk_type": "pd-ssd"}


def test_kubernetes_strategic_merge_of_the_fixture() -> None:
    merged = merge("kubernetes", load("k8s_template.yaml"), load("k8s_override.yaml"))
    assert merged["metadata"]["labels"] == {
        "machine-pool": "demo-machine-pool",
        "team": "ml-research",
    }
    (ray,) = merged["spec"]["containers"]
    assert ray["env"] == [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "HF_HOME", "value": "/data/hf"},
    ]
    assert ray["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "data", "mountPath": "/data"},
    ]
    assert ray["resources"] == {"limits": {"nvidia.com/gpu": 8}, "requests": {"memory": "900Gi"}}
    assert [v["name"] for v in merged["spec"]["volumes"]] == ["dshm", "data"]
    assert merged["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"


# --- AWS rules -------------------------------------------------------------------------------


def test_aws_nested_mappings_are_replaced_whole() -> None:
    template = load("aws_reservation_template.yaml")
    override = {"CapacityReservationSpecification": {"CapacityReservationPreference": "open"}}
    merged = merge("aws", template, override)
    assert merged["CapacityReservationSpecification"] == {"CapacityReservationPreference": "open"}


def test_aws_matched_entries_merge_shallowly() -> None:
    template = {
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/sda1",
                "Ebs": {"VolumeSize": 500, "VolumeType": "gp3"},
                "NoDevice": "",
            }
        ]
    }
    override = {"BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 900}}]}
    (entry,) = merge("aws", template, override)["BlockDeviceMappings"]
    assert entry == {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 900}, "NoDevice": ""}


def test_aws_network_interfaces_match_on_device_and_card_index() -> None:
    template = {
        "NetworkInterfaces": [
            {"DeviceIndex": 0, "SubnetId": "subnet-a"},
            {"DeviceIndex": 1, "NetworkCardIndex": 1, "InterfaceType": "efa"},
        ]
    }
    override = {
        "NetworkInterfaces": [
            {"DeviceIndex": 0, "NetworkCardIndex": 0, "Groups": ["sg-1"]},  # card 0 is the default
            {"DeviceIndex": 1, "NetworkCardIndex": 2, "InterfaceType": "efa"},  # a new card
            {"DeviceIndex": 1, "NetworkCardIndex": 1, "DeleteOnTermination": True},
        ]
    }
    merged = merge("aws", template, override)["NetworkInterfaces"]
    assert merged == [
        {"DeviceIndex": 0, "SubnetId": "subnet-a", "NetworkCardIndex": 0, "Groups": ["sg-1"]},
        {
            "DeviceIndex": 1,
            "NetworkCardIndex": 1,
            "InterfaceType": "efa",
            "DeleteOnTermination": True,
        },
        {"DeviceIndex": 1, "NetworkCardIndex": 2, "InterfaceType": "efa"},
    ]


def test_aws_tag_specifications_for_a_new_resource_type_are_appended() -> None:
    template = {
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "a", "Value": "1"}]}]
    }
    override = {
        "TagSpecifications": [{"ResourceType": "volume", "Tags": [{"Key": "b", "Value": "2"}]}]
    }
    merged = merge("aws", template, override)
    assert [s["ResourceType"] for s in merged["TagSpecifications"]] == ["instance", "volume"]


def test_aws_keys_are_case_sensitive() -> None:
    merged = merge("aws", {"EbsOptimized": True}, {"ebsOptimized": False})
    assert merged == {"EbsOptimized": True, "ebsOptimized": False}


# --- Google Cloud rules ----------------------------------------------------------------------


def test_gcp_network_interfaces_merge_by_position() -> None:
    template = {
        "instance_properties": {
            "network_interfaces": [
                {"network": "global/networks/a", "subnetwork": "regions/r/subnetworks/a"},
            ]
        }
    }
    override = {
        "instanceProperties": {
            "networkInterfaces": [
                {"nicType": "GVNIC"},
                {"network": "global/networks/b"},
            ]
        }
    }
    merged = merge("gcp", template, override)
    assert merged == {
        "instance_properties": {
            "network_interfaces": [
                {
                    "network": "global/networks/a",
                    "subnetwork": "regions/r/subnetworks/a",
                    "nicType": "GVNIC",
                },
                {"network": "global/networks/b"},
            ]
        }
    }


def test_gcp_disk_fields_match_in_either_spelling() -> None:
    template = {
        "instanceProperties": {
            "disks": [{"deviceName": "data", "autoDelete": True, "mode": "READ_WRITE"}]
        }
    }
    override = {"instance_properties": {"disks": [{"device_name": "data", "auto_delete": False}]}}
    (disk,) = merge("gcp", template, override)["instanceProperties"]["disks"]
    assert disk == {"deviceName": "data", "autoDelete": False, "mode": "READ_WRITE"}


def test_gcp_labels_are_names_not_fields() -> None:
    template = {"instance_properties": {"labels": {"team_name": "a"}}}
    merged = merge("gcp", template, {"instance_properties": {"labels": {"teamName": "b"}}})
    assert merged["instance_properties"]["labels"] == {"team_name": "a", "teamName": "b"}


def test_gcp_boot_disk_without_device_name_extends_the_templates() -> None:
    template = {
        "instance_properties": {
            "disks": [
                {"device_name": "data-0"},
                {"device_name": "root", "boot": True, "auto_delete": True},
            ]
        }
    }
    override = {"instance_properties": {"disks": [{"boot": True, "auto_delete": False}]}}
    disks = merge("gcp", template, override)["instance_properties"]["disks"]
    assert disks == [
        {"device_name": "root", "boot": True, "auto_delete": False},
        {"device_name": "data-0"},
    ]


def test_gcp_a_boot_disk_from_the_override_goes_first() -> None:
    template = {"instance_properties": {"disks": [{"device_name": "data-0"}]}}
    override = {"instance_properties": {"disks": [{"device_name": "root", "boot": True}]}}
    disks = merge("gcp", template, override)["instance_properties"]["disks"]
    assert [d["device_name"] for d in disks] == ["root", "data-0"]


def test_gcp_everything_else_is_replaced_whole() -> None:
    template = load("gcp_reservation_template.yaml")
    override = {
        "instance_properties": {
            "reservation_affinity": {"consume_reservation_type": "ANY_RESERVATION"}
        }
    }
    merged = merge("gcp", template, override)
    assert merged == {
        "instanceProperties": {
            "reservationAffinity": {"consume_reservation_type": "ANY_RESERVATION"}
        }
    }


# --- Kubernetes rules ------------------------------------------------------------------------


def test_kubernetes_tolerations_and_args_are_replaced() -> None:
    template = {
        "spec": {
            "tolerations": [{"key": "a", "operator": "Exists"}],
            "containers": [{"name": "ray", "args": ["--x"]}],
        }
    }
    override = {
        "spec": {
            "tolerations": [{"key": "b", "operator": "Exists"}],
            "containers": [{"name": "ray", "args": ["--y"]}],
        }
    }
    merged = merge("k8s", template, override)
    assert merged["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert merged["spec"]["containers"] == [{"name": "ray", "args": ["--y"]}]


def test_kubernetes_ports_merge_by_container_port_and_host_aliases_by_ip() -> None:
    template = {
        "spec": {
            "containers": [{"name": "ray", "ports": [{"containerPort": 8265, "name": "dash"}]}],
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
        }
    }
    override = {
        "spec": {
            "containers": [
                {
                    "name": "ray",
                    "ports": [{"containerPort": 8265, "protocol": "TCP"}, {"containerPort": 6379}],
                }
            ],
            "hostAliases": [{"ip": "10.0.0.2", "hostnames": ["b"]}],
        }
    }
    spec = merge("kubernetes", template, override)["spec"]
    assert spec["containers"][0]["ports"] == [
        {"containerPort": 8265, "name": "dash", "protocol": "TCP"},
        {"containerPort": 6379},
    ]
    assert [h["ip"] for h in spec["hostAliases"]] == ["10.0.0.1", "10.0.0.2"]


def test_kubernetes_bare_pod_spec_and_init_containers() -> None:
    template = {
        "initContainers": [{"name": "fetch", "image": "busybox"}],
        "containers": [{"name": "ray", "image": "ray:2.40"}],
    }
    override = {
        "containers": [{"name": "sidecar", "image": "envoy"}],
        "initContainers": [{"name": "fetch", "image": "busybox:1.36"}],
    }
    merged = merge("kubernetes", template, override)
    assert merged["containers"] == [
        {"name": "ray", "image": "ray:2.40"},
        {"name": "sidecar", "image": "envoy"},
    ]
    assert merged["initContainers"] == [{"name": "fetch", "image": "busybox:1.36"}]


def test_kubernetes_finalizers_merge_as_a_set() -> None:
    merged = merge(
        "k8s",
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": ["b", "c", "c"]}},
    )
    assert merged["metadata"]["finalizers"] == ["a", "b", "c"]


def test_patch_merge_directive_is_accepted_and_dropped() -> None:
    merged = merge(
        "k8s",
        {"spec": {"containers": [{"name": "ray"}]}},
        {"spec": {"containers": [{"name": "ray", "image": "x", "$patch": "merge"}]}},
    )
    assert merged == {"spec": {"containers": [{"name": "ray", "image": "x"}]}}


# --- refusals (the cases are in fixtures/merge/refusals.yaml) --------------------------------

REFUSALS = load("refusals.yaml")


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refused(case: str) -> None:
    spec = REFUSALS[case]
    template, override = spec["template"], spec["override"]
    before = copy.deepcopy((template, override))
    with pytest.raises(MergeError) as info:
        merge(spec["cloud"], template, override)
    assert info.value.path == spec["path"]
    assert info.value.side == spec.get("side", "override")
    assert spec["says"] in info.value.message
    assert (template, override) == before


def test_null_over_a_key_the_template_lacks_is_dropped() -> None:
    merged = merge(
        "aws",
        {"EbsOptimized": True},
        {
            "DisableApiTermination": None,
            "MetadataOptions": {"HttpTokens": None, "HttpEndpoint": "on"},
        },
    )
    assert merged == {"EbsOptimized": True, "MetadataOptions": {"HttpEndpoint": "on"}}


def test_merge_error_is_a_value_error_with_a_path() -> None:
    error = MergeError("a.b[0]", "no")
    assert (error.path, error.message, str(error)) == ("a.b[0]", "no", "a.b[0]: no")
    assert isinstance(error, ValueError)


# --- clouds and purity -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "cloud"), [("google", "gcp"), ("k8s", "kubernetes"), ("AWS", "aws")]
)
def test_cloud_aliases(alias: str, cloud: str) -> None:
    template = {"instance_properties": {"labels": {"a": "1"}}, "spec": {"x": {"a": 1}}}
    override = {"instance_properties": {"labels": {"b": "2"}}, "spec": {"x": {"b": 2}}}
    assert merge(alias, template, override) == merge(cloud, template, override)


def test_unknown_cloud_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown cloud 'azure'"):
        merge("azure", {}, {})


def test_inputs_are_untouched_and_unshared() -> None:
    template = load("k8s_template.yaml")
    override = load("k8s_override.yaml")
    before = copy.deepcopy((template, override))
    merged = merge("k8s", template, override)
    assert (template, override) == before
    merged["spec"]["containers"][0]["env"].clear()
    merged["spec"]["tolerations"][0]["key"] = "changed"
    merged["metadata"]["labels"].clear()
    assert (template, override) == before
