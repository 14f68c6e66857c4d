"""Which cloud-level fields a member may set: an allowlist per cloud, written as data.

A task's ``advanced_instance_config`` (and a compute config's, and its node groups') goes to
the cloud as launch parameters: on AWS the RunInstances call, on Google Cloud the instance's
``instanceProperties``, on Kubernetes a strategic merge patch over the Pod. What those can set
is what Corral's own cloud identity may pass on: an instance profile, a security group, user
data, a service account, a host path, a privileged container, the control plane's Secret. So a
*member's* launch parameters pass an allowlist: only the fields listed below, everything else
refused, naming the field and why. An admin's (a pool's launch template, a cluster file, an
admin's task) are not checked: the admin owns the cloud account.

The allowlist is nested: ``ANY`` allows a field and everything under it; a mapping allows only
the sub-fields it lists (for a list, in each of its entries). A field not listed is refused;
:data:`WHY` says what kind of field a well-known refused one is, for the message. Google Cloud
field names match in camelCase or snake_case (as the merge rules read them). A cloud with no
allowlist here takes no launch parameters from a member.

Ray cluster files' ``node_config`` and Determined pod specs only ever come from admins (the
cluster and pool routes are admins'), so they are not checked here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Union

from .configio import PathKey
from .merge.engine import fold

ANY: Final = True
Allow = Mapping[str, Union["Allow", bool]]


@dataclass(frozen=True)
class CloudFields:
    """One cloud's allowlist for a member's launch parameters."""

    allowed: Allow
    fold_case: bool = False  # match field names in camelCase or snake_case (Google Cloud)
    # The top level may be the object itself or this wrapper of it (a Pod's ``spec``).
    wrappers: tuple[str, ...] = field(default_factory=tuple)


# What a well-known refused field is: the message says so (field name as matched).
IDENTITY = "identity (the machine's cloud role or service account)"
NETWORK = "network placement (subnets, security groups, interfaces, the host's network)"
METADATA = "instance metadata or boot-time user data (what the machine runs at boot)"
HOST = "access to the host (its filesystem, processes, IPC or devices)"
PRIVILEGE = "privilege escalation (privileged containers, capabilities, the security context)"
SECRETS = "secrets or another workload's data (secret, config map and volume claims)"
WHY: Mapping[str, str] = {
    # AWS
    "IamInstanceProfile": IDENTITY,
    "SecurityGroupIds": NETWORK,
    "SecurityGroups": NETWORK,
    "SubnetId": NETWORK,
    "NetworkInterfaces": NETWORK,
    "PrivateIpAddress": NETWORK,
    "MetadataOptions": METADATA,
    "UserData": METADATA,
    "KeyName": IDENTITY,
    "LaunchTemplate": METADATA,
    "SnapshotId": SECRETS,
    "KmsKeyId": SECRETS,
    # Google Cloud (folded)
    "serviceaccounts": IDENTITY,
    "networkinterfaces": NETWORK,
    "canipforward": NETWORK,
    "tags": NETWORK,
    "metadata": METADATA,
    "source": SECRETS,
    "sourcesnapshot": SECRETS,
    # Kubernetes
    "serviceAccountName": IDENTITY,
    "serviceAccount": IDENTITY,
    "automountServiceAccountToken": IDENTITY,
    "hostNetwork": NETWORK,
    "dnsPolicy": NETWORK,
    "dnsConfig": NETWORK,
    "hostPID": HOST,
    "hostIPC": HOST,
    "hostUsers": HOST,
    "hostPath": HOST,
    "nodeName": HOST,
    "hostPort": HOST,
    "securityContext": PRIVILEGE,
    "privileged": PRIVILEGE,
    "capabilities": PRIVILEGE,
    "allowPrivilegeEscalation": PRIVILEGE,
    "secret": SECRETS,
    "configMap": SECRETS,
    "projected": SECRETS,
    "persistentVolumeClaim": SECRETS,
    "valueFrom": SECRETS,
    "envFrom": SECRETS,
    "imagePullSecrets": SECRETS,
}

_EBS: Allow = {
    k: ANY for k in ("VolumeSize", "VolumeType", "Iops", "Throughput", "DeleteOnTermination")
}
AWS = CloudFields(
    allowed={
        "TagSpecifications": ANY,
        "BlockDeviceMappings": {
            "DeviceName": ANY,
            "VirtualName": ANY,
            "NoDevice": ANY,
            "Ebs": _EBS,
        },
        "CapacityReservationSpecification": ANY,
        "InstanceMarketOptions": ANY,
        "CpuOptions": ANY,
        "EbsOptimized": ANY,
        "Monitoring": ANY,
        "HibernationOptions": ANY,
        "CreditSpecification": ANY,
        "MaintenanceOptions": ANY,
        "Placement": {"AvailabilityZone": ANY, "GroupName": ANY, "PartitionNumber": ANY},
        "ImageId": ANY,
        "InstanceType": ANY,
    }
)

_GCP_DISK: Allow = {
    "boot": ANY,
    "autodelete": ANY,
    "devicename": ANY,
    "type": ANY,
    "mode": ANY,
    "interface": ANY,
    "initializeparams": {
        "disksizegb": ANY,
        "disktype": ANY,
        "sourceimage": ANY,
        "labels": ANY,
        "provisionediops": ANY,
        "provisionedthroughput": ANY,
    },
}
_GCP_PROPERTIES: Allow = {
    "labels": ANY,
    "machinetype": ANY,
    "mincpuplatform": ANY,
    "guestaccelerators": ANY,
    "scheduling": ANY,
    "reservationaffinity": ANY,
    "advancedmachinefeatures": ANY,
    "shieldedinstanceconfig": ANY,
    "displaydevice": ANY,
    "resourcepolicies": ANY,
    "description": ANY,
    "disks": _GCP_DISK,
}
GCP = CloudFields(allowed={"instanceproperties": _GCP_PROPERTIES}, fold_case=True)

_K8S_CONTAINER: Allow = {
    "name": ANY,
    "image": ANY,
    "imagePullPolicy": ANY,
    "command": ANY,
    "args": ANY,
    "workingDir": ANY,
    "env": {"name": ANY, "value": ANY},
    "ports": {"containerPort": ANY, "name": ANY, "protocol": ANY},
    "resources": ANY,
    "volumeMounts": {"name": ANY, "mountPath": ANY, "readOnly": ANY, "subPath": ANY},
    "livenessProbe": ANY,
    "readinessProbe": ANY,
    "startupProbe": ANY,
    "lifecycle": ANY,
    "stdin": ANY,
    "tty": ANY,
    "terminationMessagePolicy": ANY,
}
_K8S_POD_SPEC: Allow = {
    "containers": _K8S_CONTAINER,
    "initContainers": _K8S_CONTAINER,
    "nodeSelector": ANY,
    "affinity": ANY,
    "tolerations": ANY,
    "topologySpreadConstraints": ANY,
    "schedulingGates": ANY,
    "terminationGracePeriodSeconds": ANY,
    "activeDeadlineSeconds": ANY,
    "runtimeClassName": ANY,
    "resourceClaims": ANY,
    "hostAliases": ANY,
    "volumes": {"name": ANY, "emptyDir": ANY},
}
KUBERNETES = CloudFields(
    allowed={
        "metadata": {"labels": ANY, "annotations": ANY},
        "spec": _K8S_POD_SPEC,
        **_K8S_POD_SPEC,  # a bare PodSpec
    }
)

# Cloud name (as users write it, lower-cased) -> what a member may set there.
FIELDS_BY_CLOUD: Mapping[str, CloudFields] = {
    "aws": AWS,
    "gcp": GCP,
    "google": GCP,
    "kubernetes": KUBERNETES,
    "k8s": KUBERNETES,
}


def member_refusals(
    cloud: str, config: Mapping[str, Any] | None, at: PathKey = ("advanced_instance_config",)
) -> list[tuple[PathKey, str]]:
    """The fields of a member's launch parameters for ``cloud`` that are not on its allowlist,
    each with its path (under ``at``) and why; empty when every field may be set."""
    if not config:
        return []
    rules = FIELDS_BY_CLOUD.get(cloud.strip().lower())
    if rules is None:
        return [(at, f"a member's task sets no launch parameters on {cloud} (only an admin's)")]
    return list(_walk(rules, rules.allowed, config, at, cloud))


def _walk(
    rules: CloudFields, allowed: Allow, value: Any, at: PathKey, cloud: str
) -> list[tuple[PathKey, str]]:
    if isinstance(value, list):
        found: list[tuple[PathKey, str]] = []
        for index, item in enumerate(value):
            found.extend(_walk(rules, allowed, item, (*at, index), cloud))
        return found
    if not isinstance(value, Mapping):
        return []  # a scalar where a mapping belongs: the cloud's own check refuses it
    found = []
    for key, sub in value.items():
        name = fold(key) if rules.fold_case else key
        rule = allowed.get(name) if isinstance(name, str) else None
        if rule is None:
            found.append(((*at, key), _why(name, cloud, allowed, rules.fold_case)))
        elif rule is not ANY:
            assert not isinstance(rule, bool)
            found.extend(_walk(rules, rule, sub, (*at, key), cloud))
    return found


def _why(name: Any, cloud: str, allowed: Allow, folded: bool) -> str:
    kind = WHY.get(name) if isinstance(name, str) else None
    what = f"sets {kind}: " if kind else "is not among the fields a member may set: "
    listed = ", ".join(sorted(allowed)) + (" (camelCase or snake_case)" if folded else "")
    return (
        f"{what}on {cloud} an admin sets it (in a pool's launch template or a cluster file); "
        f"a member may set here: {listed}"
    )
