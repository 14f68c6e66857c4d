"""``advanced_instance_config`` merge rules: a workload's values on top of a machine pool's.

A machine pool's launch template gives an instance its default ``advanced_instance_config``;
a workload's own ``advanced_instance_config`` is merged on top of it. The workload may add and
override, never remove.

AWS
    ``TagSpecifications`` merge by ``ResourceType`` (their ``Tags`` by ``Key``),
    ``NetworkInterfaces`` by ``(DeviceIndex, NetworkCardIndex)`` (a missing card index is 0, as
    EC2 reads it), ``BlockDeviceMappings`` by ``DeviceName``. A matched entry takes the
    override's keys and keeps the template's others. Every other field is replaced whole,
    nested mappings such as ``CapacityReservationSpecification`` included.
Google Cloud
    Under ``instance_properties``: ``labels`` merge by label name, ``network_interfaces`` by
    position, ``disks`` by ``device_name``; the boot disk (``boot: true``) is kept at index 0,
    and an override disk with ``boot: true`` and no ``device_name`` extends the template's boot
    disk. Everything else is replaced whole. Field names match in camelCase or snake_case; the
    result keeps the template's spelling for the fields the template has and the override's
    for the fields only the override has.
Kubernetes
    A strategic merge patch over a Pod (``metadata`` + ``spec``) or a bare PodSpec, with
    Kubernetes' merge keys: containers, init and ephemeral containers, volumes, env,
    imagePullSecrets, schedulingGates, resourceClaims by ``name``; volumeMounts by
    ``mountPath``; volumeDevices by ``devicePath``; ports by ``containerPort``; hostAliases by
    ``ip``; topologySpreadConstraints by ``topologyKey``. Mappings merge recursively; other
    lists (tolerations among them) are replaced.

Refused, with a :class:`MergeError` naming the path: a patch directive (``$patch: delete``,
``$patch: replace``, ``$retainKeys``, ``$deleteFromPrimitiveList/...``, ...); a ``null`` over a
key the template sets; an override list entry without its identity key, or two override
entries for the same identity. A ``null`` over a key the template lacks removes nothing and is
dropped. Matched entries keep the template's place in the list; new ones follow, in the
override's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.shared.merge.engine import MergeError, merge_struct, refuse, refuse_directives
from corral.shared.merge.rules import RULES_BY_CLOUD

__all__ = ["CLOUDS", "MergeError", "merge_advanced_instance_config"]

# The cloud names merge_advanced_instance_config accepts (aliases included).
CLOUDS: tuple[str, ...] = tuple(RULES_BY_CLOUD)


def merge_advanced_instance_config(
    cloud: str, template: Mapping[str, Any], override: Mapping[str, Any]
) -> dict[str, Any]:
    """The launch template's ``advanced_instance_config`` with the workload's merged on top.

    ``cloud`` is ``aws``, ``gcp`` (or ``google``) or ``kubernetes`` (or ``k8s``); any other
    name is a ValueError. Returns a new dict that shares no mutable value with the inputs,
    which are left untouched. Raises :class:`MergeError` when the override would remove
    something from the template or cannot be matched against it.
    """
    rules = RULES_BY_CLOUD.get(cloud.strip().lower())
    if rules is None:
        raise ValueError(f"unknown cloud {cloud!r}; expected one of: {', '.join(CLOUDS)}")
    if not isinstance(template, Mapping):
        raise refuse((), "the template's advanced_instance_config must be a mapping", "template")
    if not isinstance(override, Mapping):
        raise refuse((), "the workload's advanced_instance_config must be a mapping")
    refuse_directives(override)
    merged: dict[str, Any] = merge_struct(rules, template, override, (), ())
    return merged
