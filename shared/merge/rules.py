"""Each cloud's merge rules for ``advanced_instance_config``, written as data.

The fields named here deep-merge by an identity key; every other field follows its parent's
``other`` rule: replaced whole on AWS and Google Cloud, merged recursively on Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.shared.merge.engine import ByIndex, Deep, Keyed, Replace, Rule, Struct, Union

# AWS (EC2 RunInstances / launch template data). Keys are PascalCase, matched exactly. A matched
# entry merges key by key (the override's keys win, the others stay); inside it only a
# TagSpecification's Tags merge again, by Key. Everything else - CapacityReservationSpecification
# included - is replaced whole.
_AWS_ENTRY = Struct(other=Replace())
AWS = Struct(
    fields={
        "TagSpecifications": Keyed(
            keys=("ResourceType",),
            entry=Struct(fields={"Tags": Keyed(keys=("Key",), entry=_AWS_ENTRY)}),
        ),
        # EC2 reads a missing NetworkCardIndex as card 0, so {DeviceIndex: 0} and
        # {DeviceIndex: 0, NetworkCardIndex: 0} are the same interface.
        "NetworkInterfaces": Keyed(
            keys=("DeviceIndex", "NetworkCardIndex"),
            entry=_AWS_ENTRY,
            key_defaults={"NetworkCardIndex": 0},
        ),
        "BlockDeviceMappings": Keyed(keys=("DeviceName",), entry=_AWS_ENTRY),
    },
    other=Replace(),
)

# Google Cloud (an instance template body). The API speaks camelCase (instanceProperties,
# deviceName), the Python client snake_case (instance_properties, device_name); users write
# either, so every field name here matches in both spellings. Label names are data, not field
# names, and match exactly.
_GCP_ENTRY = Struct(other=Replace(), fold_case=True)
_GCP_INSTANCE_PROPERTIES = Struct(
    fields={
        "labels": Struct(other=Replace()),
        "network_interfaces": ByIndex(entry=_GCP_ENTRY),
        "disks": Keyed(keys=("device_name",), entry=_GCP_ENTRY, boot_first=True),
    },
    other=Replace(),
    fold_case=True,
)
GCP = Struct(
    fields={"instance_properties": _GCP_INSTANCE_PROPERTIES}, other=Replace(), fold_case=True
)


def _one_volume_source(template: Mapping[Any, Any], override: Mapping[Any, Any]) -> str | None:
    """Kubernetes merges volumes and resource claims with ``retainKeys``: an entry has exactly
    one source (emptyDir, hostPath, ...) and a patch naming another source drops the first.
    That would remove the template's source, so a new source on a template entry is refused."""
    t_sources = sorted(str(k) for k in template if k != "name")
    new_sources = sorted(str(k) for k in override if k != "name" and k not in template)
    if t_sources and new_sources:
        return (
            f"{template.get('name')!r} would have two sources ({', '.join(t_sources)} from "
            f"the template, {', '.join(new_sources)} from the workload); a workload cannot "
            "swap the source of a template entry"
        )
    return None


# Kubernetes: a strategic merge patch over a Pod ({metadata, spec}) or a bare PodSpec. Merge
# keys are Kubernetes' own patchMergeKey tags (k8s.io/api core/v1 types.go); lists without one
# (tolerations, command, args, nodeSelectorTerms, ...) are replaced, mappings merge recursively.
def _k8s_list(key: str) -> Keyed:
    return Keyed(keys=(key,), entry=Struct(other=Deep()))


_K8S_CONTAINER = Struct(
    fields={
        "ports": _k8s_list("containerPort"),
        "env": _k8s_list("name"),
        "volumeMounts": _k8s_list("mountPath"),
        "volumeDevices": _k8s_list("devicePath"),
    },
    other=Deep(),
)
_K8S_POD_SPEC_FIELDS: dict[str, Rule] = {
    "containers": Keyed(keys=("name",), entry=_K8S_CONTAINER),
    "initContainers": Keyed(keys=("name",), entry=_K8S_CONTAINER),
    "ephemeralContainers": Keyed(keys=("name",), entry=_K8S_CONTAINER),
    "volumes": Keyed(keys=("name",), entry=Struct(other=Deep()), check=_one_volume_source),
    "resourceClaims": Keyed(keys=("name",), entry=Struct(other=Deep()), check=_one_volume_source),
    "imagePullSecrets": _k8s_list("name"),
    "hostAliases": _k8s_list("ip"),
    "topologySpreadConstraints": _k8s_list("topologyKey"),
    "schedulingGates": _k8s_list("name"),
}
_K8S_OBJECT_META = Struct(
    fields={"finalizers": Union(), "ownerReferences": _k8s_list("uid")}, other=Deep()
)
KUBERNETES = Struct(
    fields={
        "metadata": _K8S_OBJECT_META,
        "spec": Struct(fields=_K8S_POD_SPEC_FIELDS, other=Deep()),
        **_K8S_POD_SPEC_FIELDS,
    },
    other=Deep(),
)

# Cloud name (as users write it, lower-cased) -> the rules for its advanced_instance_config.
RULES_BY_CLOUD: dict[str, Struct] = {
    "aws": AWS,
    "gcp": GCP,
    "google": GCP,
    "kubernetes": KUBERNETES,
    "k8s": KUBERNETES,
}
