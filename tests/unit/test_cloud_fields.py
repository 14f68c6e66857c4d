"""The member allowlist of launch parameters per cloud (corral.shared.cloud_fields, issue #47
item 3): identity, network, metadata, host access, privilege and secrets are refused, naming
the field; the fields a workload needs (tags, disks, capacity, scheduling) pass.

The Kubernetes cases follow the controls of the Pod Security Standards' *baseline* profile as
documented (kubernetes.io/docs/concepts/security/pod-security-standards: Host Namespaces,
Privileged Containers, Capabilities, HostPath Volumes, Host Ports), which a member's pod patch
must not reach, plus a service account and a Secret volume (the control plane's own)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.shared.cloud_fields import FIELDS_BY_CLOUD, member_refusals
from corral.shared.configio import format_loc


def refused(cloud: str, config: dict[str, Any]) -> list[str]:
    return [format_loc(path) for path, _ in member_refusals(cloud, config)]


AT = "advanced_instance_config"


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("IamInstanceProfile", {"Arn": "arn:aws:iam::1:instance-profile/admin"}, "identity"),
        ("SecurityGroupIds", ["sg-open"], "network"),
        ("SubnetId", "subnet-1", "network"),
        ("NetworkInterfaces", [{"DeviceIndex": 0, "Groups": ["sg-1"]}], "network"),
        ("MetadataOptions", {"HttpTokens": "optional"}, "metadata"),
        ("UserData", "IyEvYmluL3NoCg==", "user data"),
        ("KeyName", "mine", "identity"),
        ("LaunchTemplate", {"LaunchTemplateName": "admin"}, "metadata"),
    ],
)
def test_aws_refuses_identity_network_and_metadata(field: str, value: Any, kind: str) -> None:
    found = member_refusals("aws", {field: value, "EbsOptimized": True})
    assert [format_loc(p) for p, _ in found] == [f"{AT}.{field}"]
    assert kind in found[0][1] and "admin" in found[0][1]


def test_aws_passes_tags_disks_capacity_and_markets() -> None:
    config = {
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "t", "Value": "v"}]}],
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 200}}],
        "CapacityReservationSpecification": {"CapacityReservationTarget": {"X": "cr-1"}},
        "InstanceMarketOptions": {"MarketType": "spot"},
        "Placement": {"GroupName": "pg"},
    }
    assert refused("aws", config) == []


def test_aws_refuses_another_volumes_snapshot_and_a_host_placement() -> None:
    config = {
        "BlockDeviceMappings": [{"DeviceName": "/dev/sdb", "Ebs": {"SnapshotId": "snap-1"}}],
        "Placement": {"HostId": "h-1"},
    }
    assert refused("aws", config) == [
        f"{AT}.BlockDeviceMappings[0].Ebs.SnapshotId",
        f"{AT}.Placement.HostId",
    ]


def test_gcp_refuses_service_accounts_networks_and_startup_scripts_in_either_spelling() -> None:
    config = {
        "instanceProperties": {
            "serviceAccounts": [{"email": "admin@p.iam", "scopes": ["cloud-platform"]}],
            "network_interfaces": [{"network": "global/networks/admin"}],
            "metadata": {"items": [{"key": "startup-script", "value": "curl ..."}]},
            "tags": {"items": ["allow-all"]},
            "labels": {"team": "b"},
            "scheduling": {"preemptible": True},
        }
    }
    found = member_refusals("gcp", config)
    assert [format_loc(p) for p, _ in found] == [
        f"{AT}.instanceProperties.serviceAccounts",
        f"{AT}.instanceProperties.network_interfaces",
        f"{AT}.instanceProperties.metadata",
        f"{AT}.instanceProperties.tags",
    ]
    assert ["identity" in found[0][1], "network" in found[1][1], "boot" in found[2][1]] == [
        True
    ] * 3


def test_gcp_passes_labels_accelerators_disks_and_reservations() -> None:
    config = {
        "instance_properties": {
            "labels": {"team": "b"},
            "guestAccelerators": [{"acceleratorType": "nvidia-l4", "acceleratorCount": 1}],
            "disks": [{"boot": True, "initializeParams": {"diskSizeGb": 200}}],
            "reservation_affinity": {"consumeReservationType": "ANY_RESERVATION"},
        }
    }
    assert refused("google", config) == []
    # An existing disk by name is another workload's data.
    assert refused("gcp", {"instanceProperties": {"disks": [{"source": "zones/a/disks/x"}]}}) == [
        f"{AT}.instanceProperties.disks[0].source"
    ]


POD_CONTROLS = [
    # Host Namespaces
    ({"spec": {"hostNetwork": True}}, "spec.hostNetwork", "network"),
    ({"hostPID": True}, "hostPID", "host"),
    ({"spec": {"hostIPC": True}}, "spec.hostIPC", "host"),
    # HostPath Volumes
    (
        {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
        "spec.volumes[0].hostPath",
        "host",
    ),
    # Privileged Containers, Capabilities
    (
        {"containers": [{"name": "main", "securityContext": {"privileged": True}}]},
        "containers[0].securityContext",
        "privilege",
    ),
    (
        {"spec": {"containers": [{"name": "m", "securityContext": {"capabilities": {}}}]}},
        "spec.containers[0].securityContext",
        "privilege",
    ),
    # Host Ports
    (
        {"containers": [{"name": "m", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
        "containers[0].ports[0].hostPort",
        "host",
    ),
    # Identity and the control plane's Secret
    ({"spec": {"serviceAccountName": "corral-controller"}}, "spec.serviceAccountName", "identity"),
    (
        {"volumes": [{"name": "s", "secret": {"secretName": "corral-redis"}}]},
        "volumes[0].secret",
        "secrets",
    ),
    (
        {"containers": [{"name": "m", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {}}}]}]},
        "containers[0].env[0].valueFrom",
        "secrets",
    ),
    (
        {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "team-a"}}]},
        "volumes[0].persistentVolumeClaim",
        "data",
    ),
]


@pytest.mark.parametrize(("patch", "path", "kind"), POD_CONTROLS)
def test_kubernetes_refuses_what_the_baseline_pod_security_standard_forbids(
    patch: dict[str, Any], path: str, kind: str
) -> None:
    found = member_refusals("kubernetes", patch)
    assert [format_loc(p) for p, _ in found] == [f"{AT}.{path}"]
    assert kind in found[0][1]


def test_kubernetes_passes_resources_scheduling_and_an_empty_dir() -> None:
    patch = {
        "metadata": {"labels": {"team": "b"}, "annotations": {"a": "b"}},
        "spec": {
            "nodeSelector": {"gpu": "l4"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                    "env": [{"name": "X", "value": "1"}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }
    assert refused("k8s", patch) == []


def test_a_cloud_without_an_allowlist_takes_nothing_from_a_member() -> None:
    assert refused("local", {"anything": 1}) == [AT]
    assert refused("local", {}) == [] and member_refusals("aws", None) == []


def test_the_path_starts_where_the_config_sits_in_the_task() -> None:
    at = ("compute_config", "worker_nodes", 1, "advanced_instance_config")
    found = member_refusals("aws", {"UserData": "x"}, at)
    assert (
        format_loc(found[0][0])
        == "compute_config.worker_nodes[1].advanced_instance_config.UserData"
    )


def test_every_cloud_names_its_allowed_fields_in_the_refusal() -> None:
    for cloud in FIELDS_BY_CLOUD:
        ((_, message),) = member_refusals(cloud, {"notAField": 1})
        assert "a member may set here:" in message
