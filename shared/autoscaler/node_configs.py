"""How a Ray cluster file's ``node_config`` reads, by the file's ``provider.type``.

Ray hands a node type's ``node_config`` to its cloud's API as written, so what it means is the
file format's, keyed by the provider type the file names: an AWS file writes
``InstanceType`` (EC2's RunInstances), a GCP file ``machineType`` with GPUs attached as
``guestAccelerators`` (Compute Engine's instance body), a Kubernetes file a pod manifest whose
container requests are the node. A provider type Ray's files do not define (a cloud Corral
has that Ray has not) reads either instance type key and attaches nothing.

These are readings of the file, not of Corral's clouds: the cloud a cluster runs on is the
file's (or, played elsewhere, the one that stands in for it), and nothing here asks which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeConfigs:
    """One provider type's node configs: where the instance type is written, and what
    else a node config attaches or asks for."""

    type_keys: tuple[str, ...] = ("InstanceType", "machineType")
    pods: bool = False  # the node config is a pod manifest: its containers state the node

    def type_key(self, node_config: Mapping[str, Any]) -> str | None:
        """The key naming the instance type in this node config (problems point at it)."""
        return next((k for k in self.type_keys if node_config.get(k)), None)

    def instance_type(self, node_config: Mapping[str, Any]) -> str | None:
        """The instance type launched (the last part of a ``zones/.../machineTypes/NAME``
        path too)."""
        key = self.type_key(node_config)
        return str(node_config[key]).rsplit("/", 1)[-1] if key is not None else None

    def attached_gpus(self, node_config: Mapping[str, Any]) -> tuple[int, str | None]:
        """GPUs the node config attaches beside its instance type: count and catalog name."""
        return 0, None


@dataclass(frozen=True)
class GuestAccelerators(NodeConfigs):
    """Compute Engine's: an N1 machine carries the GPUs its ``guestAccelerators`` list."""

    def attached_gpus(self, node_config: Mapping[str, Any]) -> tuple[int, str | None]:
        count, name = 0, None
        for entry in node_config.get("guestAccelerators") or []:
            if isinstance(entry, Mapping):
                count += int(entry.get("acceleratorCount", 1))
                raw = str(entry.get("acceleratorType", "")).rsplit("/", 1)[-1].lower()
                for prefix in ("nvidia-tesla-", "nvidia-"):
                    raw = raw.removeprefix(prefix)
                name = raw.upper() or name
        return count, name


ANY_PROVIDER = NodeConfigs()
BY_PROVIDER_TYPE: dict[str, NodeConfigs] = {
    "aws": NodeConfigs(("InstanceType",)),
    "gcp": GuestAccelerators(("machineType",)),
    "kubernetes": NodeConfigs((), pods=True),
}


def node_configs(provider_type: str) -> NodeConfigs:
    """How node configs read in a file whose ``provider.type`` is ``provider_type``."""
    return BY_PROVIDER_TYPE.get(provider_type.lower(), ANY_PROVIDER)


def asks_spot(node_config: Mapping[str, Any]) -> bool:
    """Whether a node config launches spot (``InstanceMarketOptions``) or preemptible
    (``scheduling``) capacity. Each key is one file format's, so both are read."""
    market = node_config.get("InstanceMarketOptions")
    if isinstance(market, Mapping) and str(market.get("MarketType", "")).lower() == "spot":
        return True
    sched = node_config.get("scheduling")
    if isinstance(sched, Mapping):
        model = str(sched.get("provisioningModel", sched.get("provisioning_model", "")))
        return bool(sched.get("preemptible")) or model.upper() == "SPOT"
    return False
